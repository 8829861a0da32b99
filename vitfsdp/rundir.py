"""Names of sweep points' run directories: readable, flat, safe and unique for any value.

Hydra names a point's directory after its overrides (``hydra.job.override_dirname``: the
overrides as typed, joined by ``,``). A value with ``/`` (``cluster.setup_script=/path``,
``cluster.modules=[rocm/6.2.4]``) nests that directory, a secret (``+cluster.env.API_TOKEN=...``)
lands in a path name, and a long list of overrides passes the file system's 255 bytes per
name. ``conf/config.yaml`` therefore names a point's directory

    ${hydra.job.num}_${vitfsdp.run_dirname:${hydra.overrides.task},<excluded keys>}

:func:`run_dirname` keeps the readable ``key=value,...`` form of plain overrides unchanged
(``0_nodes=2,strategy=FULL_SHARD``); when it had to change anything (a character outside
``A-Z a-z 0-9 . _ , = + -``, a secret, more than :data:`MAX_NAME_CHARS` characters) it
replaces each run of other characters by ``_``, redacts secrets, truncates, and appends
``_`` and a hash of the point's full (redacted) override list, so two points never share a
name: ``0_cluster.modules=_rocm_6.2.4_fafb0f04``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from omegaconf import OmegaConf

from vitfsdp.provenance import REDACTED, redact_args

RESOLVER = "vitfsdp.run_dirname"
#: Longest name (without the ``<num>_`` prefix): well inside the file system's 255 bytes per
#: name, and short enough that a run directory's paths (``logs/task<N>.log``) stay far from
#: the lengths slurmctld refuses ("Pathname of a file, directory or other parameter too long").
MAX_NAME_CHARS = 128
HASH_CHARS = 8  # hex digits of SHA-256 appended to a name that was changed
_UNSAFE = re.compile(r"[^A-Za-z0-9._,=+-]+")
_KEY = re.compile(r"^[+~]*([^=@]*)")
REDACTED_WORD = "redacted"  # a secret value's stand-in in a path name


def override_key(override: str) -> str:
    """The config key of an override as typed (``+cluster.env.X=1`` → ``cluster.env.X``;
    ``model@pkg=x`` → ``model``)."""
    return _KEY.match(override)[1]


def run_dirname(overrides: Iterable[str], exclude_keys: Iterable[str] = ()) -> str:
    """The name of a point's run directory after its overrides (sorted, ``exclude_keys``
    left out): ``key=value,...`` as typed when every character is safe and the name is short,
    else sanitized, truncated to :data:`MAX_NAME_CHARS` and ending in a hash of the full
    override list. Secret values (by key) never reach the name."""
    excluded = set(exclude_keys)
    items = sorted(str(o) for o in overrides if override_key(str(o)) not in excluded)
    typed = ",".join(items)
    redacted = redact_args(items)
    name = _UNSAFE.sub("_", ",".join(redacted).replace(REDACTED, REDACTED_WORD))
    if name == typed and len(name) <= MAX_NAME_CHARS:
        return name
    digest = hashlib.sha256("\n".join(redacted).encode()).hexdigest()[:HASH_CHARS]
    return name[:MAX_NAME_CHARS - HASH_CHARS - 1].rstrip("_,") + "_" + digest


def register_resolver() -> None:
    """Register :data:`RESOLVER` with OmegaConf (idempotent); ``conf/config.yaml`` uses it."""
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(
            RESOLVER, lambda overrides, exclude_keys=(): run_dirname(overrides, exclude_keys))
