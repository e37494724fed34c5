"""Versioned schema migrations, tracked by SQLite's user_version."""

from __future__ import annotations

# Each entry moves the schema from version i to i + 1. Never edit a shipped entry: append a new one.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE sessions (
        id           TEXT PRIMARY KEY,
        key          TEXT NOT NULL,
        created_at   REAL NOT NULL,
        updated_at   REAL NOT NULL,
        ended_at     REAL,
        surface      TEXT,
        chat_type    TEXT,
        display_name TEXT,
        send_policy  TEXT CHECK (send_policy IN ('allow', 'deny')),
        verbosity    TEXT,
        last_route   TEXT
    );
    -- The database itself guarantees one active session per key.
    CREATE UNIQUE INDEX sessions_one_active_per_key ON sessions (key) WHERE ended_at IS NULL;
    CREATE INDEX sessions_by_key ON sessions (key, created_at);
    CREATE INDEX sessions_by_updated ON sessions (updated_at);

    CREATE TABLE runs (
        id                TEXT PRIMARY KEY,
        session_id        TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        status            TEXT NOT NULL,
        channel           TEXT,
        input_hash        TEXT,
        -- The newest user message the run saw: its rows replay right after it, before later messages.
        input_upto        INTEGER,
        started_at        REAL NOT NULL,
        ended_at          REAL,
        iterations        INTEGER NOT NULL DEFAULT 0,
        prompt_tokens     INTEGER NOT NULL DEFAULT 0,
        completion_tokens INTEGER NOT NULL DEFAULT 0,
        error             TEXT,
        trace             TEXT
    );
    CREATE INDEX runs_by_session ON runs (session_id, started_at);
    CREATE INDEX runs_by_status ON runs (status) WHERE status = 'running';

    CREATE TABLE messages (
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id      TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        run_id          TEXT REFERENCES runs (id) ON DELETE SET NULL,
        step            INTEGER,
        kind            TEXT NOT NULL CHECK (kind IN ('user', 'assistant', 'tool_call', 'tool_result')),
        content         TEXT NOT NULL DEFAULT '',
        tool_name       TEXT,
        tool_call_id    TEXT,
        tool_input      TEXT,
        tool_status     TEXT CHECK (tool_status IN ('success', 'error')),
        sender          TEXT,
        platform_msg_id TEXT,
        created_at      REAL NOT NULL
    );
    CREATE INDEX messages_by_session ON messages (session_id, id);
    -- A platform that redelivers a message (restart, webhook retry) must not start a second run.
    CREATE UNIQUE INDEX messages_platform_once ON messages (platform_msg_id)
        WHERE platform_msg_id IS NOT NULL;
    -- Loaded groups are derived from history with this partial index: the query touches only the
    -- session's successful loads, so its cost does not grow with the length of the session.
    CREATE INDEX messages_group_loads ON messages (session_id)
        WHERE kind = 'tool_call' AND tool_name = 'load_tool_group' AND tool_status = 'success';

    CREATE TABLE memories (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        scope      TEXT NOT NULL,
        content    TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE INDEX memories_by_scope ON memories (scope, id);
    """,
    # 2: the channel a thread session belongs to (Discord threads are keyed by their own id).
    """
    ALTER TABLE sessions ADD COLUMN parent_id TEXT;
    """,
    # 3: the outbox, and the mark on messages one session's agent injected into another.
    """
    CREATE TABLE outbox (
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        session_key     TEXT,
        session_id      TEXT REFERENCES sessions (id) ON DELETE SET NULL,
        run_id          TEXT,
        kind            TEXT NOT NULL,
        surface         TEXT NOT NULL,
        chat_id         TEXT NOT NULL,
        thread_id       TEXT,
        reply_to        TEXT,
        text            TEXT NOT NULL,
        state           TEXT NOT NULL CHECK (state IN ('pending', 'sent', 'suppressed', 'failed')),
        -- Why it was suppressed (the deciding rule) or why it failed.
        reason          TEXT,
        platform_msg_id TEXT,
        -- Items that must never go out twice (an announce, a run's reply) carry a unique key.
        dedupe_key      TEXT,
        created_at      REAL NOT NULL,
        updated_at      REAL NOT NULL
    );
    CREATE UNIQUE INDEX outbox_once ON outbox (dedupe_key) WHERE dedupe_key IS NOT NULL;
    CREATE INDEX outbox_by_session ON outbox (session_key, state);
    CREATE INDEX outbox_pending ON outbox (surface, chat_id, id) WHERE state = 'pending';
    -- The key of the session whose agent wrote this 'user' message; NULL when a human wrote it.
    ALTER TABLE messages ADD COLUMN via_session TEXT;
    """,
    # 4: each chunk of an item is a row of its own, a send in flight is 'sending' (after a crash it is
    # 'uncertain' or resent), and a chunk keeps the nonce a platform dedupes resends by (Discord).
    # SQLite cannot change a CHECK constraint in place, so the table is rebuilt.
    """
    CREATE TABLE outbox_v4 (
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        session_key     TEXT,
        session_id      TEXT REFERENCES sessions (id) ON DELETE SET NULL,
        run_id          TEXT,
        kind            TEXT NOT NULL,
        surface         TEXT NOT NULL,
        chat_id         TEXT NOT NULL,
        thread_id       TEXT,
        reply_to        TEXT,
        text            TEXT NOT NULL,
        state           TEXT NOT NULL CHECK (
            state IN ('pending', 'sending', 'sent', 'suppressed', 'failed', 'uncertain')
        ),
        reason          TEXT,
        platform_msg_id TEXT,
        dedupe_key      TEXT,
        -- Chunk `part` (from 0) of an item sent as `parts` messages; the rows of one item are
        -- written together, so their ids are consecutive and the item's first row is id - part.
        part            INTEGER NOT NULL DEFAULT 0,
        parts           INTEGER NOT NULL DEFAULT 1,
        nonce           TEXT,
        created_at      REAL NOT NULL,
        updated_at      REAL NOT NULL
    );
    INSERT INTO outbox_v4 (id, session_key, session_id, run_id, kind, surface, chat_id, thread_id,
        reply_to, text, state, reason, platform_msg_id, dedupe_key, created_at, updated_at)
        SELECT id, session_key, session_id, run_id, kind, surface, chat_id, thread_id, reply_to, text,
        state, reason, platform_msg_id, dedupe_key, created_at, updated_at FROM outbox;
    DROP TABLE outbox;
    ALTER TABLE outbox_v4 RENAME TO outbox;
    CREATE UNIQUE INDEX outbox_once ON outbox (dedupe_key, part) WHERE dedupe_key IS NOT NULL;
    CREATE INDEX outbox_by_session ON outbox (session_key, state);
    -- What a restart must still deliver: never sent, or in flight when the process died.
    CREATE INDEX outbox_open ON outbox (id) WHERE state IN ('pending', 'sending');
    -- How far a session's messages have been taken up by runs: one index seek per turn.
    CREATE INDEX runs_answered ON runs (session_id, input_upto);
    """,
    # 5: per-chat model profiles (/model, kept across /clear like /send), what a run was for (a turn,
    # or a compaction whose trace is the summary request), and the summaries that replace old turns.
    """
    ALTER TABLE sessions ADD COLUMN model_profile TEXT;
    ALTER TABLE runs ADD COLUMN kind TEXT NOT NULL DEFAULT 'turn';
    CREATE TABLE summaries (
        id             INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id     TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        -- The compaction run that wrote it; its trace holds the summary request.
        run_id         TEXT,
        -- The newest user message whose turn it covers: replay starts after that turn.
        upto           INTEGER NOT NULL,
        content        TEXT NOT NULL,
        turns          INTEGER NOT NULL,
        -- The characters of the turns it replaced (not counting an earlier summary it folded in).
        replaced_chars INTEGER NOT NULL,
        created_at     REAL NOT NULL
    );
    CREATE INDEX summaries_by_session ON summaries (session_id, id);
    """,
    # 6: the processes running on the database, for `bridge status`: which one answers (active),
    # which stand by, what each holds, and when each last said it was alive.
    """
    CREATE TABLE workers (
        id         TEXT PRIMARY KEY,
        host       TEXT NOT NULL,
        pid        INTEGER NOT NULL,
        role       TEXT NOT NULL CHECK (role IN ('active', 'standby')),
        holds      TEXT NOT NULL DEFAULT '',
        started_at REAL NOT NULL,
        seen_at    REAL NOT NULL
    );
    """,
    # 7: several workers on one database share the work. `intake` holds each chat message until a
    # run takes it up: the shared queue workers claim from. runs and outbox rows name the worker
    # that wrote them, so the rows of a worker that died are found and taken over.
    """
    CREATE TABLE intake (
        message_id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE
    );
    CREATE INDEX intake_by_session ON intake (session_id, message_id);
    INSERT INTO intake (message_id, session_id)
        SELECT m.id, m.session_id FROM messages m JOIN sessions s ON s.id = m.session_id
        WHERE s.ended_at IS NULL AND m.kind = 'user' AND m.via_session IS NULL
          AND m.id > COALESCE((SELECT MAX(input_upto) FROM runs WHERE session_id = m.session_id), 0);
    ALTER TABLE runs ADD COLUMN worker_id TEXT;
    ALTER TABLE outbox ADD COLUMN worker_id TEXT;
    CREATE INDEX runs_running ON runs (worker_id) WHERE status = 'running';
    CREATE INDEX outbox_open_by_worker ON outbox (worker_id) WHERE state IN ('pending', 'sending');
    """,
    # 8: DM pairing. A stranger's one live code (the key allows no second), and the people owners
    # approved, who may DM the bot as if listed in allowed_users until revoked.
    """
    CREATE TABLE pairing_codes (
        surface      TEXT NOT NULL,
        user_id      TEXT NOT NULL,
        display_name TEXT,
        code         TEXT NOT NULL UNIQUE,
        -- The chat they wrote from (a Discord DM has its own channel id), told when approved.
        chat_id      TEXT NOT NULL,
        created_at   REAL NOT NULL,
        expires_at   REAL NOT NULL,
        -- When the code was last sent to them: repeats are rate-limited.
        sent_at      REAL NOT NULL,
        PRIMARY KEY (surface, user_id)
    );
    CREATE INDEX pairing_codes_by_expiry ON pairing_codes (expires_at);
    CREATE TABLE paired_users (
        surface      TEXT NOT NULL,
        user_id      TEXT NOT NULL,
        display_name TEXT,
        approved_at  REAL NOT NULL,
        approved_by  TEXT NOT NULL,
        PRIMARY KEY (surface, user_id)
    );
    """,
    # 9: scheduled tasks. A task's next due time moves on in the same conditional update that claims
    # a firing, so each due time fires once; task_firings records what became of each.
    """
    CREATE TABLE tasks (
        id         TEXT PRIMARY KEY,
        chat_key   TEXT NOT NULL,
        deliver_to TEXT NOT NULL,
        prompt     TEXT NOT NULL,
        kind       TEXT NOT NULL,
        expression TEXT NOT NULL,
        zone       TEXT NOT NULL,
        state      TEXT NOT NULL,
        created_at REAL NOT NULL,
        next_due   REAL,
        failures   INTEGER NOT NULL DEFAULT 0,
        last_fired REAL,
        route      TEXT
    );
    CREATE INDEX tasks_due ON tasks (next_due) WHERE state = 'active';
    CREATE INDEX tasks_by_chat ON tasks (chat_key);
    CREATE TABLE task_firings (
        task_id    TEXT NOT NULL,
        due_at     REAL NOT NULL,
        state      TEXT NOT NULL,
        started_at REAL NOT NULL,
        run_id     TEXT,
        ended_at   REAL,
        detail     TEXT,
        PRIMARY KEY (task_id, due_at)
    );
    CREATE INDEX task_firings_running ON task_firings (task_id) WHERE state = 'running';
    """,
    # 10: webhooks and `bridge tasks run-now`. An event is stored before its request is answered,
    # once per (hook, event key); its run claims it with one conditional update, as a task's firing
    # is claimed. run_requested asks the running bot to fire a task now, from another process.
    """
    ALTER TABLE tasks ADD COLUMN run_requested REAL;
    CREATE INDEX tasks_run_requested ON tasks (run_requested) WHERE run_requested IS NOT NULL;
    CREATE TABLE hook_events (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        hook        TEXT NOT NULL,
        event_key   TEXT,
        session_key TEXT NOT NULL,
        deliver_to  TEXT NOT NULL,
        prompt      TEXT NOT NULL,
        received_at REAL NOT NULL,
        state       TEXT NOT NULL,
        run_id      TEXT,
        started_at  REAL,
        ended_at    REAL,
        detail      TEXT
    );
    CREATE UNIQUE INDEX hook_events_once ON hook_events (hook, event_key) WHERE event_key IS NOT NULL;
    CREATE INDEX hook_events_open ON hook_events (id) WHERE state IN ('pending', 'running');
    """,
    # 11: loaded skills are restored from history as loaded groups are, by the same one query: the
    # partial index of successful loads covers load_skill calls too.
    """
    DROP INDEX messages_group_loads;
    CREATE INDEX messages_loads ON messages (session_id)
        WHERE kind = 'tool_call' AND tool_name IN ('load_tool_group', 'load_skill')
        AND tool_status = 'success';
    """,
    # 12: a reply's first chunk may edit the draft its answer streamed into, instead of a new message.
    """
    ALTER TABLE outbox ADD COLUMN edit_of TEXT;
    """,
    # 13: a user message keeps its attachments (JSON: where the platform has them, their hash in the
    # media store once fetched, a transcript's mark); an outbox row may carry a file to send.
    """
    ALTER TABLE messages ADD COLUMN media TEXT;
    ALTER TABLE outbox ADD COLUMN file TEXT;
    """,
    # 14: a task keeps the authority of whoever made it (bridge.sessions.authority, as JSON) and who
    # that was, so its firings act with no more than that, and a member's waiting tasks are counted.
    """
    ALTER TABLE tasks ADD COLUMN authority TEXT;
    ALTER TABLE tasks ADD COLUMN maker TEXT;
    CREATE INDEX tasks_by_maker ON tasks (chat_key, maker) WHERE state IN ('active', 'paused');
    """,
    # 15: a timestamped webhook request's signature is taken once, by every worker alike: a copy sent
    # again within the hook's max_age_s finds it here and gets 401. Kept until its timestamp expires.
    """
    CREATE TABLE hook_signatures (
        hook       TEXT NOT NULL,
        signature  TEXT NOT NULL,
        expires_at REAL NOT NULL,
        PRIMARY KEY (hook, signature)
    );
    CREATE INDEX hook_signatures_expiry ON hook_signatures (expires_at);
    """,
    # 16: ranked full-text search (search_history): what was said in each session, and the memories
    # saved under each key. Only user and assistant rows are indexed: tool calls never, and tool
    # results neither (machine output: JSON, fetched pages and files, most of the text by size, and
    # none of it said in the chat; the answer that used one is indexed). FTS5 tables without content
    # of their own (the text stays in messages and memories): `place` holds the tokens a scope filters
    # on, s<hex of the session id> and k<hex of the key>, one token each whatever the key's spelling. A
    # row is taken out with the tokens it went in with, so the triggers compute them alike; a
    # session's key never changes. The first 100,000 characters of a text are indexed, as on
    # PostgreSQL (whose tsvector has a size limit). Tokens: runs of letters, digits and marks, in any
    # script; case is folded, accents are kept.
    """
    CREATE VIRTUAL TABLE messages_search USING fts5 (
        content, place, content = '',
        tokenize = "unicode61 remove_diacritics 0 categories 'L* N* Co M*'"
    );
    CREATE TRIGGER messages_search_insert AFTER INSERT ON messages
        WHEN new.kind IN ('user', 'assistant')
    BEGIN
        INSERT INTO messages_search (rowid, content, place)
            SELECT new.id, substr(new.content, 1, 100000), 's' || hex(s.id) || ' k' || hex(s.key)
            FROM sessions s WHERE s.id = new.session_id;
    END;
    -- A message deleted by itself (its session still there); a whole session's go before it does.
    CREATE TRIGGER messages_search_delete AFTER DELETE ON messages
        WHEN old.kind IN ('user', 'assistant')
    BEGIN
        INSERT INTO messages_search (messages_search, rowid, content, place)
            SELECT 'delete', old.id, substr(old.content, 1, 100000), 's' || hex(s.id) || ' k' || hex(s.key)
            FROM sessions s WHERE s.id = old.session_id;
    END;
    -- Before the row goes: ON DELETE CASCADE deletes the messages after their session, when the
    -- trigger above can no longer read its key.
    CREATE TRIGGER sessions_search_delete BEFORE DELETE ON sessions
    BEGIN
        INSERT INTO messages_search (messages_search, rowid, content, place)
            SELECT 'delete', m.id, substr(m.content, 1, 100000), 's' || hex(old.id) || ' k' || hex(old.key)
            FROM messages m WHERE m.session_id = old.id AND m.kind IN ('user', 'assistant');
    END;
    -- set_user_message: a message's text once its attachments were read.
    CREATE TRIGGER messages_search_update AFTER UPDATE OF content ON messages
        WHEN new.kind IN ('user', 'assistant')
    BEGIN
        INSERT INTO messages_search (messages_search, rowid, content, place)
            SELECT 'delete', old.id, substr(old.content, 1, 100000), 's' || hex(s.id) || ' k' || hex(s.key)
            FROM sessions s WHERE s.id = old.session_id;
        INSERT INTO messages_search (rowid, content, place)
            SELECT new.id, substr(new.content, 1, 100000), 's' || hex(s.id) || ' k' || hex(s.key)
            FROM sessions s WHERE s.id = new.session_id;
    END;
    INSERT INTO messages_search (rowid, content, place)
        SELECT m.id, substr(m.content, 1, 100000), 's' || hex(s.id) || ' k' || hex(s.key)
        FROM messages m JOIN sessions s ON s.id = m.session_id WHERE m.kind IN ('user', 'assistant');

    CREATE VIRTUAL TABLE memories_search USING fts5 (
        content, place, content = '',
        tokenize = "unicode61 remove_diacritics 0 categories 'L* N* Co M*'"
    );
    CREATE TRIGGER memories_search_insert AFTER INSERT ON memories
    BEGIN
        INSERT INTO memories_search (rowid, content, place)
            VALUES (new.id, substr(new.content, 1, 100000), 'k' || hex(new.scope));
    END;
    CREATE TRIGGER memories_search_delete AFTER DELETE ON memories
    BEGIN
        INSERT INTO memories_search (memories_search, rowid, content, place)
            VALUES ('delete', old.id, substr(old.content, 1, 100000), 'k' || hex(old.scope));
    END;
    CREATE TRIGGER memories_search_update AFTER UPDATE OF content, scope ON memories
    BEGIN
        INSERT INTO memories_search (memories_search, rowid, content, place)
            VALUES ('delete', old.id, substr(old.content, 1, 100000), 'k' || hex(old.scope));
        INSERT INTO memories_search (rowid, content, place)
            VALUES (new.id, substr(new.content, 1, 100000), 'k' || hex(new.scope));
    END;
    INSERT INTO memories_search (rowid, content, place)
        SELECT id, substr(content, 1, 100000), 'k' || hex(scope) FROM memories;
    """,
    # 17: /voice, whether a chat's answers are also spoken ([tts]): 'on', 'off', or NULL (answers to
    # voice notes). Kept across /clear like send_policy and model_profile.
    """
    ALTER TABLE sessions ADD COLUMN voice_replies TEXT CHECK (voice_replies IN ('on', 'off'));
    """,
    # 18: a sub-agent's run (spawn_agent) names the run that started it, so traces show it under its
    # parent. For traces only, so no foreign key: a parent deleted with its session leaves its
    # children's rows as they are.
    """
    ALTER TABLE runs ADD COLUMN parent_run_id TEXT;
    CREATE INDEX runs_by_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
    """,
    # 19: /agent, the agent an owner chose for a chat ([agents.NAME]); NULL follows the bindings.
    # Kept across /clear like send_policy and model_profile.
    """
    ALTER TABLE sessions ADD COLUMN agent TEXT;
    """,
    # 20: a message stored moves its session's updated_at (the sessions list's order) in the database
    # itself, never back: one statement fewer per message from Bridge (four a turn). On PostgreSQL
    # the intake notification also names its chat.
    """
    CREATE TRIGGER message_touches_session AFTER INSERT ON messages
    BEGIN
        UPDATE sessions SET updated_at = new.created_at
            WHERE id = new.session_id AND updated_at < new.created_at;
    END;
    """,
    # 21: PostgreSQL's alone (messages numbered in commit order within a session, for its kept
    # history windows). SQLite's ids already commit in order, so nothing changes here.
    """
    SELECT 1;
    """,
    # 22: PostgreSQL's alone (its notifications name a queued message, and the chat's route changing
    # is told to every worker). SQLite has no notifications: nothing changes here.
    """
    SELECT 1;
    """,
    # 23: the surfaces of the chats each worker takes (comma-separated, sorted; empty while it takes
    # none): workers that share the runs split the chats a notification names among those alike.
    """
    ALTER TABLE workers ADD COLUMN surfaces TEXT NOT NULL DEFAULT '';
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)
