"""The launcher's options given wrongly in a preset or a config file (not the command line):
Hydra's composition stopped on OmegaConf's type check ('ValidationError raised while
composing config'), naming neither the value nor the fix, as 911d9ff found of
``stall_floor_s``. Now every option reaches the sweep's own check (the launcher plugin
leaves them untyped), which refuses it in one line naming the key and the fix, before any
sweep directory is made; a switch given as text other than true/false is refused, never
read as true."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from hydra_plugins.vitfsdp_launcher.vitfsdp_launcher import CHECKED_BY_THE_SWEEP
from tests.preset_sweep import refusal_of_preset
from vitfsdp.launch import LaunchOptions
from vitfsdp.sweep import EXIT_REFUSED, SweepRefused, main_cli
from vitfsdp.sweep.check import _options

SWITCH = ("is not true or false: give hydra.launcher.{0}=true{1} or "
          "hydra.launcher.{0}=false (default false)")

#: (the preset's YAML under hydra.launcher, the one line the sweep prints)
WRONG = [
    ("detach: maybe", "hydra.launcher.detach=maybe " + SWITCH.format(
        "detach", " (the short flag: --detach)")),
    ("scripts_only: 'yes'", "hydra.launcher.scripts_only=yes " + SWITCH.format(
        "scripts_only", " (the short flag: --scripts-only)")),
    ("rerun_failed: 1", "hydra.launcher.rerun_failed=1 " + SWITCH.format(
        "rerun_failed", " (the short flag: --rerun-failed)")),
    ("run_infeasible: sometimes", "hydra.launcher.run_infeasible=sometimes " + SWITCH.format(
        "run_infeasible", " (the short flag: --run-infeasible)")),
    ("batch_search: 'on'", "hydra.launcher.batch_search=on " + SWITCH.format(
        "batch_search", " (the short flag: --batch-search)")),
    ("batch_search_max: lots", "hydra.launcher.batch_search_max=lots is not a whole number: "
     "give one, e.g. hydra.launcher.batch_search_max=256 (default 1024)"),
    ("batch_search_max: 2.5", "hydra.launcher.batch_search_max=2.5 is not a whole number: "
     "give one, e.g. hydra.launcher.batch_search_max=256 (default 1024)"),
    ("pack: [by_nodes]", "hydra.launcher.pack=['by_nodes'] is not a pack mode: give "
     "hydra.launcher.pack=by_nodes, or hydra.launcher.pack=null (a job per point, the "
     "default)"),
    ("pack: by_node", "hydra.launcher.pack=by_node is not a pack mode: give "
     "hydra.launcher.pack=by_nodes, or hydra.launcher.pack=null (a job per point, the "
     "default)"),
    ("job_name: [a, b]", "hydra.launcher.job_name=['a', 'b'] is not a name: give one, e.g. "
     "hydra.launcher.job_name=vitfsdp (the default)"),
]


def test_the_plugin_leaves_every_option_to_the_sweep():
    assert set(CHECKED_BY_THE_SWEEP) == set(LaunchOptions.__dataclass_fields__)


@pytest.mark.parametrize(("yaml", "line"), WRONG, ids=[w[0] for w in WRONG])
def test_a_preset_with_a_wrong_option_gets_one_line(tmp_path, capsys, monkeypatch, yaml,
                                                    line):
    """A real preset in the user's config folder (VITFSDP_CONFIG_PATH): exit 2, the one
    line, no sweep directory (with the plugin's typed node: ValidationError, or a text
    switch read as true)."""
    err = refusal_of_preset(tmp_path, capsys, monkeypatch, "site", yaml)
    assert err.splitlines() == [f"error: {line}"], err


def test_a_switch_on_the_command_line_that_is_not_true_or_false_gets_the_same_line(
        tmp_path, capsys):
    sweep_dir = tmp_path / "sweep"
    with pytest.raises(SystemExit) as refused:
        main_cli(["-m", "model=vit_tiny", "hydra.launcher.detach=yes",
                  f"hydra.sweep.dir={sweep_dir}"])
    err = capsys.readouterr().err
    assert refused.value.code == EXIT_REFUSED and not sweep_dir.exists(), err
    assert err.splitlines() == ["error: hydra.launcher.detach=yes " + SWITCH.format(
        "detach", " (the short flag: --detach)")], err


@pytest.mark.parametrize("text", ["maybe", "yes", "1", ""])
def test_a_switch_given_as_text_is_never_read_as_true(text):
    config = OmegaConf.create({"hydra": {"launcher": {"scripts_only": text}}})
    with pytest.raises(SweepRefused, match=r"^error: hydra.launcher.scripts_only=.* is not "
                                           "true or false"):
        _options(config)


def test_true_false_and_numbers_given_as_text_are_taken():
    config = OmegaConf.create({"hydra": {"launcher": {
        "scripts_only": "True", "run_infeasible": " false ", "batch_search_max": "64",
        "job_name": 7, "pack": "by_nodes", "stall_floor_s": "600"}}})
    options = _options(config)
    assert (options.scripts_only, options.run_infeasible, options.batch_search_max,
            options.job_name, options.pack, options.stall_floor_s) == (
        True, False, 64, "7", "by_nodes", 600.0)
    assert _options(OmegaConf.create({"hydra": {"launcher": {}}})) == LaunchOptions()
