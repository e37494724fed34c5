"""Lets `python -m bridge` behave like the `bridge` console script."""

from bridge.cli import main

raise SystemExit(main())
