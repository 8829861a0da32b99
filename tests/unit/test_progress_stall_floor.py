"""The stall line's floor is a sweep option, ``hydra.launcher.stall_floor_s`` (a site whose
step or first compile takes minutes gets its lines later, an impatient user earlier): its
default is :data:`vitfsdp.progress.STALL_FLOOR_S`, and a value that is not a number of
seconds above 0 is refused in one line naming the key and the fix, before anything runs."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from tests.preset_sweep import refusal_of_preset
from vitfsdp.launch import STALL_FLOOR_KEY, LaunchOptions, check_stall_floor
from vitfsdp.progress import STALL_FLOOR_S
from vitfsdp.sweep import EXIT_REFUSED, SweepRefused, main_cli
from vitfsdp.sweep.check import _options


def test_the_default_is_the_progress_floor_and_help_lists_the_key():
    from vitfsdp.sweep import usage

    assert LaunchOptions().stall_floor_s == STALL_FLOOR_S
    assert f"{STALL_FLOOR_KEY}=180.0" in usage()
    assert LaunchOptions.from_values({"stall_floor_s": 600}).stall_floor_s == 600.0


@pytest.mark.parametrize("value", ["600", "0.5", " 90 ", "inf", 600.0])
def test_seconds_above_zero_are_taken(value):
    assert check_stall_floor(value) == float(value)


@pytest.mark.parametrize("value", ["abc", "0", "-5", "nan", "", "3min"])
def test_a_sweep_with_a_floor_not_above_zero_is_refused_before_anything(tmp_path, capsys,
                                                                          value):
    sweep_dir = tmp_path / "sweep"
    code = main_cli(["-m", "model=vit_tiny", f"{STALL_FLOOR_KEY}={value}",
                     f"hydra.sweep.dir={sweep_dir}"])
    err = capsys.readouterr().err
    assert code == EXIT_REFUSED and not sweep_dir.exists()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"error: {STALL_FLOOR_KEY}={value} is not a number of seconds above "
                          f"0: give one, e.g. {STALL_FLOOR_KEY}=600 "), err


def test_a_composed_floor_not_above_zero_is_refused_by_the_sweeper():
    """A value from a preset or a config file (not the command line): the sweeper's check of
    the launcher's options refuses it in the same words."""
    config = OmegaConf.create({"hydra": {"launcher": {"stall_floor_s": -1.0}}})
    with pytest.raises(SweepRefused, match=rf"^error: {STALL_FLOOR_KEY}=-1.0 is not a number"):
        _options(config)
    config.hydra.launcher.stall_floor_s = 30.0
    assert _options(config).stall_floor_s == 30.0


@pytest.mark.parametrize("value", ["ten minutes", "3min", "-5", "0"])
def test_a_preset_whose_floor_is_not_seconds_gets_the_same_line(tmp_path, capsys, monkeypatch,
                                                                 value):
    """A preset in the user's config folder (VITFSDP_CONFIG_PATH) that gives a value not a
    number: Hydra's composition stopped on OmegaConf's type check ('error:
    hydra.launcher.stall_floor_s: In 'experiment/slow_site': ValidationError raised while
    composing config:'), naming neither the value nor the fix. Now it reaches the sweep's
    check: the line the command line gets, exit 2, no sweep directory."""
    err = refusal_of_preset(tmp_path, capsys, monkeypatch, "slow_site",
                            f"stall_floor_s: {value}")
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"error: {STALL_FLOOR_KEY}={value} is not a number of seconds above "
                          f"0: give one, e.g. {STALL_FLOOR_KEY}=600 "), err


def test_a_composed_floor_given_as_text_is_taken():
    config = OmegaConf.create({"hydra": {"launcher": {"stall_floor_s": "600"}}})
    assert _options(config).stall_floor_s == 600.0
