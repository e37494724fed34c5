"""Lets `python -m bridge` behave like the `bridge` console script."""

from bridge.entry import main

raise SystemExit(main())
