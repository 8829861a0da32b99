"""Names of sweep points' run directories: readable, flat, safe and unique for any value.

Hydra names a point's directory after its overrides (``hydra.job.override_dirname``: the
overrides as typed, joined by ``,``). A value with ``/`` (``cluster.setup_script=/path``,
``cluster.modules=[rocm/6.2.4]``) nests that directory, a secret (``+cluster.env.API_TOKEN=...``)
lands in a path name, and a long list of overrides passes the file system's 255 bytes per
name. ``conf/config.yaml`` therefore names a point's directory

    ${hydra.job.num}_${vitfsdp.run_dirname:${hydra.overrides.task},<excluded keys>}

and the sweep (:func:`vitfsdp.sweep.plan`) adds to the excluded keys every key that has the
same value at every point (:func:`constant_keys`): a point's name holds only what tells it
from the other points of its sweep, the swept keys, each whole
(``cluster=frontier cluster.conda_env=/path/to/my_env strategy=FULL_SHARD,HYBRID_8GPU
nodes=1,2`` names its points ``0_nodes=1,strategy=FULL_SHARD`` ...); a single point keeps
all its overrides, as many as fit (:func:`_fit`: the study's keys last to go). The constant
keys are in the point's ``run.json`` and the sweep's ``multirun.yaml``.

:func:`run_dirname` keeps the readable ``key=value,...`` form of plain overrides unchanged
(``0_nodes=2,strategy=FULL_SHARD``); when it had to change anything (a character outside
``A-Z a-z 0-9 . _ , = + -``, a secret, more than :data:`MAX_NAME_CHARS` characters) it
replaces each run of other characters by ``_``, redacts secrets, shortens the longest values
(never a key) and then leaves out whole overrides other than the study's (:func:`_fit`) until
the name fits, and appends ``_`` and a hash of the (redacted) overrides
it names, so two points never share a name: ``0_cluster.modules=_rocm_6.2.4_fafb0f04``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence

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
    safe = [_UNSAFE.sub("_", o.replace(REDACTED, REDACTED_WORD)) for o in redacted]
    name = ",".join(safe)
    if name == typed and len(name) <= MAX_NAME_CHARS:
        return name
    digest = hashlib.sha256("\n".join(redacted).encode()).hexdigest()[:HASH_CHARS]
    return _fit(safe, MAX_NAME_CHARS - HASH_CHARS - 1).rstrip("_,") + "_" + digest


#: A value is shortened to no fewer characters than this (``HYBRID_16GPU`` whole) before
#: whole overrides are left out of a name (:func:`_fit`).
MIN_VALUE_CHARS = 12
#: The keys that name a point of a study; the last a name leaves out (:func:`_fit`).
STUDY_KEYS = ("model", "strategy", "nodes", "framework", "precision", "engine", "repeat",
              "cluster", "experiment")


def _fit(items: list[str], max_chars: int) -> str:
    """``items`` joined by ``,`` in at most ``max_chars`` characters: the longest value
    shortened first, one character at a time, to :data:`MIN_VALUE_CHARS`, keys kept whole;
    then whole items left out, the longest first, except those of :data:`STUDY_KEYS`
    (a single point of ten overrides keeps ``model=vit_5b,nodes=16,strategy=FULL_SHARD``
    whole rather than ten keys with their values cut away); then the values of what is left
    shortened further. The name's hash stands for every item (:func:`run_dirname`)."""
    keys = [item.partition("=")[0] for item in items]
    values = [item.partition("=")[2] for item in items]
    signs = ["=" if "=" in item else "" for item in items]
    kept = list(range(len(items)))

    def joined() -> str:
        return ",".join(keys[i] + signs[i] + values[i] for i in kept)

    def shorten(floor: int) -> None:
        while len(joined()) > max_chars:
            long = [i for i in kept if len(values[i]) > floor]
            if not long:
                return
            longest = max(long, key=lambda i: len(values[i]))
            values[longest] = values[longest][:-1]

    shorten(MIN_VALUE_CHARS)
    others = sorted((i for i in kept if keys[i].lstrip("+~") not in STUDY_KEYS),
                    key=lambda i: -len(keys[i] + values[i]))
    for i in others:
        if len(joined()) <= max_chars:
            break
        kept.remove(i)
    shorten(0)
    return joined()[:max_chars]


def constant_keys(points: Sequence[Sequence[str]]) -> list[str]:
    """The keys that every point of a sweep sets to the same value (sorted): left out of
    the points' run directory names. Empty for fewer than two points (a single point keeps
    all its overrides in its name)."""
    if len(points) < 2:
        return []
    values: dict[str, set[str]] = {}
    for overrides in points:
        for o in overrides:
            values.setdefault(override_key(str(o)), set()).add(str(o))
    return sorted(k for k, v in values.items()
                  if len(v) == 1 and all(any(override_key(str(o)) == k for o in p)
                                         for p in points))


def register_resolver() -> None:
    """Register :data:`RESOLVER` with OmegaConf (idempotent); ``conf/config.yaml`` uses it."""
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(
            RESOLVER, lambda overrides, exclude_keys=(): run_dirname(overrides, exclude_keys))
