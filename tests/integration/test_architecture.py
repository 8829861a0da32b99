"""The package's layers hold: import-linter's contracts (pyproject.toml, [tool.importlinter])
are kept, they do catch a planted violation, and every import inside a function says why it is
there (docs/architecture.md, "Layers")."""

from __future__ import annotations

import ast
import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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


#: What docs/architecture.md names in backticks: a dotted name in the package
#: (``sweep.launch``, ``core.locks.locked``), a file (``core/layout.py``, ``memory.py``) or a
#: folder (``analysis/``).
_DOTTED = re.compile(r"^([a-z_]+(?:\.[A-Za-z_]+)+)$")
_FILE = re.compile(r"^[\w/.]+\.(?:py|sh|yaml)$")
_FOLDER = re.compile(r"^[\w/.]+/$")
#: Suffixes of record files (``run.json``) and documents: named in the doc, but not code.
_NOT_CODE = (".json", ".jsonl", ".csv", ".png", ".svg", ".md", ".html", ".log", ".out",
             ".txt", ".toml", ".lock", ".gz")


def architecture_names(text: str) -> list[str]:
    """The backticked names of ``text`` that stand for code: files, folders and dotted
    names; record files (``run.json``) and anything with a space or ``=`` are left out."""
    names = []
    for token in re.findall(r"`([^`\s=<>]+)`", text):
        token = token.strip("()")
        if token.endswith(_NOT_CODE):
            continue
        if _FILE.match(token) or _FOLDER.match(token) or _DOTTED.match(token):
            names.append(token)
    return names


def _resolves(dotted: str) -> bool:
    """Whether ``dotted`` is a module or an attribute of a module, found by import."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _config_key(dotted: str) -> bool:
    """Whether ``dotted`` is a key of the run config (``train.log_every``), which the doc
    names in backticks like code."""
    from omegaconf import OmegaConf

    from vitfsdp.config import RunConfig

    return OmegaConf.select(OmegaConf.structured(RunConfig), dotted,
                            throw_on_missing=False, default="absent") != "absent"


def _run_dir_name(name: str) -> bool:
    """Whether ``name`` (``checkpoint/``, ``job.sbatch``) is a name of a run or sweep
    directory's vocabulary (:mod:`vitfsdp.core.layout`): a record, not code."""
    from vitfsdp.core import layout

    return name.rstrip("/") in {v for k, v in vars(layout).items()
                                if k.isupper() and isinstance(v, str)}


def missing_names(names: list[str]) -> list[str]:
    """The names of :func:`architecture_names` that do not exist: a file or folder found
    nowhere in the checkout (a bare ``memory.py`` may be in any folder) and not a name of the
    run directory's vocabulary, a dotted name that is neither a module or attribute of the
    package (or of a library: ``concurrent.futures``) nor a run-config key."""
    paths = {p.relative_to(ROOT).as_posix() + ("/" if p.is_dir() else "")
             for p in ROOT.rglob("*") if ".git" not in p.parts and "__pycache__" not in p.parts}
    missing = []
    for name in names:
        if _FILE.match(name) or _FOLDER.match(name):
            found = (any(p == name or p.endswith("/" + name) for p in paths)
                     or _run_dir_name(name))
        else:
            dotted = _DOTTED.match(name).group(1)
            found = (_resolves(dotted if dotted.startswith("vitfsdp.") else "vitfsdp." + dotted)
                     or _resolves(dotted) or _config_key(dotted) or _run_dir_name(name))
        if not found:
            missing.append(name)
    return missing


def test_every_module_the_architecture_page_names_exists():
    names = architecture_names((ROOT / "docs" / "architecture.md").read_text())
    assert len(names) > 60, names  # its tables and the mechanisms name this many
    missing = missing_names(names)
    assert not missing, "docs/architecture.md names code that does not exist: " + ", ".join(
        missing)


def test_the_page_check_sees_a_missing_module():
    names = architecture_names("`sweep.launch`, `analysis/nowhere.py`, `core/`, `run.json`, "
                               "`sweep.no_such_thing`, `train.log_every`, `strategy=DDP`")
    assert names == ["sweep.launch", "analysis/nowhere.py", "core/", "sweep.no_such_thing",
                     "train.log_every"]
    assert missing_names(names) == ["analysis/nowhere.py", "sweep.no_such_thing"]
