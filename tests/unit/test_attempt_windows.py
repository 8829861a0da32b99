"""The local launcher's progress of a resumed point (:class:`vitfsdp.launch.local.AttemptWindows`,
:func:`~vitfsdp.launch.local.run_until_done`): the earlier attempts' windows, which the
resumed trainer keeps in its metrics.jsonl, are not replayed as new progress, and the resume
is said once, first."""

from __future__ import annotations

import json
import os
import sys

import pytest

from vitfsdp.core.layout import METRICS_FILE
from vitfsdp.launch.local import AttemptWindows, run_until_done
from vitfsdp.records import RunRecords

#: A stand-in for a point's trainer: records as vitfsdp.torch_train writes them
#: (RunRecords.start with the checkpoint's step, then one window per step_end given).
TRAINER = ("import json, sys, time\n"
           "from vitfsdp.records import RunRecords\n"
           "run_dir, resume, attempt, ends = sys.argv[1], json.loads(sys.argv[2]), "
           "int(sys.argv[3]), json.loads(sys.argv[4])\n"
           "rec = RunRecords(run_dir)\n"
           "rec.start({'config': {}}, resume_step=resume, attempt=attempt)\n"
           "for end in ends:\n"
           "    time.sleep(0.1)\n"
           "    rec.window({'step_end': end, 'warmup': False, 'ips': 2000.0, 'loss': 1.0,\n"
           "                'attempt': attempt})\n"
           "rec.finish('completed')\n")


def _attempt_0(run_dir, ends=(2, 4, 6)):
    """The first attempt's records, stopped after its last window of ``ends``."""
    rec = RunRecords(run_dir)
    rec.start({"config": {}})
    for end in ends:
        rec.window({"step_end": end, "warmup": end == 2, "ips": 900.0, "loss": 2.0,
                    "attempt": 0})
    rec.finish("cancelled", reason="Ctrl-C", interrupted=True)


def _run(run_dir, resume, attempt, ends) -> list[dict]:
    got: list[dict] = []
    cmd = [sys.executable, "-c", TRAINER, str(run_dir), json.dumps(resume), str(attempt),
           json.dumps(ends)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    assert run_until_done([cmd], [env], None, run_dir, got.append, poll_s=0.05) == 0
    return got


@pytest.mark.parametrize("moved_aside", [True, False], ids=["attempts/1", "in place"])
def test_a_resumed_point_reports_its_resume_then_only_its_own_windows(tmp_path, moved_aside):
    """Checkpoint at step 4, the first attempt stopped after step 6: the resumed attempt
    keeps windows 2 and 4 (6 is measured again); progress shows the resume, then 6 and 8."""
    _attempt_0(tmp_path / "attempts" / "1" if moved_aside else tmp_path)
    got = _run(tmp_path, 4, 1, [6, 8])
    assert got[0] == {"resumed_from_step": 4, "attempt": 1}
    assert [(w["step_end"], w["attempt"]) for w in got[1:]] == [(6, 1), (8, 1)]
    # the records still hold the earlier attempt's windows up to the checkpoint
    kept = [json.loads(line) for line in (tmp_path / METRICS_FILE).read_text().splitlines()]
    assert [(w["step_end"], w["attempt"]) for w in kept] == [(2, 0), (4, 0), (6, 1), (8, 1)]


def test_a_fresh_start_over_stale_records_reports_only_its_windows(tmp_path):
    """A run directory whose earlier attempt left records but no checkpoint: the new attempt
    starts afresh (attempt 0 again, the same steps); none of the stale windows is shown,
    every new one is, and no resume is said."""
    _attempt_0(tmp_path, ends=(2, 4, 6))
    got = _run(tmp_path, None, 0, [2, 4])
    assert [(w["step_end"], w["ips"]) for w in got] == [(2, 2000.0), (4, 2000.0)]


def test_nothing_is_reported_before_this_attempts_run_json(tmp_path):
    _attempt_0(tmp_path)
    got: list[dict] = []
    feed = AttemptWindows(tmp_path, got.append)
    feed.report()
    assert got == []  # run.json and metrics.jsonl are the earlier attempt's
    RunRecords(tmp_path).start({"config": {}}, resume_step=4, attempt=1)
    feed.report()
    feed.report()
    assert got == [{"resumed_from_step": 4, "attempt": 1}]  # once


def test_the_end_of_point_line_says_a_resumed_runs_figures_pool_its_attempts():
    """A resumed point ended 'completed in 12 s: 1875.0 images/s' though that figure pooled
    two attempts' windows (about 850-1680 and 1640-3100 images/s in a reviewer's run); the
    line now says so. One attempt: the line as before."""
    from vitfsdp.sweep.local import _figures

    summary = {"status": "completed", "ips": 1875.0, "step_time_s": 0.017,
               "peak_rss_gib": 1.1, "num_attempts": 2}
    assert _figures(summary) == (": 1875.0 images/s, 0.017 s/step, peak memory 1.10 GiB "
                                 "(pooling the windows of 2 attempts: resumed from a "
                                 "checkpoint)")
    assert _figures({**summary, "num_attempts": 1}).endswith("peak memory 1.10 GiB")
