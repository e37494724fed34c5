"""The soak's size and seed, from BRIDGE_SOAK_TURNS, BRIDGE_SOAK_KILLS and BRIDGE_SOAK_SEED."""

from __future__ import annotations

import os
import random

import pytest

from tests.soak.harness import SoakSize

# The short version CI runs: a few minutes. The long one: BRIDGE_SOAK_TURNS=1000 BRIDGE_SOAK_KILLS=200.
DEFAULT_TURNS = 100
DEFAULT_KILLS = 20


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise pytest.UsageError(f"{name} must be a whole number, not {value!r}") from None


@pytest.fixture
def soak_size() -> SoakSize:
    seed = _env_int("BRIDGE_SOAK_SEED", random.SystemRandom().randrange(2**32))
    turns = _env_int("BRIDGE_SOAK_TURNS", DEFAULT_TURNS)
    return SoakSize(turns, _env_int("BRIDGE_SOAK_KILLS", DEFAULT_KILLS), seed)
