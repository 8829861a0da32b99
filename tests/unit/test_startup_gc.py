"""vitfsdp.startup_gc: the collector off inside the pause, as it was after it, and what the
pause made frozen."""

from __future__ import annotations

import gc
import subprocess
import sys

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


FROZEN = """
import gc
from vitfsdp import startup_gc
with startup_gc.paused():
    kept = [[] for _ in range(1000)]  # stands for what the imports leave
ids = {id(o) for o in gc.get_objects()}
after = []
after.append(after)  # a cycle made after the pause
del after
print(gc.get_freeze_count() >= 1000, id(kept[0]) in ids, gc.collect() >= 1)
"""


def test_what_the_pause_made_is_frozen_and_later_garbage_is_still_collected():
    # in a process of its own: a freeze here would freeze the test runner's objects
    proc = subprocess.run([sys.executable, "-c", FROZEN], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "False", "True"]
