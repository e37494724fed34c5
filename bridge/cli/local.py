"""`bridge local-model start | install | stop | status`: a small model on this machine, no key needed."""

from __future__ import annotations

import argparse

from bridge.cli.exits import EXIT_RUNTIME, fail
from bridge.errors import LocalModelError


def local_model(args: argparse.Namespace) -> int:
    """`bridge local-model start|stop|status`."""
    from bridge.localmodel import LocalModel

    manager = LocalModel()
    if args.local_command == "status":
        state = manager.running()
        if state is None:
            print(f"not running (cache: {manager.folder})")
            return EXIT_RUNTIME
        print(f"running: {state.base_url}, {state.mode} tool calls, pid {state.pid}")
        print(f"cache: {manager.folder}")
        return 0
    if args.local_command == "stop":
        print("stopped" if manager.stop() else "not running")
        return 0
    try:
        if args.local_command == "install":
            manager.install()
            print(f"installed in {manager.folder}")
            return 0
        manager.start(port=args.port, mode=args.mode)
    except LocalModelError as exc:
        return fail(exc)
    except KeyboardInterrupt:
        return 130
    print("Now run `bridge chat`: it uses this model while no [llm] base_url is configured.")
    return 0
