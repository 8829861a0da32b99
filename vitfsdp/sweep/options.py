"""The launcher's options as Hydra composed them (``hydra.launcher``), read by the sweep
itself: the launcher plugin leaves each untyped
(:data:`hydra_plugins.vitfsdp_launcher.vitfsdp_launcher.CHECKED_BY_THE_SWEEP`), so that a
wrong value from a preset or a config file (``hydra: launcher: detach: maybe``) gets one line
naming the key and the fix here, not OmegaConf's ValidationError while Hydra composes; a
value that is not of its option's kind is refused, never converted (``bool("maybe")`` would
be true)."""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping

from vitfsdp.launch import LaunchOptions, check_stall_floor, pack


def composed_options(launcher: Mapping[str, object]) -> LaunchOptions:
    """:class:`vitfsdp.launch.LaunchOptions` of ``hydra.launcher``'s node as composed (a
    missing option takes its default): a switch is ``true`` or ``false`` (YAML's, Hydra's,
    or that text), ``batch_search_max`` a whole number (or its text), ``job_name`` one
    name, ``pack`` null or one of :data:`vitfsdp.launch.pack.PACK_MODES`, ``stall_floor_s``
    seconds above 0 (:func:`vitfsdp.launch.check_stall_floor`).

    Raises:
        ValueError: one line naming the first wrong option, its value and the fix.
    """
    hints = typing.get_type_hints(LaunchOptions)
    values = {}
    for f in dataclasses.fields(LaunchOptions):
        value = launcher.get(f.name, f.default)
        read = _BY_NAME.get(f.name) or _BY_KIND[hints[f.name]]
        values[f.name] = read(f"hydra.launcher.{f.name}", value, f)
    return LaunchOptions(**values)


def _shown(value: object) -> str:
    """``value`` as an override would give it: ``null``, ``true``/``false``, else its text."""
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _switch(key: str, value: object, f: dataclasses.Field) -> bool:
    """A switch: a bool, or the text ``true``/``false`` (any case); ``yes``, ``1``,
    ``maybe`` are refused, never read as true."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, str) else None
    if text in ("true", "false"):
        return text == "true"
    flag = f" (the short flag: {f.metadata['flag']})" if f.metadata.get("flag") else ""
    raise ValueError(f"{key}={_shown(value)} is not true or false: give {key}=true{flag} or "
                     f"{key}=false (default {_shown(f.default)})")


def _whole(key: str, value: object, f: dataclasses.Field) -> int:
    """A whole number: an int (not a bool), a float without a fraction, or its text."""
    number = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            pass
    if number is None:
        raise ValueError(f"{key}={_shown(value)} is not a whole number: give one, e.g. "
                         f"{key}=256 (default {f.default})")
    return number


def _name(key: str, value: object, f: dataclasses.Field) -> str:
    """One name: text, or a number (taken as its text, as Hydra would)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or not str(value):
        raise ValueError(f"{key}={_shown(value)} is not a name: give one, e.g. "
                         f"{key}={f.default} (the default)")
    return str(value)


def _pack(key: str, value: object, f: dataclasses.Field) -> str | None:
    """``null`` (a job per point) or one of :data:`vitfsdp.launch.pack.PACK_MODES`."""
    if value is None or (isinstance(value, str) and value in pack.PACK_MODES):
        return value
    modes = " or ".join(f"{key}={mode}" for mode in pack.PACK_MODES)
    raise ValueError(f"{key}={_shown(value)} is not a pack mode: give {modes}, or {key}=null "
                     "(a job per point, the default)")


def _seconds(key: str, value: object, f: dataclasses.Field) -> float:
    """Seconds above 0 (:func:`vitfsdp.launch.check_stall_floor`)."""
    return check_stall_floor(value)


#: The reader of each :class:`vitfsdp.launch.LaunchOptions` field: by its name, else its type
_BY_NAME = {"pack": _pack, "stall_floor_s": _seconds}
_BY_KIND = {bool: _switch, int: _whole, str: _name}
