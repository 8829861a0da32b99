"""Run the sweep in this process on a preset of the user's config folder
(``VITFSDP_CONFIG_PATH``) that sets launcher options, and read what it refused with
(test_launcher_options_preset, test_progress_stall_floor)."""

from __future__ import annotations

import pytest

from vitfsdp.sweep import EXIT_REFUSED, main_cli


def refusal_of_preset(tmp_path, capsys, monkeypatch, name: str, launcher_line: str) -> str:
    """The sweep's stderr for ``experiment=<name>``, a preset whose ``hydra.launcher``
    section is ``launcher_line`` (one YAML line, e.g. ``stall_floor_s: ten``). Asserts the
    sweep exited with EXIT_REFUSED and made no sweep directory."""
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    (tmp_path / "conf" / "experiment" / f"{name}.yaml").write_text(
        f"# @package _global_\nhydra:\n  launcher:\n    {launcher_line}\n")
    monkeypatch.setenv("VITFSDP_CONFIG_PATH", str(tmp_path / "conf"))
    sweep_dir = tmp_path / "sweep"
    with pytest.raises(SystemExit) as refused:  # the sweeper's exit, in this process
        main_cli(["-m", f"experiment={name}", "model=vit_tiny", f"hydra.sweep.dir={sweep_dir}"])
    err = capsys.readouterr().err
    assert refused.value.code == EXIT_REFUSED and not sweep_dir.exists(), err
    return err
