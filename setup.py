"""The package list, which pyproject.toml cannot state: ``packages.find`` discovers only the
folders under ``vitfsdp/`` and ``hydra_plugins/``, not the two data packages that
``[tool.setuptools.package-dir]`` maps from the repository's ``conf/`` and ``launch/sbatch/``.

And the commit a build comes from: ``pip install .`` and ``pip wheel .`` of a git checkout,
or of a copy without ``.git`` that carries the manifest of ``make gpu-wheels``, write it into
the built package (``vitfsdp.core.checkout.BUILD_RECORD``), where run.json's provenance finds
it once the checkout is out of reach (``vitfsdp.provenance.git_state``).
Everything else is in pyproject.toml."""

import importlib.util
import json
from pathlib import Path

from setuptools import find_namespace_packages, setup
from setuptools.command.build_py import build_py

DATA_PACKAGES = ["vitfsdp.conf", "vitfsdp.launch.sbatch"]
HERE = Path(__file__).resolve().parent
# vitfsdp.core.checkout by its path: in pip's isolated build, neither vitfsdp nor its
# dependencies can be imported yet (the module needs only the standard library).
_spec = importlib.util.spec_from_file_location("_vitfsdp_checkout",
                                               HERE / "vitfsdp" / "core" / "checkout.py")
checkout = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(checkout)


class BuildPyWithCommit(build_py):
    """setuptools' build_py, then the commit of the checkout this file is at the top of, or of
    the copy of one that carries its manifest (``vitfsdp.core.checkout.source_state``),
    written into the built package as ``BUILD_RECORD``; nothing where neither is known, nor
    for an editable install, whose package is the checkout itself."""

    def run(self):
        super().run()
        state = checkout.source_state(HERE)
        target = Path(self.build_lib) / "vitfsdp" / checkout.BUILD_RECORD
        if state and not getattr(self, "editable_mode", False):
            target.write_text(json.dumps(state) + "\n", encoding="utf-8")
        else:  # an earlier build's record left in build/ is not this build's commit
            target.unlink(missing_ok=True)


setup(packages=[*find_namespace_packages(include=["vitfsdp*", "hydra_plugins*"]),
                *DATA_PACKAGES],
      cmdclass={"build_py": BuildPyWithCommit})
