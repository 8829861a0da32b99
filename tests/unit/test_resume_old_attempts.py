"""A run directory laid out by an earlier version, whose ``attempts/<n>/`` folders counted
from 1 (``attempts/1/`` holds attempt 0, run.json's ``attempt`` counting from 0): nothing
reads a folder's name as its attempt. The next folder takes one more than the highest (its
number is the order, the latest highest), a resume reads the latest attempt's windows from
there, the progress line and runs.csv take the attempt from run.json."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fake_records import run_info
from vitfsdp.analysis.rows import run_row
from vitfsdp.core.layout import METRICS_FILE, RUN_FILE
from vitfsdp.launch.local import AttemptWindows
from vitfsdp.launch.resume import archive_attempt, attempt_folder
from vitfsdp.records import RunRecords, read_jsonl


def _attempt(run_dir: Path, attempt: int, resume_step: int | None, ends: list[int]) -> None:
    """Attempt ``attempt`` of the point in ``run_dir`` (resumed from ``resume_step``), one
    measured window at each step of ``ends`` (images/s 100 x (attempt + 1)), stopped from
    outside."""
    rec = RunRecords(run_dir)
    rec.start(run_info("DDP", 1), resume_step=resume_step, attempt=attempt)
    for end in ends:
        rec.window({"step_end": end, "warmup": False, "ips": 100.0 * (attempt + 1),
                    "loss": 2.0, "attempt": attempt})
    rec.finish("preempted", reason="SIGUSR2", interrupted=True, num_attempts=attempt + 1)


def _old_layout(run_dir: Path) -> None:
    """Attempts 0 and 1 moved aside the old way, to attempts/1/ and attempts/2/; attempt 2
    stopped in place at step 6."""
    for attempt, ends in ((0, [2]), (1, [4])):
        _attempt(run_dir, attempt, 2 * attempt or None, ends)
        folder = run_dir / "attempts" / str(attempt + 1)
        folder.mkdir(parents=True)
        for p in list(run_dir.iterdir()):
            if p.name != "attempts":
                p.rename(folder / p.name)
    _attempt(run_dir, 2, 4, [6])


def test_an_old_run_dirs_attempts_are_read_by_their_run_json(tmp_path):
    run = tmp_path / "run"
    _old_layout(run)
    held = {int(p.name): json.loads((p / RUN_FILE).read_text())["attempt"]
            for p in (run / "attempts").iterdir()}
    assert held == {1: 0, 2: 1}  # the old numbering: the name is not the attempt

    # attempt 2 moves to attempts/3/ (2 is taken): after every folder, as the latest
    assert attempt_folder(run) == 3
    moved = archive_attempt(run)
    assert moved == run / "attempts" / "3"
    assert json.loads((moved / RUN_FILE).read_text())["attempt"] == 2

    # attempt 3 resumes from step 6: it keeps the latest attempt's windows (attempts/3/,
    # the highest folder), all three attempts', not attempts/2/'s (attempt 1's, to step 4)
    said: list[dict] = []
    feed = AttemptWindows(run, said.append)
    RunRecords(run).start(run_info("DDP", 1), resume_step=6, attempt=3)
    feed.report()
    assert [(w["step_end"], w["attempt"]) for w in read_jsonl(run / METRICS_FILE)] == [
        (2, 0), (4, 1), (6, 2)]
    assert said == [{"resumed_from_step": 6, "attempt": 3}]  # run.json's, not a folder's

    # runs.csv's num_attempts of each folder: its own records' (attempt + 1), not its name
    assert {p.name: run_row(p)["num_attempts"] for p in (run / "attempts").iterdir()} == {
        "1": 1, "2": 2, "3": 3}
