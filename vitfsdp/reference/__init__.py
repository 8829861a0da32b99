"""Published figures of the studies vitfsdp reproduces, as package data (CSV), read with
:mod:`importlib.resources` (:func:`tables`) by :mod:`vitfsdp.analysis.reference` and the
plan (:func:`vitfsdp.plan.__main__.published_efficiency`).

Each ``*.csv`` here has one row per published figure and these columns:

- ``study``, ``label`` (what a figure's marker says, e.g. ``ORNL, Frontier, 2023``),
  ``source`` (repository at a commit and file, or the page) and ``note``;
- ``metric`` and ``unit``: ``ips`` (images/s, global), ``peak_mem_allocated`` /
  ``peak_mem_reserved`` / ``peak_mem_active`` (per GPU), ``relative_ips`` and
  ``relative_tflops_per_gpu`` (ratios to a baseline); ``value``;
- the setup, in vitfsdp's own names: ``model``, ``strategy``, ``nodes``, ``gpus_per_node``,
  ``local_batch_size``, ``precision``, ``img_size`` (pixels), ``activation_checkpointing``,
  ``data``, ``backward_prefetch``, ``limit_all_gathers``, ``device``. An empty field was not
  stated by the source; ``assumed`` names the fields that were filled in without the source
  stating them (the ``note`` says why);
- optional ``recipe_step`` (the step preset of ours a recipe's relative figure belongs to,
  e.g. ``pycls_recipe_3_foreach_adamw``; empty where no step of ours expresses it) and
  ``recipe_differs`` (what the published step has that ours has not).

Files: ``ornl_frontier_2023.csv`` (ORNL ViT-FSDP on Frontier: images/s of 6 models x
strategies x 1-128 nodes, the ViT-5B prefetch ablation and the memory charts; transcribed
from ``ViT-FSDP/src/performance_plots/*.py`` of jqyin/AmSC-At-Scale-Services-OLCF at commit
4dc7ed1) and ``pycls_vit_2022.csv`` (Meta PyCls ViT recipe, relative throughputs as issue 39
quotes them). docs/reproduce.md describes both.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


def tables() -> list[tuple[str, pd.DataFrame]]:
    """(file name, its rows) of every ``*.csv`` of this package, by name, every field a
    string ('' = not stated); ``[]`` where the package data is not installed (a wheel built
    without it)."""
    import pandas as pd  # on use: the plan's --help starts without pandas

    try:
        files = sorted((f for f in resources.files(__name__).iterdir()
                        if f.name.endswith(".csv")), key=lambda f: f.name)
    except (ModuleNotFoundError, FileNotFoundError):
        return []
    out = []
    for f in files:
        with f.open("r", encoding="utf-8") as stream:
            out.append((f.name, pd.read_csv(stream, dtype=str, keep_default_na=False)))
    return out


def as_setting(value) -> str:
    """A setting as the published CSVs write it: '' for missing, ``true``/``false`` for
    booleans, integers without a decimal point, anything else as text (the analysis and the
    plan match their points to published rows by it)."""
    import pandas as pd  # on use: the plan's --help starts without pandas

    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return ""
    if pd.api.types.is_bool(value):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
