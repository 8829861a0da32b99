"""Provenance for run.json (versions, driver, git, Slurm ids, environment, time) and the one
logging setup.

The environment variables that shape a run (communication libraries, ROCm/CUDA runtimes,
threading, torch/XLA/JAX switches, Slurm placement, the rendezvous) are recorded under
``environment``, selected by :data:`ENV_PREFIXES` and :data:`ENV_NAMES`. Nothing secret is
written: a variable whose NAME looks secret (:data:`SECRET_NAME`: TOKEN, KEY, SECRET,
PASSWORD, CREDENTIAL, AUTH, COOKIE …) has its value replaced by ``"<redacted>"``, and a
``user:password@`` inside any value (a URL with credentials) becomes ``<redacted>@``
(:func:`redact`). The same applies to the command line and to ``cluster.env`` in the config.
"""

from __future__ import annotations

import ast
import dataclasses
import datetime
import json
import logging
import os
import platform
import re
import shlex
import sys
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

import yaml

from vitfsdp.core.atomic import write_atomic
from vitfsdp.core.checkout import checkout_state
from vitfsdp.core.layout import MULTIRUN_FILE

#: Slurm variables recorded in run.json (ids and placement, nothing secret).
SLURM_VARS = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_NODELIST",
              "SLURM_JOB_NUM_NODES", "SLURM_NTASKS", "SLURM_JOB_PARTITION", "SLURM_RESTART_COUNT")


#: Prefixes of the environment variables recorded in run.json ``environment``.
ENV_PREFIXES = ("NCCL_", "RCCL_", "FI_", "CXI_", "UCX_", "MPICH_", "OMPI_", "MIOPEN_", "HSA_",
                "HIP_", "ROCR_", "ROCM_", "ROCBLAS_", "HIPBLASLT_", "AMD_", "CUDA_", "CUDNN_",
                "CUBLAS", "NVIDIA_", "NVTE_", "OMP_", "MKL_", "KMP_", "TORCH", "PYTORCH_",
                "XLA_", "JAX_", "SLURM_", "SLURMD_", "MASTER_", "GLOO_", "TORCHELASTIC_")
#: Single environment variables recorded as well.
ENV_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
             "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "CONDA_PREFIX", "VIRTUAL_ENV",
             "HYDRA_FULL_ERROR")
#: Carries a local launcher's emulated network (``vitfsdp.launch.netns``) to the ranks as
#: JSON; recorded as run.json ``network``.
NETWORK_ENV = "VITFSDP_NETWORK"
#: A variable (or config key) whose name matches this has its value redacted.
SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|AUTH|COOKIE"
                         r"|SESSION|SIGNATURE|PRIVATE|CERT|_PW$|_PWD$", re.IGNORECASE)
#: ``scheme://user:password@`` (or ``user:password@host``) inside a value.
_URL_CREDENTIALS = re.compile(r"(?<=[/\s=,;])[^\s/:@,;=]+:[^\s/@]*@|^[^\s/:@,;=]+:[^\s/@]*@")
REDACTED = "<redacted>"
#: Keys that hold the names of secrets, never their values (``cluster.secrets=[HF_TOKEN]``,
#: ``cluster.secrets_file``): kept as they are.
SECRET_NAMES_KEY = re.compile(r"(?:^|[.+~])secrets(?:_file)?$")


def looks_secret(name: str) -> bool:
    """Whether a variable or config key's value is secret: its name matches
    :data:`SECRET_NAME` and is not one of :data:`SECRET_NAMES_KEY`."""
    return bool(SECRET_NAME.search(name)) and not SECRET_NAMES_KEY.search(name)


def redact(name: str, value: str) -> str:
    """``value`` with anything secret removed: all of it when ``name`` looks secret
    (:func:`looks_secret`), else any ``user:password@`` credentials (URLs) inside it."""
    if looks_secret(name):
        return REDACTED
    return _URL_CREDENTIALS.sub(f"{REDACTED}@", value)


def environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The run-relevant environment variables (:data:`ENV_PREFIXES`, :data:`ENV_NAMES`),
    sorted by name, values passed through :func:`redact`."""
    environ = os.environ if environ is None else environ
    return {k: redact(k, environ[k]) for k in sorted(environ)
            if k.startswith(ENV_PREFIXES) or k in ENV_NAMES}


def redact_args(args: list[str]) -> list[str]:
    """Command-line arguments with the value of ``key=value`` redacted where the key looks
    secret, and URL credentials removed from every argument."""
    out = []
    for arg in args:
        key, sep, value = arg.partition("=")
        out.append(f"{key}={redact(key, value)}" if sep else redact("", arg))
    return out


def command_line(args: list[str]) -> str:
    """``args`` as one line a shell runs as they were (:func:`shlex.join`: an argument quoted
    where the shell would split or expand it), secret values redacted
    (:func:`redact_args`)."""
    return shlex.join(redact_args(args))


def redact_mapping(values: Mapping[str, str]) -> dict[str, str]:
    """``{name: value}`` (e.g. ``cluster.env``) with every value through :func:`redact`."""
    return {k: redact(k, str(v)) for k, v in values.items()}


#: ``key=value`` inside a string; a value runs up to the next ``,key=`` (Hydra joins a point's
#: overrides with ``,`` in ``hydra.job.override_dirname``).
_PAIR = re.compile(r"(?P<key>[^\s,=]+)=(?P<value>.*?)(?=,[^\s,=]+=|$)", re.DOTALL)


def redact_text(text: str) -> str:
    """``text`` with the value of each ``key=value`` in it redacted where the key looks secret
    (a value runs up to the next ``,key=``), and URL credentials removed."""
    text = _PAIR.sub(lambda m: f"{m['key']}={REDACTED}" if looks_secret(m["key"])
                     else m[0], text)
    return redact("", text)


def redact_tree(node, key: str = ""):
    """A YAML/JSON tree (dicts, lists, scalars) with secrets redacted: a scalar under a key
    that looks secret, and :func:`redact_text` on every string."""
    if isinstance(node, dict):
        return {k: redact_tree(v, str(k)) for k, v in node.items()}
    if isinstance(node, list):
        return [redact_tree(v) for v in node]
    if isinstance(node, str):
        return REDACTED if looks_secret(key) else redact_text(node)
    return node


def redact_yaml_file(path: Path) -> bool:
    """Rewrite a YAML file Hydra saved (``multirun.yaml``, ``.hydra/*.yaml``) through
    :func:`redact_tree`, in place and atomically; False when it held nothing secret (left
    untouched) or does not exist."""
    try:
        tree = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return False
    redacted = redact_tree(tree)
    if redacted == tree:
        return False
    write_atomic(path, yaml.safe_dump(redacted, sort_keys=False))
    return True


def saved_overrides(sweep_dir: str | os.PathLike) -> dict[str, list[str]] | None:
    """The last sweep command's overrides in ``sweep_dir``, as Hydra's ``multirun.yaml``
    there holds them (redacted by the sweep, :func:`redact_yaml_file`): ``{"task": [...],
    "hydra": [...]}``, each as text; None where the file is missing or unreadable."""
    path = Path(sweep_dir) / MULTIRUN_FILE
    try:
        overrides = (yaml.safe_load(path.read_text(encoding="utf-8")) or {})["hydra"]["overrides"]
        return {k: [str(o) for o in overrides.get(k) or []] for k in ("task", "hydra")}
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError):
        return None


def redact_hydra_outputs(run_dir: Path, output_subdir: str | None) -> None:
    """Redact the config files Hydra saved for a run (``<run dir>/<output_subdir>/*.yaml``:
    config, hydra, overrides) through :func:`redact_yaml_file`; None = Hydra saved none."""
    if output_subdir:
        for path in sorted((Path(run_dir) / output_subdir).glob("*.yaml")):
            redact_yaml_file(path)


def carries_secret(args: list[str], values: Mapping[str, str] | None = None) -> bool:
    """Whether redaction (:func:`redact_args`, :func:`redact_mapping`) would change any of
    ``args`` (``key=value`` overrides) or of ``values`` (e.g. ``cluster.env``): a file that
    holds them as they are must be readable by its owner only."""
    return redact_args(list(args)) != list(args) or redact_mapping(values or {}) != {
        k: str(v) for k, v in (values or {}).items()}


def config_record(cfg) -> dict:
    """run.json's ``config``: the resolved config (a :class:`vitfsdp.config.RunConfig`) as a
    dict, with ``cluster.env``'s values through :func:`redact_mapping`."""
    config = dataclasses.asdict(cfg)
    config["cluster"]["env"] = redact_mapping(cfg.cluster.env)
    return config


def setup_logging(rank: int) -> None:
    """Configure logging once per process: INFO on rank 0, WARNING elsewhere, rank-tagged."""
    logging.basicConfig(
        level=logging.INFO if rank == 0 else logging.WARNING,
        format=f"%(asctime)s [rank {rank}] %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        force=True,
    )


def exit_now(code: int) -> None:
    """Leave the process at once with ``code``: flush the logs, stdout and stderr, then skip
    the interpreter's teardown (``os._exit``): freeing every object one by one (a trainer's
    model and aborted process group, the analysis's frames and figures: 0.4-0.6 s at 10,000
    runs) and the ``atexit`` handlers, so call it only once every file is written and every
    child process has ended. Does not return."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def versions(driver: str | None = None) -> dict:
    """Python, torch, timm, numpy, CUDA or ROCm (HIP), cuDNN/MIOpen, NCCL or RCCL (torch's
    ``torch.cuda.nccl.version()``, which is RCCL's on ROCm; ``collectives`` names which),
    nvidia-ml-py and the GPU driver (``driver``, from NVML or AMD SMI); None where absent."""
    # the versions of what a run loaded: the commands that train nothing never ask, and stay
    # torch-free
    import numpy
    import timm
    import torch

    nccl = cudnn = None
    if torch.cuda.is_available():
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except (RuntimeError, AttributeError, TypeError):
            pass
        cudnn = torch.backends.cudnn.version()
    hip = getattr(torch.version, "hip", None)
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "timm": timm.__version__,
        "numpy": numpy.__version__,
        "cuda": torch.version.cuda,
        "rocm": hip,
        "cudnn": cudnn,  # MIOpen's on ROCm
        "nccl": nccl,
        "collectives": ("rccl" if hip else "nccl") if nccl else None,
        "driver": driver,
        "nvidia_ml_py": _dist_version("nvidia-ml-py"),
    }


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


#: The version file setuptools-scm writes into the built package (pyproject.toml
#: ``[tool.setuptools_scm]``): ``__version__``, and ``__commit_id__`` in setuptools-scm >= 9.
VERSION_FILE = "_version.py"
#: The parts of a setuptools-scm version's local part (its default ``node-and-date`` scheme):
#: ``+g<commit>`` clean, ``+g<commit>.d<YYYYMMDD>`` dirty, ``+d<YYYYMMDD>`` dirty at a tag.
_SCM_NODE = re.compile(r"g(?P<commit>[0-9a-f]{7,40})")
_SCM_DATE = re.compile(r"d\d{8}")


def git_state(package_dir: str | os.PathLike | None = None) -> dict:
    """Commit and dirty flag of the vitfsdp source the package runs from.

    A checkout: ``package_dir`` (default: this package's directory) lies directly in the
    top of a git work tree, whose HEAD and ``git status`` are read now. A package installed
    into a virtual environment that itself sits in some other repository is not that
    repository's code, so its commit is not taken. Otherwise the version setuptools-scm wrote
    into the package at its build (:data:`VERSION_FILE`; :func:`version_state`): the commit
    abbreviated, dirty where the build's checkout differed from it. ``None`` for both where
    neither is there.
    """
    package_dir = Path(package_dir or Path(__file__).parent).resolve()
    return checkout_state(package_dir.parent) or version_state(
        *_built_version(package_dir / VERSION_FILE))


def version_state(version: str | None, commit_id: str | None = None) -> dict:
    """``{"commit": str | None, "dirty": bool | None}`` of a setuptools-scm version:
    ``0.1.dev3+g1a2b3c4d5`` is commit ``1a2b3c4d5``, clean; ``…+g1a2b3c4d5.d20261126``
    dirty. A version without the commit (a clean build at a tag, or one told its version
    without it) takes ``commit_id`` (the version file's, ``g`` dropped). ``None`` for both
    where there is no version or its local part is not setuptools-scm's."""
    parts = [p for p in (version or "").partition("+")[2].split(".") if p]
    if version is None or not all(_SCM_NODE.fullmatch(p) or _SCM_DATE.fullmatch(p)
                                  for p in parts):
        return {"commit": None, "dirty": None}
    nodes = [m["commit"] for p in parts if (m := _SCM_NODE.fullmatch(p))]
    commit = nodes[0] if nodes else (commit_id or "").removeprefix("g") or None
    return {"commit": commit, "dirty": any(_SCM_DATE.fullmatch(p) for p in parts)}


def _built_version(file: Path) -> tuple[str | None, str | None]:
    """``(__version__, __commit_id__)`` of a setuptools-scm version file, read without running
    it; ``None`` for what it lacks or where it cannot be read."""
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"))
    except (OSError, ValueError, SyntaxError):
        return None, None
    values = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            values.update((t.id, node.value.value) for t in node.targets
                          if isinstance(t, ast.Name))
    version, commit_id = values.get("__version__"), values.get("__commit_id__")
    return (version if isinstance(version, str) else None,
            commit_id if isinstance(commit_id, str) else None)


def network_record() -> dict | None:
    """The emulated network's record handed over in :data:`NETWORK_ENV` (by the local
    launcher, or the virtual Slurm cluster's TaskProlog), else ``None`` (unset, not JSON, or
    not an object)."""
    try:
        record = json.loads(os.environ.get(NETWORK_ENV) or "null")
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def collect(driver: str | None = None) -> dict:
    """The provenance part of run.json: ``versions`` (with the GPU ``driver`` version where
    known), ``git``, ``slurm`` ids, the redacted ``environment`` and ``command``, the start
    time, and the emulated ``network`` where a local launcher made one (:data:`NETWORK_ENV`;
    else no such key)."""
    network = network_record()
    return {**({"network": network} if network else {}),
        "versions": versions(driver),
        "git": git_state(),
        "slurm": {k: os.environ[k] for k in SLURM_VARS if k in os.environ},
        "environment": environment(),
        "command": redact_args(sys.argv),
        "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
