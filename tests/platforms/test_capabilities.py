"""Each rig's declared capabilities hold for its adapter: the class the core loads by the platform's
entry point, read through bridge/platform.py's contract. A declaration that disagrees with the
adapter fails here, so the suite can't call a case "not applicable" for a platform that has it, or
run a platform on what it lacks."""

from __future__ import annotations

import pytest

from bridge.app.root import load_adapter_class
from bridge.platform import Sender
from tests.platforms.rig import Capabilities, PlatformRig
from tests.platforms.suite import RIGS


@pytest.mark.parametrize("rig", RIGS, ids=[rig.name for rig in RIGS])
def test_a_platforms_declared_capabilities_are_its_adapters_own(rig: type[PlatformRig]) -> None:
    adapter = load_adapter_class(rig.name)  # through the entry point, a plugin's included
    declared = rig.capabilities
    assert adapter.surface == rig.name
    assert declared.has("edits") == adapter.supports_edit
    assert declared.has("streaming") == (adapter.streams_drafts or adapter.supports_stream)
    assert declared.has("idempotent_sends") == adapter.dedupes_by_nonce
    overridden = [op for op in ("download", "send_file") if getattr(adapter, op) is not getattr(Sender, op)]
    assert declared.has("files") == (overridden == ["download", "send_file"])
    # Edits are spaced out for a platform that rate-limits them, and only for one.
    if not declared.has("rate_limits"):
        assert adapter.min_edit_interval_s == 0
    elif declared.has("edits"):
        assert adapter.min_edit_interval_s > 0
    # Groups, threads and encryption have no attribute in the contract: their cases try them where
    # declared, and a platform without one says why.
    for name in Capabilities.names():
        value = declared.support(name)
        assert value is True or value.why.strip(), f"{rig.name} lacks {name} without saying why"
