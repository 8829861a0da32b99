"""Secrets are named, never valued, on the command line: ``cluster.secrets=[WANDB_API_KEY]``.

A value typed on the command line is in the sweep's own arguments (``ps``, for every user of
the login node, for the hours a sweep watches its jobs), in the shell's history, and, once
rendered into a job script, in the batch script Slurm stores (in its accounting database
where ``AccountingStoreFlags=job_script``, slurm.conf(5)). So:

- an override whose key looks secret (:func:`vitfsdp.provenance.looks_secret`) or whose
  value holds URL credentials is refused (:func:`check_override`), and so is a ``cluster.env``
  entry of that kind (:class:`vitfsdp.launch.ClusterConfig`);
- ``cluster.secrets`` names the variables; their values come from the submitting
  environment, or from ``cluster.secrets_file`` (``NAME=value`` lines, python-dotenv's
  format, mode 0600) for the names it holds (:func:`secret_values`);
- the launcher writes them into :data:`~vitfsdp.core.layout.SECRETS_FILE` in the sweep
  directory (mode 0600 from its first byte, written atomically: :func:`write_secrets`), and
  the job script sources that file: the script's body holds its path, never a value.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from vitfsdp.core.layout import SECRETS_FILE
from vitfsdp.provenance import redact_args
from vitfsdp.records import write_text_atomic

#: The override that names the secrets, shown in hints.
HINT = ("name it instead: cluster.secrets=[{name}] with the value in your environment "
        "(export {name}=...) or in a cluster.secrets_file of mode 0600 (docs/sites.md)")
_KEY_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)$")


def _variable(key: str) -> str:
    """The variable name a hint suggests for an override's key (its last part, upper case)."""
    m = _KEY_NAME.search(key.lstrip("+~").rsplit(".", 1)[-1])
    return m[1].upper() if m else "NAME"


def check_override(arg: str) -> None:
    """Refuse an override that types a secret's value: its key looks secret
    (``+cluster.env.WANDB_API_KEY=...``, ``+metrics.api_key=...``) or its value holds URL
    credentials (``user:password@``). An interpolation (``${oc.env:NAME}``) is no value and
    passes; so does an empty value.

    Raises:
        ValueError: one line naming the key (never the value) and the fix (:data:`HINT`).
    """
    key, sep, value = arg.partition("=")
    if not sep or not value or value.startswith("${") or redact_args([arg]) == [arg]:
        return
    raise ValueError(f"{key}=... types a secret on the command line, where ps and your "
                     f"shell's history show it; " + HINT.format(name=_variable(key)))


def read_secrets_file(path: str | os.PathLike) -> dict[str, str]:
    """The ``NAME=value`` lines of a secrets file (python-dotenv's format: ``export``,
    quotes and comments allowed).

    Raises:
        ValueError: naming ``cluster.secrets_file``: the file is missing, or others than its
            owner may read or write it (it must be mode 0600 or stricter: ``chmod 600``).
    """
    from dotenv import dotenv_values  # on use: a sweep without secrets never imports it

    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        raise ValueError(f"cluster.secrets_file={str(path)!r} cannot be read ({e.strerror}); "
                         "give a file of NAME=value lines") from None
    if not stat.S_ISREG(mode) or mode & 0o077:
        raise ValueError(f"cluster.secrets_file={str(path)!r} has mode "
                         f"{stat.S_IMODE(mode):04o}: others may read it; chmod 600 it")
    return {k: v for k, v in dotenv_values(path).items() if v is not None}


def secret_values(names: Sequence[str], secrets_file: str | None = None,
                  environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``cluster.secrets``' values: each from ``secrets_file`` where it holds the name, else
    from ``environ`` (the submitting environment, default ``os.environ``).

    Raises:
        ValueError: naming ``cluster.secrets`` and the first name set nowhere (or
            :func:`read_secrets_file`'s refusal).
    """
    environ = os.environ if environ is None else environ
    from_file = read_secrets_file(secrets_file) if secrets_file else {}
    values = {}
    for i, name in enumerate(names):
        value = from_file.get(name, environ.get(name))
        if value is None:
            where = f" nor in cluster.secrets_file={secrets_file!r}" if secrets_file else ""
            shown = _shown_name(name)
            raise ValueError(f"cluster.secrets[{i}]{f' ({shown})' if shown else ''} is not "
                             f"set in this environment{where}; export {shown or 'NAME'}=... "
                             "before the sweep (or name a cluster.secrets_file holding it)"
                             + ("" if shown else "; the entry is not shown: it is not an "
                                "upper-case variable name (a value typed where its name "
                                "belongs?)"))
        values[name] = value
    return values


#: A name shown in a refusal: an environment variable's conventional spelling (POSIX: upper
#: case, digits, underscore). Anything else in cluster.secrets may be a value typed where its
#: name belongs, and a refusal never echoes a value.
_SHOWN_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")


def _shown_name(name: str) -> str | None:
    """``name`` where a refusal may show it (:data:`_SHOWN_NAME`), else None."""
    return name if _SHOWN_NAME.fullmatch(name) else None


def point_secrets(points: Sequence) -> dict[str, str]:
    """The values of every point's ``cluster.secrets`` (:func:`secret_values`); ``points``
    are :class:`vitfsdp.sweep.Point`.

    Raises:
        ValueError: see :func:`secret_values`.
    """
    values: dict[str, str] = {}
    for p in points:
        values.update(secret_values(p.cfg.cluster.secrets, p.cfg.cluster.secrets_file))
    return values


def write_point_secrets(points: Sequence, sweep_dir: str | os.PathLike) -> Path | None:
    """Write the points' secrets (:func:`point_secrets`) into the sweep's file
    (:func:`write_secrets`) before their job scripts are written or submitted; None (and
    nothing written) when no point names a secret."""
    values = point_secrets(points)
    return write_secrets(sweep_dir, values) if values else None


@contextmanager
def hidden_from_slurm(points: Sequence) -> Iterator[None]:
    """Inside the block, this process's environment lacks the variables the points name in
    ``cluster.secrets``: ``sbatch`` (by default ``--export=ALL``, also submitit's) copies the
    submitting environment into the job's, which Slurm stores with the job (and in its
    accounting database where ``AccountingStoreFlags=job_env``). The jobs read the values
    from the sweep's secrets file instead. Restored on leaving."""
    names = {n for p in points for n in p.cfg.cluster.secrets}
    saved = {n: os.environ.pop(n) for n in names if n in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def remove_secrets(sweep_dir: str | os.PathLike) -> Path | None:
    """Delete the sweep's secrets file, once no job of the sweep will read it again (every
    point ended); returns the path removed, None where there was none."""
    path = secrets_path(sweep_dir)
    try:
        path.unlink()
    except FileNotFoundError:
        return None
    return path


def secrets_path(sweep_dir: str | os.PathLike) -> Path:
    """Where a sweep's secrets file lives (its job scripts source it)."""
    return Path(sweep_dir).resolve() / SECRETS_FILE


def source_line(path: str | os.PathLike) -> str:
    """The job-script line that loads the secrets: ``set -a`` around ``source`` exports each
    ``NAME=value`` of the file; the script's text holds the path only."""
    return f"set -a; source {shlex.quote(str(path))}; set +a"


def write_secrets(sweep_dir: str | os.PathLike, values: Mapping[str, str]) -> Path:
    """Write ``values`` as shell-quoted ``NAME=value`` lines to :func:`secrets_path`, mode
    0600 from the first byte (a temporary file of the same folder, renamed over the old one:
    a job that sources it reads the old or the new file, never half of one).

    Returns:
        the file's path.
    """
    path = secrets_path(sweep_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, "".join(f"{name}={shlex.quote(value)}\n"
                                    for name, value in values.items()), 0o600)
    return path
