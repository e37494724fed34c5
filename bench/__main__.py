"""Runs every benchmark in bench/ in turn."""

from __future__ import annotations

import asyncio

from bench import restore_cost

if __name__ == "__main__":
    asyncio.run(restore_cost.main())
