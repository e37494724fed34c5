"""`bridge pair list | approve CODE | revoke SURFACE:USER_ID`: DM pairing from the command line.

They work on the bot's database while `bridge run` is running; the running bot sees each change at
the person's next message (see bridge.gateway.pairing).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bridge.cli.exits import EXIT_CONFIG, EXIT_RUNTIME, fail
from bridge.config import Settings
from bridge.errors import PairingLimited, StoreError
from bridge.sessions import keys

if TYPE_CHECKING:
    from bridge.gateway.pairing import Pairing
    from bridge.store.pairing import PairedUser, PendingCode

# Who `bridge pair approve` records as the approver.
CLI_APPROVER = "cli"


def add_parser(sub: Any, config_help: str) -> None:
    """The `pair` command and its subcommands, on the `bridge` parser's subparsers."""
    pair = sub.add_parser(
        "pair",
        help="DM pairing: list the codes strangers were given and the people approved, approve, revoke",
        description=(
            'With [telegram] or [discord] dm_policy = "pairing", a stranger who DMs the bot gets a code. '
            "These commands work while `bridge run` runs; it honours them at the person's next message."
        ),
    )
    pair_sub = pair.add_subparsers(dest="pair_command", required=True, metavar="SUBCOMMAND")
    listing = pair_sub.add_parser("list", help="the codes waiting for approval, and the people approved")
    listing.add_argument("--config", type=Path, help=config_help)
    approve = pair_sub.add_parser(
        "approve", help="approve a stranger's code: they may DM the bot from now on"
    )
    approve.add_argument(
        "code",
        nargs="+",
        metavar="CODE",
        help="the code they were sent, e.g. ABCD-EFGH (any case, dash optional)",
    )
    approve.add_argument("--config", type=Path, help=config_help)
    revoke = pair_sub.add_parser(
        "revoke",
        help="take an approval back: their next DM gets a code (or the refusal) again",
        usage="bridge pair revoke [-h] [--config CONFIG] SURFACE:USER_ID  (or: SURFACE USER_ID)",
    )
    revoke.add_argument(
        "who",
        nargs="+",
        metavar="SURFACE:USER_ID",
        help="the person as `bridge pair list` shows them, e.g. telegram:777 (or two words: telegram 777)",
    )
    revoke.add_argument("--config", type=Path, help=config_help)


async def run(settings: Settings, args: argparse.Namespace) -> int:
    from bridge.gateway.pairing import Pairing
    from bridge.store.backends import existing_store

    target = None
    if args.pair_command == "revoke":
        target = _person(args.who)
        if target is None:
            print(
                f"bridge: {' '.join(args.who)!r} is not SURFACE:USER_ID (e.g. telegram:777)", file=sys.stderr
            )
            return EXIT_CONFIG
    try:
        async with existing_store(settings.storage) as store:
            pairing = Pairing(store)
            if args.pair_command == "list":
                return _print_list(await pairing.pending(), await pairing.approved(), pairing.now())
            if args.pair_command == "approve":
                return await _approve(pairing, " ".join(args.code))
            assert target is not None
            return await _revoke(pairing, *target)
    except StoreError as exc:
        return fail(exc, settings)


def _person(words: list[str]) -> tuple[str, str] | None:
    """telegram:777, matrix:@ann:example.org, or telegram 777."""
    if len(words) == 1:
        surface, _, user_id = words[0].partition(":")
    elif len(words) == 2:
        surface, user_id = words
    else:
        return None
    if not surface or not user_id or keys.id_problem("user id", user_id) is not None:
        return None
    return surface, user_id


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M")


def _print_list(pending: list[PendingCode], approved: list[PairedUser], now: float) -> int:
    from bridge.gateway.pairing import minutes_left

    codes = "{:<10}  {:<24}  {:<20}  {}"
    print("Codes waiting for approval (bridge pair approve CODE):")
    print(codes.format("code", "who", "name", "expires (UTC)"))
    for code in pending:
        left = f"{_when(code.expires_at)} (in {minutes_left(code.expires_at, now)} min)"
        print(codes.format(code.code, f"{code.surface}:{code.user_id}", code.display_name or "-", left))
    if not pending:
        print("(none)")
    people = "{:<24}  {:<20}  {:<16}  {}"
    print()
    print("Approved (bridge pair revoke SURFACE:USER_ID):")
    print(people.format("who", "name", "approved (UTC)", "by"))
    for user in approved:
        name = user.display_name or "-"
        print(
            people.format(f"{user.surface}:{user.user_id}", name, _when(user.approved_at), user.approved_by)
        )
    if not approved:
        print("(none)")
    return 0


async def _approve(pairing: Pairing, code: str) -> int:
    from bridge.gateway.pairing import who

    try:
        user = await pairing.approve(code, by=CLI_APPROVER)
    except PairingLimited as exc:
        print(f"bridge: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    if user is None:
        print(
            f"bridge: no code {code!r} is waiting (wrong, or expired); `bridge pair list` shows the codes",
            file=sys.stderr,
        )
        return EXIT_RUNTIME
    print(f"approved {who(user.surface, user.user_id, user.display_name)}: they can DM the bot now")
    return 0


async def _revoke(pairing: Pairing, surface: str, user_id: str) -> int:
    if not await pairing.revoke(surface, user_id):
        print(
            f"bridge: {surface}:{user_id} is not approved; `bridge pair list` shows who is", file=sys.stderr
        )
        return EXIT_RUNTIME
    print(f"revoked {surface}:{user_id}: their next DM gets a pairing code (or the refusal) again")
    return 0
