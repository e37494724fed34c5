"""What the provider tests share: a stand-in for asyncio.sleep that records the backoff waits."""

from __future__ import annotations

import pytest


class RecordingSleep:
    """Stands in for asyncio.sleep: records each backoff wait and returns at once."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
def sleep() -> RecordingSleep:
    return RecordingSleep()
