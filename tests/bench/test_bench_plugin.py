"""The plugin benchmark's harness: the runtime side's collector is held while it samples."""

from __future__ import annotations

import gc

import pytest

from bench.plugin import _runtime_collector_held


def test_the_runtime_collector_is_held_while_sampling_and_given_back() -> None:
    assert gc.isenabled()
    with _runtime_collector_held():
        assert not gc.isenabled()
        assert gc.get_freeze_count() > 0  # what existed before is not walked again
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_the_collector_is_given_back_when_sampling_fails() -> None:
    with pytest.raises(RuntimeError), _runtime_collector_held():
        raise RuntimeError("the plugin went away")
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
