"""The console surface: a REPL on stdin/stdout for the local owner, session key `main`.

`adapter.py` is the adapter (the `bridge.adapters` entry point names `ConsoleAdapter` here);
`files.py` reads the local files a line attaches.
"""

from adapters.console.adapter import ConsoleAdapter

__all__ = ["ConsoleAdapter"]
