"""The soak's size and seed, from BRIDGE_SOAK_TURNS, BRIDGE_SOAK_KILLS and BRIDGE_SOAK_SEED."""

from __future__ import annotations

import os
import random

import pytest

from tests.adapters.matrix.conftest import bot, synapse
from tests.soak.harness import SoakSize

# The Matrix soak's homeserver and bot account (skipped without Synapse, as tests/adapters/matrix is).
__all__ = ["bot", "synapse"]

# The short version CI runs: a few minutes. The long one: BRIDGE_SOAK_TURNS=1000 BRIDGE_SOAK_KILLS=200.
DEFAULT_TURNS = 100
DEFAULT_KILLS = 20
# On Matrix (each start syncs with Synapse, so a kill costs more): about a minute in CI.
MATRIX_TURNS = 40
MATRIX_KILLS = 8


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise pytest.UsageError(f"{name} must be a whole number, not {value!r}") from None


def _size(turns: int, kills: int) -> SoakSize:
    seed = _env_int("BRIDGE_SOAK_SEED", random.SystemRandom().randrange(2**32))
    return SoakSize(_env_int("BRIDGE_SOAK_TURNS", turns), _env_int("BRIDGE_SOAK_KILLS", kills), seed)


@pytest.fixture
def soak_size() -> SoakSize:
    return _size(DEFAULT_TURNS, DEFAULT_KILLS)


@pytest.fixture
def matrix_soak_size() -> SoakSize:
    return _size(MATRIX_TURNS, MATRIX_KILLS)
