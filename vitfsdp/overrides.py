"""A sweep's command-line overrides expanded into its points, as Hydra's basic sweeper does,
with ``repeat`` the slowest axis wherever it is written (:func:`split_in_rounds`).

    expand(["model=vit_base,vit_huge", "nodes=range(1,3)"])
    == [["model=vit_base", "nodes=1"], ["model=vit_base", "nodes=2"],
        ["model=vit_huge", "nodes=1"], ["model=vit_huge", "nodes=2"]]
    expand(["nodes=1,2", "repeat=0,1"])
    == [["repeat=0", "nodes=1"], ["repeat=0", "nodes=2"],
        ["repeat=1", "nodes=1"], ["repeat=1", "nodes=2"]]

``python -m vitfsdp.sweep`` validates the points of this expansion before Hydra's sweeper
runs them, and ``python -m vitfsdp.plan`` predicts them, so a plan table lists the points a
sweep of the same overrides runs, in the same order. Hydra's own code parses and splits them:
its override parser (:class:`hydra.core.override_parser.overrides_parser.OverridesParser`)
and its basic sweeper's ``BasicSweeper.split_arguments`` (the one Hydra has no public path
to), so the points are the sweeper's by construction; only the refusals are said here, in
one line each.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper  # no public path
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ValueType
from hydra.errors import HydraException, OverrideParseException

if TYPE_CHECKING:
    from hydra.core.config_loader import ConfigLoader


def expand(overrides: Sequence[str],
           config_loader: ConfigLoader | None = None) -> list[list[str]]:
    """The points of a sweep: one list of ``key=value`` overrides per point.

    Each override is an axis: a sweep (``key=a,b``, ``key=choice(a,b)``,
    ``key=range(1,4)``, ``group=glob(vit_*)``) gives one value per point, any other override
    (``key=v``, ``+key=v``, ``++key=v``, ``~key``) the same value to every point. The points
    are the cartesian product of the axes, ``repeat`` varying slowest, then the first axis
    (:func:`split_in_rounds`); a key given twice
    keeps its first place and its last value. A value is written as Hydra's sweeper writes
    it (``~key`` becomes ``~key=null``, a quoted value keeps its quotes).

    Args:
        overrides: the command line's overrides, in order.
        config_loader: Hydra's config loader (``hydra_context.config_loader``, or
            ``GlobalHydra.instance().config_loader()`` inside ``initialize_config_dir``),
            which lists a config group's options for ``glob(...)``; None: a glob is refused.

    Returns:
        the points' overrides; ``[[]]`` for no overrides (one point, the defaults).

    Raises:
        ValueError: one line: an override does not parse, sweeps a continuous
            ``interval(...)`` (only a sweeper that samples can), or is a glob without
            ``config_loader``.
    """
    try:
        parsed = OverridesParser.create(config_loader=config_loader).parse_overrides(
            list(overrides))
    except OverrideParseException as e:
        raise ValueError(str(e).splitlines()[0]) from None
    for override in parsed:  # said here in one line; Hydra's sweeper would name the type
        if override.is_sweep_override() and not override.is_discrete_sweep():
            raise ValueError(f"{override.input_line}: an interval has no list of points to "
                             "run; give the values (key=a,b) or range(start,stop,step)")
    try:
        (points,) = split_in_rounds(parsed, None)  # one batch: all points
    except HydraException as e:  # a glob without the config loader, which lists the options
        globs = [o.input_line for o in parsed if o.value_type == ValueType.GLOB_CHOICE_SWEEP]
        raise ValueError(f"{' '.join(globs)}: {e}") from None
    return points


#: The key whose values label repeated runs of one point (``repeat=0,1,2``).
REPEAT_KEY = "repeat"


def split_in_rounds(overrides: list, max_batch_size: int | None) -> list[list[list[str]]]:
    """Hydra's ``BasicSweeper.split_arguments`` with ``repeat`` moved to the slowest axis:
    the sweep runs in rounds, every point once, then every point again, so that a drift of
    the machine over the sweep's hours (another tenant, a warming node) spreads over the
    points' repeats instead of landing on one point's back-to-back runs (a point's repeats
    then measure the noise between runs of the sweep, not of one minute).

    Args:
        overrides: the parsed overrides (Hydra's ``Override``), in the command line's order.
        max_batch_size: Hydra's sweeper's batch size; None: one batch.

    Returns:
        Batches of points, each point its ``key=value`` overrides (the sweeper's form).
    """
    # a stable sort: repeat overrides first, the others in the command line's order
    ordered = sorted(overrides, key=lambda o: not (o.key_or_group == REPEAT_KEY
                                                   and o.package is None))
    return BasicSweeper.split_arguments(ordered, max_batch_size)


def typed_override(arg: str) -> str:
    """A point's override as the user typed it: Hydra's sweeper writes each with a
    backslash before ``\\()[]{}:=,``, space and tab in its value (``cluster.time=03\\:00\\:00``
    for ``cluster.time=03:00:00``); they are left out where Hydra reads the same value
    without them, kept where it would not (``x=a\\,b`` is one value, ``x=a,b`` a sweep) and
    where the value holds a space (a message's overrides are split at spaces)."""
    key, sep, value = arg.partition("=")
    plain = _HYDRA_ESCAPED.sub(r"\1", value)
    if not sep or plain == value or any(c.isspace() for c in plain):
        return arg
    try:
        escaped, typed = OverridesParser.create().parse_overrides([arg, f"{key}={plain}"])
    except OverrideParseException:
        return arg
    same = (not typed.is_sweep_override() and typed.value() == escaped.value())
    return f"{key}={plain}" if same else arg


#: A character Hydra's sweeper escapes in a value (hydra._internal.grammar.utils's ``_ESC``).
_HYDRA_ESCAPED = re.compile(r"\\([\\()\[\]{}:=, \t])")
