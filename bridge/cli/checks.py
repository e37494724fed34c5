"""`bridge check-config` and `bridge policy explain`: what the config says, and what it decides."""

from __future__ import annotations

import sys
from pathlib import Path

from bridge.cli.exits import EXIT_CONFIG, fail
from bridge.config import Settings
from bridge.config.io import render_settings, resolve_config_path
from bridge.config.platforms import known_surfaces
from bridge.errors import ConfigError, SessionKeyError, StoreError

# The last line of a config that `bridge check-config` found nothing wrong with.
VALID = "# the config is valid"


def check_config(settings: Settings, path: Path | None) -> int:
    """Print the effective settings, or what `bridge run` would reject in them (exit status 2)."""
    from bridge.app.registry import build_registry

    try:
        # The tools the app would offer, built as the app builds them: manifests and disabled names.
        build_registry(settings)
    except ConfigError as exc:
        return fail(exc, settings)
    # Not an error at load, so `bridge run` starts with one unused profile lacking its key (it warns,
    # and that profile answers with an error); checking the config is when to hear about it.
    if missing := [*settings.llm.missing_keys(), *settings.tts.missing_keys()]:
        print("bridge: config error:\n" + "\n".join(missing), file=sys.stderr)
        return EXIT_CONFIG
    if problem := tool_problem(settings):
        print(f"bridge: config error:\n{problem}", file=sys.stderr)
        return EXIT_CONFIG
    source = resolve_config_path(path)
    print(f"# effective config from {source or 'defaults'} and BRIDGE_* environment variables")
    print(render_settings(settings), end="")
    # Last, so a script or a glance at the tail knows it passed; a comment keeps the printout valid TOML.
    print(f"\n{VALID}")
    return 0


def tool_problem(settings: Settings) -> str | None:
    """Why an enabled tool that reaches outside cannot run here: `bridge run` starts anyway and the
    tool refuses each call (fail closed), so this is where the operator hears why."""
    from bridge.tools.builtin.exec import exec_problem

    return exec_problem(settings)


async def explain_policy(settings: Settings, key: str, surface: str | None) -> int:
    """`bridge policy explain KEY`: each rule, whether it matches, and what decides."""
    from bridge.gateway.policy import Place, SendPolicy
    from bridge.sessions.keys import parse
    from bridge.store.backends import existing_store

    try:
        parse(key)
    except SessionKeyError as exc:
        return fail(exc, settings)
    if surface is not None and surface not in (known := known_surfaces()):
        print(
            f"bridge: --surface {surface!r} is not a known surface; known surfaces: {', '.join(known)}",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    session = None
    # Read the /send override from the bot's database, without creating one where there is none.
    if settings.storage.postgres or settings.storage.path.is_file():
        try:
            async with existing_store(settings.storage) as store:
                session = await store.active_session(key)
        except StoreError as exc:
            return fail(exc, settings)
    surface = surface or (session.surface if session else None)
    place = Place.of(key, surface)
    for line in SendPolicy(settings.session.send_policy).explain(
        place, session.send_policy if session else None
    ):
        print(line)
    if session is None:
        print("(no active session with this key in the database yet)")
    return 0
