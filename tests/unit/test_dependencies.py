"""Every third-party module the package imports is declared: in pyproject.toml's
``dependencies`` (a plain ``pip install .`` has it) or, for the optional features, in the extra
that names them; and environment.yml lists each of them too.

The imports are read from the source (an ``ast`` walk over vitfsdp/ and hydra_plugins/,
imports inside functions included), not from what happens to be installed here.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
tomllib = pytest.importorskip("tomllib", reason="Python 3.11 reads TOML")

#: Imported only by an optional feature: the extra of pyproject.toml that provides it.
OPTIONAL = {"jax": "jax", "flax": "jax", "optax": "jax", "orbax": "jax", "wandb": "dev"}
#: Import names of modules no index provides, with the reason they are not declared.
NOT_ON_AN_INDEX = {"amdsmi": "AMD SMI's library ships with the ROCm install (metrics.py, "
                             "only under a ROCm torch)"}
#: Import name -> distribution, for modules not installed here (packages_distributions
#: answers for those that are).
KNOWN = {"yaml": "pyyaml", "sklearn": "scikit-learn", "pynvml": "nvidia-ml-py",
         "dotenv": "python-dotenv", "PIL": "pillow", "orbax": "orbax-checkpoint",
         "hydra": "hydra-core"}


def _name(requirement: str) -> str:
    """The normalized distribution name of a requirement (``jax[cuda12]>=0.5`` -> ``jax``)."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0]).lower()


def imported_modules(*roots: Path) -> dict[str, set[str]]:
    """Top-level third-party module -> the files importing it, for every ``.py`` under
    ``roots`` (absolute imports; the standard library and the project's own left out)."""
    found: dict[str, set[str]] = {}
    for root in roots:
        for path in root.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in (
                            "vitfsdp", "hydra_plugins"):
                        found.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return found


@functools.cache
def _packages_distributions() -> dict[str, list[str]]:
    """importlib.metadata's import name -> distributions map, read once: each call reads every
    installed distribution's file list (about 0.3 s here, 11 s over the modules)."""
    return metadata.packages_distributions()


def distributions(module: str) -> set[str]:
    """The normalized names of the distributions that may provide import name ``module``."""
    names = set(_packages_distributions().get(module, ()))
    names.add(KNOWN.get(module, module))
    return {_name(n) for n in names}


def declared() -> tuple[set[str], dict[str, set[str]]]:
    """pyproject.toml's dependencies and its extras (normalized names)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = {k: {_name(r) for r in v} for k, v in project["optional-dependencies"].items()}
    return {_name(r) for r in project["dependencies"]}, extras


def test_imports_are_found_by_the_walk():
    """The walk sees imports inside functions too (filelock, scipy, dotenv are imported on
    use): otherwise the test below would pass for want of looking."""
    found = imported_modules(REPO / "vitfsdp", REPO / "hydra_plugins")
    assert {"torch", "hydra", "filelock", "scipy", "dotenv", "yaml", "numpy"} <= set(found)
    assert "os" not in found and "vitfsdp" not in found


def test_every_import_is_declared_in_pyproject():
    required, extras = declared()
    missing = []
    for module, files in sorted(imported_modules(REPO / "vitfsdp",
                                                 REPO / "hydra_plugins").items()):
        if module in NOT_ON_AN_INDEX:
            continue
        where = extras[OPTIONAL[module]] if module in OPTIONAL else required
        if not distributions(module) & where:
            missing.append(f"{module} ({sorted(files)[0]})")
    assert missing == [], f"imported, not declared in pyproject.toml: {missing}"


def test_environment_yml_lists_pyproject_as_written():
    """environment.yml holds every dependency of pyproject.toml and of its jax and dev
    extras, read from the file (not from an install that may be older than it)."""
    required, extras = declared()
    env = yaml.safe_load((REPO / "environment.yml").read_text(encoding="utf-8"))
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    listed = {_name(r) for r in pip if not r.startswith("-")}
    wanted = (required | extras["jax"] | extras["dev"]) - {"vitfsdp"}
    assert wanted - listed == set(), f"environment.yml lacks {sorted(wanted - listed)}"
