"""A sweep's command-line overrides expanded into its points, as Hydra's basic sweeper does.

    expand(["model=vit_base,vit_huge", "nodes=range(1,3)"])
    == [["model=vit_base", "nodes=1"], ["model=vit_base", "nodes=2"],
        ["model=vit_huge", "nodes=1"], ["model=vit_huge", "nodes=2"]]

``python -m vitfsdp.sweep`` validates the points of this expansion before Hydra's sweeper
runs them, and ``python -m vitfsdp.plan`` predicts them, so a plan table lists the points a
sweep of the same overrides runs, in the same order. Built on Hydra's public override parser
(:class:`hydra.core.override_parser.overrides_parser.OverridesParser`); the result equals
``BasicSweeper.split_arguments`` (tests/test_overrides.py compares the two).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, OverrideParseException

if TYPE_CHECKING:
    from hydra.core.config_loader import ConfigLoader


def expand(overrides: Sequence[str],
           config_loader: ConfigLoader | None = None) -> list[list[str]]:
    """The points of a sweep: one list of ``key=value`` overrides per point.

    Each override is an axis: a sweep (``key=a,b``, ``key=choice(a,b)``,
    ``key=range(1,4)``, ``group=glob(vit_*)``) gives one value per point, any other override
    (``key=v``, ``+key=v``, ``++key=v``, ``~key``) the same value to every point. The points
    are the cartesian product of the axes, the first axis varying slowest; a key given twice
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
    axes: dict[str, list[str]] = {}
    for override in parsed:
        key = override.get_key_element()
        if not override.is_sweep_override():
            axes[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif not override.is_discrete_sweep():
            raise ValueError(f"{override.input_line}: an interval has no list of points to "
                             "run; give the values (key=a,b) or range(start,stop,step)")
        else:
            try:
                axes[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
            except HydraException as e:  # a glob without the config loader
                raise ValueError(f"{override.input_line}: {e}") from None
    return [list(point) for point in itertools.product(*axes.values())]
