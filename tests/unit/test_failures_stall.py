"""Rank 0's judgement of a hung rank from the progress marks the ranks post with their
heartbeats (vitfsdp.failures.find_stall; ``beats:marks:step:idle``, the first mark at the
first step's start): recorded marks, no processes. A rank still in its set-up or compile
(a compile-cache miss on its node) while the others, dispatching asynchronously, marked
several steps was recorded as hung at train.timeout_s + 5 s; before every rank has passed
its first step the bound is now the larger of train.timeout_s and FIRST_STEP_ALLOWANCE_S."""

from __future__ import annotations

from vitfsdp import failures

STALL_S = failures.stall_s(10)  # train.timeout_s=10: 15 s


def test_a_rank_still_compiling_its_first_step_is_not_a_stall():
    # JAX: rank 1 compiles ahead of its first step (no mark yet), rank 0 (a cache hit)
    # dispatched steps 1-5 and waits; torch: rank 1 compiles inside step 1 (one mark)
    for rank_1 in ("41:0:0:120.0", "41:1:1:120.0"):
        beats = {0: "40:6:5:100.0", 1: rank_1}
        assert failures.find_stall(beats, 2, STALL_S) is None, rank_1
        assert failures.find_stall(beats, 2, STALL_S, failures.first_stall_s(10)) is None


def test_a_rank_that_hangs_before_its_first_step_is_recorded_after_the_longer_bound():
    bound = failures.first_stall_s(10)
    assert bound == failures.FIRST_STEP_ALLOWANCE_S + failures.HEARTBEAT_CHECK_S == 605
    assert failures.first_stall_s(900) == 905  # a longer train.timeout_s is kept
    beats = {0: "600:6:5:604.0", 1: "601:0:0:640.0"}
    assert failures.find_stall(beats, 2, STALL_S) is None
    beats = {0: "606:6:5:606.0", 1: "607:0:0:640.0"}
    stall = failures.find_stall(beats, 2, STALL_S)
    assert stall == failures.Stall([1], None, [0], 5, 606.0, first_step=True)
    assert stall.text(10) == (
        "rank 1 made no progress for 606 s (more than 600 s, the bound before every rank's "
        "first step): stopped before its first step while rank 0 waited at step 5 (main "
        "thread stuck outside the step's collectives, e.g. in data loading, file I/O or a "
        "lock)")
    assert failures.find_stall(beats, 2, STALL_S, first_s=700) is None


def test_once_every_rank_passed_its_first_step_train_timeout_s_bounds_it():
    beats = {0: "40:7:6:16.0", 1: "41:2:2:30.0"}  # rank 1 stopped after step 2's start
    stall = failures.find_stall(beats, 2, STALL_S)
    assert stall == failures.Stall([1], 2, [0], 6, 16.0)
    assert stall.text(10).startswith("rank 1 made no progress for 16 s (more than "
                                     "train.timeout_s=10): stopped after step 2 while rank 0 "
                                     "waited at step 6 (main thread stuck outside"), stall
    # a resumed run's marks start again from its checkpoint's step: rank 1 at step 101
    beats = {0: "40:7:105:16.0", 1: "41:1:101:30.0"}
    assert failures.find_stall(beats, 2, STALL_S) is None


def test_a_rank_stuck_inside_a_step_has_the_marks_of_the_ranks_waiting_for_it():
    """What the marks cannot see: rank 1 stuck on its device in step 3 and rank 0 waiting
    in step 3's collective both last marked step 3's start."""
    assert failures.find_stall({0: "40:4:3:100.0", 1: "41:4:3:100.0"}, 2, STALL_S) is None
