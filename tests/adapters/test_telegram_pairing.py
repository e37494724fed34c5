"""DM pairing end to end on the fake Bot API: a stranger's code, an owner's /pair, `bridge pair` from
another process while the bot runs, and a revoke that holds at the next message."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bridge.cli.pair import run as pair_command
from bridge.cli.root import _parser
from bridge.gateway.pairing import APPROVED_TEXT
from devkit.fakes import openai_server as fake
from devkit.fakes.openai_server import FakeOpenAI
from devkit.fakes.telegram_api import FakeTelegram
from devkit.processes import bridge_running, telegram_run_config
from tests.adapters.conftest import OWNER, RigFactory, TelegramRig
from tests.test_cli import bridge

STRANGER = 777
CODE_TEXT = re.compile(r"^To talk to this bot, ask its owner to approve the code ([A-Z2-9]{4}-[A-Z2-9]{4}) ")


def texts(tg: FakeTelegram, chat_id: int) -> list[str]:
    return [m["text"] for m in tg.messages_in(chat_id)]


def code_of(text: str) -> str:
    found = CODE_TEXT.match(text)
    assert found, f"not a pairing code message: {text!r}"
    return found.group(1)


def asked_the_model(llm: FakeOpenAI, text: str) -> bool:
    return any(text in str(body["messages"]) for body in llm.requests)


async def nth_message(r: TelegramRig, chat_id: int, n: int) -> str:
    """The n-th message (1-based) the bot sent to the chat, waited for."""
    return (await r.sent_to(chat_id, n))[n - 1]["text"]


async def test_a_stranger_is_paired_by_the_owners_pair_command_and_unpaired_by_bridge_pair_revoke(
    rig: RigFactory, tg: FakeTelegram, fake_llm: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    async with rig(fake_llm, dm_policy="pairing") as r:
        tg.dm(STRANGER, "hi bot, tell me a secret", first_name="Ann")
        code = code_of(await nth_message(r, STRANGER, 1))
        assert fake_llm.requests == []

        tg.dm(OWNER, f"/pair {code}")
        approved = await nth_message(r, OWNER, 1)
        assert approved.startswith(f"Approved telegram user {STRANGER} (Ann): they can talk to the bot now.")
        assert await nth_message(r, STRANGER, 2) == APPROVED_TEXT

        fake_llm.push(fake.text("Nice to meet you, Ann."))
        tg.dm(STRANGER, "hello again")
        assert await nth_message(r, STRANGER, 3) == "Nice to meet you, Ann."
        assert not asked_the_model(fake_llm, "tell me a secret")  # the first message was never kept

        # `bridge pair revoke`, as the command runs it: its own connection to the bot's database.
        args = _parser().parse_args(["pair", "revoke", f"telegram:{STRANGER}"])
        assert await pair_command(r.bridge.settings, args) == 0
        assert f"revoked telegram:{STRANGER}" in capsys.readouterr().out
        tg.dm(STRANGER, "are you still there?")
        assert code_of(await nth_message(r, STRANGER, 4)) != code
        assert not asked_the_model(fake_llm, "are you still there?")
        assert len(fake_llm.requests) == 1


async def test_bridge_pair_from_another_process_is_honoured_by_a_running_bridge_at_the_next_message(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    async with FakeOpenAI() as llm:
        config = telegram_run_config(
            tmp_path, OWNER, tg.token, tg.api_base, llm.base_url, 'dm_policy = "pairing"\n'
        )
        async with bridge_running(tmp_path, config):
            tg.dm(STRANGER, "hello?", first_name="Ann")
            await tg.wait_for(lambda: len(texts(tg, STRANGER)) >= 1, timeout=30)
            code = code_of(texts(tg, STRANGER)[0])

            listed = await bridge("pair", "list", "--config", str(config), cwd=tmp_path)
            assert listed.code == 0, listed.output
            assert re.search(
                rf"^{code}\s+telegram:{STRANGER}\s+Ann\s+\S+ \S+ \(in 60 min\)$", listed.stdout, re.M
            )

            wrong = await bridge("pair", "approve", "ABCD-EFGH", "--config", str(config), cwd=tmp_path)
            if code != "ABCD-EFGH":
                assert wrong.code == 1 and "no code 'ABCD-EFGH' is waiting" in wrong.stderr

            # Typed as it was read out: lower case, with a space for the dash.
            typed = code.lower().replace("-", " ").split()
            approved = await bridge("pair", "approve", *typed, "--config", str(config), cwd=tmp_path)
            assert approved.code == 0, approved.output
            assert f"approved telegram user {STRANGER} (Ann)" in approved.stdout

            llm.push(fake.text("Welcome, Ann."))
            tg.dm(STRANGER, "hello again")
            await tg.wait_for(lambda: "Welcome, Ann." in texts(tg, STRANGER), timeout=30)

            listed = await bridge("pair", "list", "--config", str(config), cwd=tmp_path)
            assert re.search(rf"^telegram:{STRANGER}\s+Ann\s+\S+ \S+\s+cli$", listed.stdout, re.M), (
                listed.stdout
            )

            revoked = await bridge(
                "pair", "revoke", "telegram", str(STRANGER), "--config", str(config), cwd=tmp_path
            )
            assert revoked.code == 0, revoked.output
            tg.dm(STRANGER, "still allowed?")
            await tg.wait_for(lambda: len(texts(tg, STRANGER)) >= 3, timeout=30)
            code_of(texts(tg, STRANGER)[2])
            assert len(llm.requests) == 1
