"""The package's layers hold: import-linter's contracts (pyproject.toml, [tool.importlinter])
are kept, they do catch a planted violation, and every import inside a function says why it is
there (docs/architecture.md, "Layers")."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "vitfsdp"


def lint_imports(cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    """``lint-imports`` with the contracts of ``cwd/pyproject.toml``; the package analysed is
    the first ``vitfsdp`` on ``pythonpath`` (the checkout where None)."""
    env = dict(os.environ, PYTHONPATH=str(pythonpath or ROOT))
    code = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports())"
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=300)


def test_import_contracts_are_kept():
    out = lint_imports(ROOT)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "4 kept, 0 broken" in out.stdout, out.stdout[-2000:]


@pytest.mark.parametrize("module, planted, contract", [
    # records importing a launcher: a layer violation and a cycle (launch imports records)
    ("records.py", "import vitfsdp.launch.slurm", "Layers"),
    # the JAX trainer importing the torch trainer
    ("jax/train.py", "import vitfsdp.torch_train", "independent"),
    # the run core importing torch
    ("core/layout.py", "import torch", "framework-neutral"),
    # the plan importing the analysis, which imports the plan
    ("plan/timing.py", "import vitfsdp.analysis.collect", "No import cycle"),
])
def test_contracts_catch_a_planted_import(tmp_path, module, planted, contract):
    shutil.copytree(PACKAGE, tmp_path / "vitfsdp",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "vitfsdp" / module
    target.write_text(target.read_text() + f"\n{planted}  # planted by the test\n")
    out = lint_imports(tmp_path, pythonpath=tmp_path)
    assert out.returncode != 0, out.stdout[-3000:]
    # the report names each broken contract under its "Broken contracts" heading (the
    # summary line above may wrap a long name)
    assert contract in out.stdout.partition("Broken contracts")[2], out.stdout[-3000:]


def _function_level_imports(path: Path) -> list[tuple[int, str, bool]]:
    """Imports below module level in ``path`` (a ``TYPE_CHECKING``, ``try`` or ``if`` block at
    module level counts as module level): (line, module, has a comment on its last line or on
    the line just above the block of consecutive imports it belongs to, e.g. ``try:  # why``)."""
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    module_level: set[ast.AST] = set()

    def mark(body: list[ast.stmt]) -> None:
        for node in body:
            module_level.add(node)
            if isinstance(node, ast.If | ast.Try):
                mark(node.body)
                mark(node.orelse)
                for handler in getattr(node, "handlers", []):
                    mark(handler.body)
                mark(getattr(node, "finalbody", []))

    mark(tree.body)
    found = []
    for parent in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(parent, field, None)
            if not isinstance(body, list):
                continue
            run: list[ast.stmt] = []  # consecutive imports of one body: one block
            for stmt in [*body, None]:
                if isinstance(stmt, ast.Import | ast.ImportFrom) and stmt not in module_level:
                    run.append(stmt)
                    continue
                above = lines[run[0].lineno - 2] if run and run[0].lineno > 1 else ""
                for node in run:
                    name = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                    commented = "#" in above or "#" in lines[node.end_lineno - 1]
                    found.append((node.lineno, name or ".", commented))
                run = []
    return found


def test_every_function_level_import_says_why():
    """Imports inside functions are kept for what must not load at import time (torch, timm,
    JAX, NVML, submitit, the metric sinks: commands that train nothing start in well under a
    second) and each says so in a comment; none hides an import cycle (the contracts above)."""
    silent = [f"{path.relative_to(ROOT)}:{line} {name}"
              for path in sorted(PACKAGE.rglob("*.py"))
              for line, name, commented in _function_level_imports(path) if not commented]
    assert not silent, "function-level imports without a comment saying why:\n" + "\n".join(
        silent)


def test_the_comment_rule_sees_a_silent_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    import json\n    return json\n\n"
                      "def g():\n    # heavy: loaded on use\n    import torch\n    import timm\n")
    assert [(line, commented) for line, _, commented in _function_level_imports(module)] == [
        (2, False), (7, True), (8, True)]
