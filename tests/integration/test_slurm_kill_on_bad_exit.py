"""The training step of a job ends once one of its tasks exits non-zero (srun's
``--kill-on-bad-exit=1``), in both launch modes: a bare srun step otherwise waits for every
task, and a rank hung after rank 0 recorded the run's failure held the job (and its nodes)
until its time limit."""

from __future__ import annotations

import pytest

from tests.integration.test_slurm_scripts import POINT, PROFILES, render_point
from vitfsdp.launch.slurm import KILL_ON_BAD_EXIT


def _training_step(text: str) -> str:
    """The srun line of the script's training step (the one that runs the ranks)."""
    step = next(s for s in text.split("\nsrun ")
                if "-m vitfsdp.train" in s or "-m torch.distributed.run" in s)
    return step.splitlines()[0]


@pytest.mark.parametrize("mode", ["srun", "torchrun"])
@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_the_training_step_ends_when_a_task_fails(profile, mode):
    text = render_point([*PROFILES[profile], f"cluster.launch_mode={mode}"], POINT)
    assert KILL_ON_BAD_EXIT == "--kill-on-bad-exit=1"
    assert KILL_ON_BAD_EXIT in _training_step(text).split(), _training_step(text)


def test_a_profiles_own_srun_args_come_after_it():
    """A site that wants the step to outlive a failed task says so in ``srun_args``
    (``--kill-on-bad-exit=0``); srun takes the later of the two."""
    text = render_point([*PROFILES["cuda8"], "cluster.srun_args=['--kill-on-bad-exit=0']"], POINT)
    words = _training_step(text).split()
    assert words.index("--kill-on-bad-exit=0") > words.index(KILL_ON_BAD_EXIT)
