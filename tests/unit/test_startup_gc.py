"""vitfsdp.startup_gc: the collector off inside the pause, as it was after it."""

from __future__ import annotations

import gc

import pytest

from vitfsdp import startup_gc


@pytest.fixture
def collector_on():
    gc.enable()
    yield
    gc.enable()


def test_off_inside_and_on_again_after(collector_on):
    with startup_gc.paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_on_again_after_an_exception(collector_on):
    with pytest.raises(ImportError), startup_gc.paused():
        raise ImportError("no module named jax")
    assert gc.isenabled()


def test_a_collector_the_caller_turned_off_stays_off(collector_on):
    gc.disable()
    with startup_gc.paused():
        assert not gc.isenabled()
    assert not gc.isenabled()
