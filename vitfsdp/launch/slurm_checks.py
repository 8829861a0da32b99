"""Checks of a Slurm sweep before anything queues, asked of the login node where the sweep
runs: the partition's node count (``sinfo``), the paths and modules the job script sets up,
the environment they make (vitfsdp and torch importable, torch's build; for ``framework=jax``
points, jax and its GPU plugin for the profile's GPUs), read-only file
systems, and ``sbatch --test-only`` of each job shape. A Slurm command that does
not answer raises :class:`SlurmUnreachable`, the same for every point of a sweep.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from vitfsdp.launch import ClusterConfig
from vitfsdp.launch.slurm import (
    activation_lines,
    env_lines,
    node_python,
    prepend_lines,
    sbatch_options,
)

log = logging.getLogger(__name__)


def partition_nodes(partition: str | None) -> tuple[str, int]:
    """The partition's name and node count, from ``sinfo`` (``None`` = the default partition).

    Raises:
        ValueError: sinfo fails (no Slurm reachable) or the partition does not exist.
    """
    proc = _slurm_cmd(["sinfo", "-h", "-o", "%P %D"])
    counts: dict[str, int] = {}
    default = None
    for line in proc.stdout.split("\n"):
        if not line.strip():
            continue
        name, num = line.split()
        if name.endswith("*"):
            name = default = name[:-1]
        counts[name] = counts.get(name, 0) + int(num)
    name = partition or default
    if name not in counts:
        raise ValueError(f"cluster.partition={partition!r} does not exist; partitions: "
                         f"{', '.join(sorted(counts))}")
    return name, counts[name]


def missing_path(cluster: ClusterConfig) -> str | None:
    """Why the environment the job script sets up cannot exist, as seen from here (the login
    node, where the sweep runs): a ``cluster.setup_script`` that is not a readable file, a
    ``cluster.venv`` without ``bin/activate``, a ``cluster.conda_env`` path that is not a
    directory, a ``cluster.python`` path that is not executable (or a bare name not on PATH
    when nothing is activated); None when all are there or ``cluster.check_paths`` is false.
    The job checks again on its node (:func:`path_check_lines`)."""
    if not cluster.check_paths:
        return None
    fix = ("; fix the path (or set cluster.check_paths=false if it exists on the compute "
           "nodes only)")
    if cluster.setup_script and not (os.path.isfile(cluster.setup_script)
                                     and os.access(cluster.setup_script, os.R_OK)):
        return f"cluster.setup_script={cluster.setup_script} is not a readable file here{fix}"
    if cluster.venv and not os.path.isfile(os.path.join(cluster.venv, "bin", "activate")):
        return f"cluster.venv={cluster.venv} has no bin/activate here{fix}"
    if cluster.conda_env and "/" in cluster.conda_env and not os.path.isdir(cluster.conda_env):
        return f"cluster.conda_env={cluster.conda_env} is not a directory here{fix}"
    if cluster.sbcast_env and not os.path.isfile(cluster.sbcast_env):
        return f"cluster.sbcast_env={cluster.sbcast_env} is not a file here{fix}"
    python = cluster.python
    activated = (cluster.setup_script or cluster.conda_env or cluster.venv or cluster.modules
                 or cluster.sbcast_env)
    if python and ("/" in python or not activated) and not shutil.which(python):
        return f"cluster.python={python} is not an executable here{fix}"
    return None


#: Checks ``cluster.modules`` as the job loads them, in one shell: each must be available
#: (``module is-avail``) once the ones before it are loaded; prints the index of the first
#: that is not, and why (``avail`` or ``load``).
MODULE_CHECK = ('i=0; for m in "$@"; do '
                'module is-avail "$m" >/dev/null 2>&1 || { echo "$i avail"; exit 3; }; '
                'module load "$m" >/dev/null 2>&1 || { echo "$i load"; exit 3; }; '
                'i=$((i + 1)); done')


def unavailable_module(modules: Sequence[str]) -> str | None:
    """Why a module of ``cluster.modules`` cannot load, as the site's module system here (the
    login node) answers (Lmod, Environment Modules): in one shell, in the job's order, each
    asked ``module is-avail`` after the ones before it are loaded (a module of Lmod's
    hierarchy is available only once what it depends on is loaded, as OLCF's
    ``rccl-net-plugin`` after ``rocm``); one line naming the first that is not available or
    does not load; None when all load, or when this shell has no ``module`` (nothing to ask:
    the job's own ``module load`` fails on the node)."""
    if not modules or not _has_module_command():
        return None
    proc = subprocess.run(["bash", "-c", MODULE_CHECK, "module", *modules],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode == 0:
        return None
    index, _, why = proc.stdout.strip().rpartition("\n")[2].partition(" ")
    i = int(index) if index.isdigit() and int(index) < len(modules) else 0
    after = f" after {', '.join(modules[:i])}" if i else ""
    what = "is not available here" if why == "avail" else "does not load here"
    return (f"cluster.modules[{i}]={modules[i]!r} {what}{after} (module "
            f"{'is-avail' if why == 'avail' else 'load'}); see module avail (or module spider "
            "for what it needs loaded first), or set cluster.check_paths=false if the compute "
            "nodes have other modules")


#: The JAX distributions :data:`ENV_PROBE` looks up where ``framework=jax`` points ask: ``jax``,
#: ``jaxlib`` and the GPU plugins jaxlib loads, by GPU stack. The plugins are the modules of
#: jaxlib's ``plugin_support._PLUGIN_MODULE_NAMES`` (``jax_cuda13_plugin``,
#: ``jax_cuda12_plugin``; ``jax_rocm7_plugin``, ``jax_rocm60_plugin``) as their wheels name
#: them, which the JAX installation guide's extras install (``jax[cuda13]``, ``jax[cuda12]``,
#: ``jax[rocm7-local]``: https://docs.jax.dev/en/latest/installation.html; ROCm 6's
#: ``jax-rocm60-plugin``: AMD's "Install JAX for ROCm"), and ``jax-cuda11-plugin`` of jax
#: 0.4.2x. Older jaxlib wheels were GPU builds themselves (``0.4.23+cuda12.cudnn89``,
#: ROCm/jax's ``0.4.30+rocm611``): :func:`jax_gpu_problem` reads that label too.
JAX_PLUGINS = {"cuda": ("jax-cuda13-plugin", "jax-cuda12-plugin", "jax-cuda11-plugin"),
               "rocm": ("jax-rocm7-plugin", "jax-rocm60-plugin")}
JAX_DISTRIBUTIONS = ("jax", "jaxlib", *JAX_PLUGINS["cuda"], *JAX_PLUGINS["rocm"])

#: Run by the jobs' interpreter in their environment (:func:`environment_problem`): whether
#: vitfsdp imports from the working directory, torch's distribution version (its local label,
#: ``+rocm7.1`` or ``+cu128``, names the build) and, where the label does not say and argv[1]
#: asks (``import``), torch's own ``version.hip``/``version.cuda`` (importing torch: slower);
#: where argv[1] asks ``jax`` (``label,jax``), the versions of the :data:`JAX_DISTRIBUTIONS`
#: installed, from their metadata alone: JAX is not imported and no backend starts (a login
#: node has no GPU, and ``jax.devices()`` would say cpu there whatever is installed).
ENV_PROBE = """
import importlib.metadata as md, importlib.util as iu, json, re, sys
modes = sys.argv[1].split(",")
r = {"vitfsdp": iu.find_spec("vitfsdp") is not None, "torch": None}
try:
    r["torch"] = md.version("torch")
except md.PackageNotFoundError:
    pass
if r["torch"] and "import" in modes and not re.search(r"\\+(rocm|cu\\d|cpu)", r["torch"]):
    import torch
    r["hip"], r["cuda"] = torch.version.hip, torch.version.cuda
if "jax" in modes:
    r["jax"] = {}
    for name in JAX_DISTRIBUTIONS:
        for spelling in (name, name.replace("-", "_")):
            try:
                r["jax"][name] = md.version(spelling)
                break
            except md.PackageNotFoundError:
                pass
print("VITFSDP_ENV " + json.dumps(r))
""".replace("JAX_DISTRIBUTIONS", repr(JAX_DISTRIBUTIONS))


def found_build(found: dict) -> tuple[str, str | None]:
    """The GPU stack of the torch ``found`` by :data:`ENV_PROBE` and its version:
    ``("rocm", "7.1")`` for ``2.10.0+rocm7.1`` (or ``version.hip`` 7.1.x), ``("cuda",
    "12.8")`` for ``+cu128`` (or ``version.cuda``), ``("cpu", None)`` for ``+cpu`` or neither;
    ``("unknown", None)`` where the label does not say and torch was not imported."""
    label = (found.get("torch") or "").partition("+")[2]
    if m := re.fullmatch(r"rocm(\d+\.\d+)(?:\.\d+)*", label):
        return "rocm", m.group(1)
    if m := re.fullmatch(r"cu(\d+)(\d)", label):
        return "cuda", f"{m.group(1)}.{m.group(2)}"
    if label == "cpu":
        return "cpu", None
    if "hip" not in found:
        return "unknown", None
    if found.get("hip"):
        return "rocm", ".".join(str(found["hip"]).split(".")[:2])
    if found.get("cuda"):
        return "cuda", ".".join(str(found["cuda"]).split(".")[:2])
    return "cpu", None


def _release(version: str) -> tuple[int, ...]:
    """The numeric release of a version (``0.10.2`` of ``0.10.2.dev1+cuda12``), as jaxlib's
    ``plugin_support.check_plugin_version`` compares a plugin's with its own."""
    m = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(x) for x in m.group(0).split(".")) if m else ()


def jax_gpu_problem(found_jax: dict[str, str], stack: str | None) -> str | None:
    """What keeps the JAX of an environment off the profile's GPUs, from the versions of the
    :data:`JAX_DISTRIBUTIONS` :data:`ENV_PROBE` found installed there (``found_jax``:
    distribution name -> version) and the profile's GPU stack (``stack``: ``cuda``, ``rocm``;
    None or ``cpu``: JAX itself is all a point needs).

    Returns:
        the clause for a refusal (``it has jax 0.10.2 CPU-only``, ``it has no jax``, ``it has
        jax 0.10.2 with the ROCm plugin only``, ``it has jax-cuda12-plugin 0.7.2, which jaxlib
        0.10.2 does not load``), or None where JAX can use the GPUs: a plugin of ``stack``
        installed (a CUDA plugin of jaxlib's own release, which is all jaxlib loads:
        ``plugin_support.check_plugin_version``), or a jaxlib labelled as a build for it.
    """
    jax, jaxlib = found_jax.get("jax"), found_jax.get("jaxlib")
    if not jax:
        return "it has no jax"
    if not jaxlib:
        return f"it has jax {jax} without jaxlib"
    if stack not in JAX_PLUGINS:
        return None
    has = f"jax {jax}" + (f" (jaxlib {jaxlib})" if jaxlib != jax else "")
    if re.search(rf"\+{stack}", jaxlib):  # a GPU build of jaxlib itself (before plugins)
        return None
    plugins = [name for name in JAX_PLUGINS[stack] if name in found_jax]
    if any(stack == "rocm" or _release(found_jax[name]) == _release(jaxlib)
           for name in plugins):
        return None
    if plugins:
        return (f"it has {plugins[0]} {found_jax[plugins[0]]}, which jaxlib {jaxlib} does not "
                "load (a CUDA plugin of jaxlib's own version only)")
    other = next((s for s in JAX_PLUGINS if s != stack and (
        re.search(rf"\+{s}", jaxlib) or any(n in found_jax for n in JAX_PLUGINS[s]))), None)
    if other:
        return f"it has {has} with the {_STACK_NAMES[other]} plugin only"
    return f"it has {has} CPU-only"


#: How a message names a GPU stack.
_STACK_NAMES = {"cuda": "CUDA", "rocm": "ROCm"}


def jax_install_hint(stack: str | None, cuda: str | None) -> str:
    """The install command a refusal of :func:`jax_gpu_problem` gives, from the JAX
    installation guide (https://docs.jax.dev/en/latest/installation.html): ``jax[cuda12]``
    or ``jax[cuda13]`` by the major of ``cuda`` (torch's CUDA version, where known; else 12,
    which a CUDA 12 or 13 driver runs), ``jax[rocm7-local]`` for ROCm (ROCm 6 takes AMD's
    ``jax-rocm60-plugin``: environment.yml), ``vitfsdp[jax]`` (the CPU wheels, README
    "Installing") for a profile of no GPU stack."""
    if stack == "cuda":
        major = (cuda or "").partition(".")[0]
        return f"pip install 'jax[cuda{major if major in ('12', '13') else '12'}]'"
    if stack == "rocm":
        return "pip install 'jax[rocm7-local]'"
    return "pip install 'vitfsdp[jax]'"


def environment_problem(cluster: ClusterConfig, cwd: str | Path,
                        jax: bool = False) -> tuple[str | None, str | None]:
    """Ask the jobs' environment, made here as their script makes it (``cluster.modules``,
    ``setup_script``, ``conda_env``, ``venv``: :func:`vitfsdp.launch.slurm.activation_lines`)
    and run by their interpreter in ``cwd`` (where the jobs start), what it holds: a job whose
    torch is missing or of another build than ``cluster.torch_build`` (a CUDA wheel on
    Frontier), or that cannot import vitfsdp, fails on its node at once, and every job of the
    sweep with it, after each has waited in the queue. With ``cluster.export_env=false`` it
    is asked from the login environment the jobs start from (:func:`login_environment`), not
    this shell's. With ``jax`` (asked for ``framework=jax`` points only: a torch sweep's probe
    looks for no JAX) the same probe reads the installed JAX distributions' metadata
    (:data:`JAX_DISTRIBUTIONS`; nothing imported, no backend started): a point whose
    environment has no jax, or on a profile of ``cluster.torch_build`` cuda or rocm no JAX
    GPU plugin for it (:func:`jax_gpu_problem`), would stop on its node after its queue wait
    (``JAX ... sees no GPU``). Skipped (None, None) where
    ``cluster.check_paths`` is false, the environment is a ``sbcast_env`` (unpacked on the
    nodes only), or ``cluster.modules`` are set and this shell has no ``module``.

    Returns:
        ``(refusal, warning)``: a refusal in one line naming the field and the fix; a warning
        where the environment did not answer in time, or torch's ROCm or CUDA version is not
        the ``rocm/<version>`` or ``cuda/<version>`` module loaded (a site's guide pins one
        to the other: OLCF's "PyTorch on Frontier").
    """
    if not cluster.check_paths or cluster.sbcast_env:
        return None, None
    if cluster.modules and not _has_module_command():
        return None, None
    where = _environment_name(cluster)
    if not cluster.export_env:
        where += " (from your login environment, as cluster.export_env=false starts the jobs)"
    deep = ("import" if cluster.torch_build else "label") + (",jax" if jax else "")
    log.info("asking %s what it holds (torch, vitfsdp%s) before anything is queued", where,
             ", jax" if jax else "")
    login = [] if cluster.export_env else ["-l"]  # --export=NONE: the login environment
    try:
        proc = subprocess.run(["bash", *login, "-c", environment_script(cluster),
                               node_python(cluster), ENV_PROBE, deep], cwd=cwd,
                              env=None if cluster.export_env else login_environment(),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=ENV_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, (f"{where} did not answer within {ENV_TIMEOUT_S} s; not checked before "
                      "queueing")
    found = next((json.loads(line.partition(" ")[2]) for line in proc.stdout.splitlines()
                  if line.startswith("VITFSDP_ENV ")), None)
    fix = ("; or set cluster.check_paths=false if the compute nodes have another environment")
    if found is None:
        said = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        return (f"{where} does not run here ({said[-1] if said else f'exit {proc.returncode}'})"
                f"{fix}"), None
    if not found["torch"]:
        return (f"{where} has no torch: install torch for the site's GPUs there (README, "
                f"\"Installing\"){fix}"), None
    build, version = found_build(found)
    if cluster.torch_build and build not in (cluster.torch_build, "unknown"):
        return (f"cluster.torch_build={cluster.torch_build}: {where} has torch "
                f"{found['torch']}, a {build} build, and every job would fail on its node: "
                f"install torch's {cluster.torch_build} wheel there (README, \"Installing\")"
                f"{fix}"), None
    if not found["vitfsdp"]:
        return (f"{where} cannot import vitfsdp from {cwd}, where the jobs start: pip install "
                f"-e <your clone> in that environment, or sweep from the clone{fix}"), None
    if jax and (missing := jax_gpu_problem(found.get("jax", {}), cluster.torch_build)):
        stack = cluster.torch_build if cluster.torch_build in JAX_PLUGINS else None
        cuda = version if build == "cuda" else _module_version(cluster.modules,
                                                               ("cuda", "cudatoolkit"))
        return (f"cluster={cluster.name}: framework=jax points need jax"
                f"{f' with the {_STACK_NAMES[stack]} plugin' if stack else ''} in {where}; "
                f"{missing}: {jax_install_hint(stack, cuda)} there, or drop framework=jax"
                f"{fix}"), None
    loaded = _module_version(cluster.modules, ("rocm",) if build == "rocm"
                             else ("cuda", "cudatoolkit"))
    if version and loaded and loaded != version:
        return None, (f"{where} has torch {found['torch']} ({build} {version}) with "
                      f"cluster.modules loading {build} {loaded}: the site's guide pins one "
                      "to the other; a mismatch can fail or slow the collectives")
    return None, None


def login_environment() -> dict[str, str]:
    """The environment a job submitted with ``--export=NONE`` (``cluster.export_env=false``)
    starts from before its login shell's profile runs: the user's identity and a system PATH,
    nothing of the submitting shell (no activated venv, no PYTHONPATH). sbatch(1),
    ``--export=NONE``: Slurm then loads the user's login environment, as
    ``--get-user-env`` does (``su - <user> -c /usr/bin/env``); :func:`environment_problem`
    runs its check in ``bash -l`` from this."""
    kept = {k: os.environ[k] for k in ("HOME", "USER", "LOGNAME", "SHELL") if k in os.environ}
    return {**kept, "PATH": "/usr/local/bin:/usr/bin:/bin"}


def environment_script(cluster: ClusterConfig) -> str:
    """The bash script :func:`environment_problem` runs (``$0``: the jobs' interpreter, then
    the probe's code and mode): the jobs' environment as their script makes it (modules,
    setup script, conda or venv, ``cluster.env``, ``prepend_env``), less what only a node
    has (its secrets, its node count's variables), then the interpreter."""
    return "\n".join(["set -e", *activation_lines(cluster), *env_lines(cluster),
                      *prepend_lines(cluster), 'exec "$0" -c "$1" "$2"'])


#: Seconds the environment check waits for the jobs' interpreter (an import of torch from a
#: network file system can take a minute on a busy login node).
ENV_TIMEOUT_S = 600


@functools.cache
def _has_module_command() -> bool:
    """Whether this shell has ``module`` (Lmod, Environment Modules); False where asking
    takes over a minute (nothing to ask then: the job's own ``module load`` fails on the
    node). Asked once per process: the module and the environment checks both need it."""
    try:
        return subprocess.run(["bash", "-c", "type module"], capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=60).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _environment_name(cluster: ClusterConfig) -> str:
    """How a message names the jobs' environment: by their interpreter where one is named
    (a wrapper script runs what it runs), else by the field that makes it."""
    for key in ("python", "conda_env", "venv", "setup_script"):
        if getattr(cluster, key):
            return f"cluster.{key}={getattr(cluster, key)}"
    return f"the jobs' interpreter {node_python(cluster)}"


def _module_version(modules, names: tuple[str, ...]) -> str | None:
    """``major.minor`` of the first ``<name>/<version>`` module in ``modules`` of one of
    ``names`` (``rocm/7.1.1``: ``7.1``); None where none is loaded."""
    for module in modules:
        name, _, version = module.partition("/")
        if name in names and (m := re.match(r"(\d+\.\d+)", version)):
            return m.group(1)
    return None


def _under(entries: Sequence[str], run_dir: str | Path) -> str | None:
    """The first of ``entries`` (paths; ``$NAME`` and ``~`` expanded here, on the login node,
    which mounts the compute nodes' file systems under the same paths) that ``run_dir`` lies
    under, as a message shows it (``$HOME = /home/me``); None when none. An entry naming a
    variable that is not set here is skipped (nothing to compare)."""
    run_dir = Path(run_dir).resolve()
    for entry in entries:
        path = os.path.expandvars(os.path.expanduser(entry))
        if not path or "$" in path:
            continue
        root = Path(path).resolve()
        if run_dir.is_relative_to(root):
            return entry if entry == str(root) else f"{entry} = {root}"
    return None


def read_only_refusal(read_only_paths: Sequence[str], run_dir: str | Path,
                      cluster_name: str) -> str | None:
    """Why the compute nodes could not write a point's records into ``run_dir``: it lies under
    an entry of ``read_only_paths`` (the profile's ``cluster.read_only_paths``: file systems
    the compute nodes of ``cluster=<cluster_name>`` mount read-only, as :func:`_under` reads
    them). None when it lies under none.

    Returns:
        one line naming ``hydra.sweep.dir``, the entry and the fix, or None.
    """
    shown = _under(read_only_paths, run_dir)
    if shown is None:
        return None
    return (f"hydra.sweep.dir={Path(run_dir).resolve().parent} is under {shown}, which cluster="
            f"{cluster_name} mounts read-only on its compute nodes (cluster."
            "read_only_paths): no point could write its records; choose a "
            "hydra.sweep.dir on a file system the compute nodes write (docs/sites.md)")


def small_path_warning(small_paths: Sequence[str], run_dir: str | Path,
                       cluster_name: str) -> str | None:
    """A warning where ``run_dir`` lies under an entry of ``small_paths`` (the profile's
    ``cluster.small_paths``: file systems of a small quota, Frontier's NFS homes of 50 GB,
    where a large model's checkpoint alone does not fit and a full quota fails the jobs);
    None elsewhere."""
    shown = _under(small_paths, run_dir)
    if shown is None:
        return None
    return (f"hydra.sweep.dir={Path(run_dir).resolve().parent} is under {shown}, a file "
            f"system of a small quota on cluster={cluster_name} (cluster.small_paths): a "
            "large model's checkpoint can fill it and fail the jobs; the site's scratch or "
            "work file system is the place (docs/sites.md)")


def small_path_environment_warning(cluster: ClusterConfig, ranks: int) -> str | None:
    """A warning where the jobs' Python environment (``cluster.venv``, or ``conda_env`` or
    ``python`` given as a path) lies under an entry of ``cluster.small_paths`` (Frontier:
    the NFS homes and project areas) and no ``cluster.sbcast_env`` copies it to the nodes:
    each of the ``ranks`` (the sweep's largest point) imports torch from it at each start,
    and OLCF's "PyTorch on Frontier", "Environment Location", ranks NFS slowest at scale
    (NVMe > Lustre >> NFS; docs/sites.md [P]); None otherwise."""
    if cluster.sbcast_env:
        return None
    for field_name in ("venv", "conda_env", "python"):
        value = getattr(cluster, field_name)
        if not value or not (value.startswith(("/", "~", "$"))):
            continue  # a conda env given by name lives wherever conda keeps it
        shown = _under(cluster.small_paths, os.path.expandvars(os.path.expanduser(value)))
        if shown is not None:
            return (f"cluster.{field_name}={value} is under {shown} (cluster.small_paths, "
                    f"cluster={cluster.name}): up to {ranks} ranks import torch from it at "
                    "each start, and the site's guide ranks such a file system slowest at "
                    "scale; give a packed copy as cluster.sbcast_env (node-local NVMe), or "
                    "keep the environment on the scratch file system (docs/sites.md)")
    return None


def sbatch_test_only(cluster: ClusterConfig, nodes: int, job_name: str) -> str | None:
    """Ask Slurm whether it would run a job of this shape (``sbatch --test-only``); the refusal
    as one line, or None when it would."""
    opts = sbatch_options(cluster, nodes, job_name)
    args = [f"--{k}" if v is True else f"--{k}={v}" for k, v in opts.items()]
    proc = _slurm_cmd(["sbatch", "--test-only", *args, "--wrap", "true"], check=False)
    if proc.returncode == 0:
        return None
    lines = [ln for ln in proc.stderr.splitlines()  # sbatch's own words, not its usage hint
             if ln.strip() and not ln.startswith("Try ")]
    return lines[-1] if lines else f"sbatch --test-only exited with {proc.returncode}"


class SlurmUnreachable(ValueError):
    """A Slurm command did not run or did not answer: the same for every point of a sweep,
    so a sweep says it once."""


def _slurm_cmd(argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    """Run a Slurm query; its output.

    Raises:
        SlurmUnreachable: the command is missing, timed out, or (``check``) failed; one line,
            Slurm's last line of error (its ``fatal:``), not its every line.
    """
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SlurmUnreachable(f"{argv[0]} failed ({e}); is Slurm reachable from here? "
                               "(virtual cluster: make slurm-up; export SLURM_CONF=...)") from e
    if check and proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        said = lines[-1] if lines else f"exit status {proc.returncode}"
        raise SlurmUnreachable(f"{' '.join(argv[:2])} failed: {said}; is Slurm reachable "
                               "from here? (virtual cluster: make slurm-up)")
    return proc
