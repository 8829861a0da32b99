"""The run directory's vocabulary lives in vitfsdp.core.layout alone."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from vitfsdp.core import layout
from vitfsdp.core.layout import SLURM_OUTPUT, TASK_LOG, field_of

PACKAGE = Path(__file__).resolve().parents[2] / "vitfsdp"
#: Modules that name no run-directory file, exit code or status themselves.
READERS = ("records.py", "launch/resume.py", "launch/slurm.py", "launch/pack.py",
           "launch/local.py", "launch/status.py")
NAMES = {value for key, value in vars(layout).items() if key.isupper() and isinstance(value, str)}
#: Names a module must not define again (the old copies included).
OWN_NAMES = ({key for key, value in vars(layout).items() if key.isupper()
              and isinstance(value, str)}
             | {"EXIT_PREEMPTED", "EXIT_FAILED", "EXIT_ALREADY_COMPLETED", "PREEMPTED_EXIT",
                "COMPLETED_EXIT"})


@pytest.mark.parametrize("module", READERS)
def test_modules_spell_no_name_or_status_themselves(module):
    tree = ast.parse((PACKAGE / module).read_text(encoding="utf-8"))
    spelled = [(node.lineno, node.value) for node in ast.walk(tree)
               if isinstance(node, ast.Constant) and node.value in NAMES]
    assert not spelled, f"{module} spells {spelled}; import them from vitfsdp.core.layout"


def test_no_module_defines_a_layout_name_again():
    defined = []
    for path in PACKAGE.rglob("*.py"):
        if path.parent.name == "core":
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            defined += [f"{path.relative_to(PACKAGE)}: {t.id}" for t in targets
                        if isinstance(t, ast.Name) and t.id in OWN_NAMES]
    assert not defined, f"defined outside vitfsdp.core.layout: {defined}"


def test_statuses_are_distinct_and_grouped_from_them():
    assert len(set(layout.STATUSES)) == len(layout.STATUSES)
    assert layout.RUNNING not in layout.STATUSES
    assert set(layout.FAILED_IN_RUN) <= set(layout.STATUSES)
    assert set(layout.INTERRUPTED_STATUSES) <= set(layout.STATUSES)
    assert layout.COMPLETED not in layout.FAILED_IN_RUN + layout.INTERRUPTED_STATUSES
    codes = (layout.EXIT_COMPLETED, layout.EXIT_FAILED, layout.EXIT_PREEMPTED,
             layout.EXIT_ALREADY_COMPLETED)
    assert len(set(codes)) == len(codes)


@pytest.mark.parametrize(("pattern", "name", "value"), [
    (SLURM_OUTPUT, "slurm-4242.out", "4242"), (SLURM_OUTPUT, "slurm-.out", ""),
    (SLURM_OUTPUT, "slurm-4242.log", None), (SLURM_OUTPUT, "x-4242.out", None),
    (TASK_LOG, "task12.log", "12"), (TASK_LOG, "task.log", ""), (TASK_LOG, "tas.log", None),
])
def test_field_of_reads_a_name_back(pattern, name, value):
    assert field_of(pattern, name) == value
    if value:
        assert pattern.format(**{pattern.split("{")[1].split("}")[0]: value}) == name


def test_records_and_layout_import_no_launcher_and_no_framework():
    code = ("import sys, vitfsdp.records; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'jax', 'hydra') or m.startswith('vitfsdp.launch')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert out.strip() == "[]"
