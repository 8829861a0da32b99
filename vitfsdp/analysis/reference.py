"""Published figures beside a sweep's: which sweep points match a published setup, and by how
much they differ (``reference.csv``).

The published rows are package data (``vitfsdp/reference/*.csv``, described in
:mod:`vitfsdp.reference` and docs/reproduce.md): ORNL's ViT-FSDP study on Frontier and the
PyCls ViT recipe. The matching rule, per sweep point (a line of the weak-scaling figure at a
node count, repeats aggregated: median images/s, maximum memory):

- a published row is a *candidate* when it has the point's model, strategy and node count;
- it is *compared* only when every setting of :data:`REQUIRED` is stated by the row and
  equal to the point's (model, strategy, nodes, local batch, precision, image size), and
  every setting of :data:`WHERE_STATED` that the row states is equal too (activation
  checkpointing, data, backward prefetch, limit_all_gathers);
- otherwise the row is listed as not compared, and ``differs`` names each setting that
  differs, ours first: ``local_batch_size: 8 here, 32 published``;
- the hardware (:data:`HARDWARE`: GPUs per node, the device) does not decide whether a row
  is compared, but where ours differs (a CPU run of ORNL's setup, or 4 GPUs a node against
  8) ``differs`` names it on the compared row too, and the row's ``label`` (the figure's
  legend) names the published hardware: ``ORNL, Frontier, 2023 (8 x AMD MI250X GCD a
  node)``;
- but where one side ran on a single device and the other on several (world size 1 here,
  nodes x ``gpus_per_node`` = 8 published) the row is not compared: at world size 1 no
  collective runs (FSDP1 runs FULL_SHARD as NO_SHARD, DDP all-reduces nothing), so the two
  did not do the same work a device, and ``differs`` says so (:func:`world_size_difference`:
  ``world_size: 1 here (one device: no collectives), 8 published``). The printed summary
  names such rows apart (:func:`reference_summary`).

A compared row gets ``ratio_per_device``: measured / published per device (GPU, GCD or CPU
rank). ``measured`` and ``published`` images/s are global, so each is divided by its side's
devices (nodes x :data:`HARDWARE`'s ``gpus_per_node``; the nodes are equal) before the
ratio: four H100s a node at 1,324 images/s against a node of 8 MI250X GCDs at 1,205 is 2.2,
not 1.1. Where either side's devices a node are not known the ratio is left empty and
``differs`` says why. Two world sizes above 1 (4 GPUs a node against 8 GCDs) are compared
per device though ``weak_scaling.png`` leaves their star out: the figure's axis is global
images/s, which would compare a node of 8 with ours; per device both sides shard and
communicate. Memory is per device on both sides already. Published memory is in GB as the
source labels it (neither 1e9 nor 2^30 bytes stated), ours in GiB: the ratio is of the two
numbers as they are.

Two kinds of published figure are drawn beside ours without being compared (no ratio;
``differs`` says why, ``drawn`` names the figure):

- GPU allocated memory beside a CPU point of the same setup: ours is the peak resident
  memory of a rank's process (``measured``, in its own unit), not the same measure;
- a recipe's relative figures (:mod:`vitfsdp.analysis.recipe`; PyCls's "x the DDP
  baseline's images/s"): a published row whose ``recipe_step`` names a step preset
  (``pycls_recipe_3_foreach_adamw``) belongs to that step of any sweep of the recipe or of
  a sizing of it (``pycls_recipe_cpu_3_foreach_adamw``: the recipe name followed by
  ``_<sizing>``, the step's number and name equal), one row per node count, ``measured``
  our step's images/s relative to our step 0. Its REQUIRED settings are checked as above
  (PyCls states no node count, strategy or local batch, so none is ever compared) and
  ``recipe_differs`` adds what the published step has that ours has not. The study's rows
  without a step of ours get one row per recipe saying so.
"""

from __future__ import annotations

import functools
import logging
import re

import pandas as pd

from vitfsdp import reference as published_data
from vitfsdp.analysis.lines import configurations, line_columns
from vitfsdp.analysis.recipe import STEP_NAME, recipe_table
from vitfsdp.reference import as_setting

log = logging.getLogger(__name__)

#: The package whose ``*.csv`` files hold the published figures.
REFERENCE_PACKAGE = "vitfsdp.reference"
#: Each setup column of the published rows and the collect_runs column that holds ours.
SETUP_COLUMNS = {
    "model": "model", "strategy": "strategy", "nodes": "nodes",
    "gpus_per_node": "ranks_per_node", "local_batch_size": "local_batch_size",
    "precision": "precision", "img_size": "img_size",
    "activation_checkpointing": "train.activation_checkpointing", "data": "data",
    "backward_prefetch": "backward_prefetch", "limit_all_gathers": "limit_all_gathers",
    "device": "device_name",
}  # fmt: skip
#: Settings a published row must state and a point must equal to be compared.
REQUIRED = ("model", "strategy", "nodes", "local_batch_size", "precision", "img_size")
#: Settings a point must equal where the published row states them (empty: not stated).
WHERE_STATED = ("activation_checkpointing", "data", "backward_prefetch", "limit_all_gathers")
#: The hardware: named in ``differs`` where ours differs, the row compared all the same.
HARDWARE = ("gpus_per_node", "device")
#: The key of ``differs``'s item on a world size of 1 on one side only
#: (:func:`world_size_difference`): it decides that a row is not compared.
WORLD_SIZE = "world_size"
#: What a world size of 1 means for the work a device does.
ONE_DEVICE = "one device: no collectives"
#: Vendor and unit words left out when device names are compared: ``AMD MI250X GCD``
#: (published) is the ``AMD Instinct MI250X`` torch names; ``NVIDIA A100`` an
#: ``NVIDIA A100-SXM4-80GB``.
DEVICE_WORDS = frozenset({"amd", "nvidia", "intel", "instinct", "gcd", "gpu", "tesla"})
#: Published metric -> the points' column measuring it (other metrics: not measured here).
MEASURED = {"ips": "ips", "peak_mem_allocated": "peak_mem_gib",
            "peak_mem_reserved": "peak_mem_reserved_gib"}
#: A point's peak resident memory (CPU), measured beside a published GPU allocated figure.
RESIDENT = "resident_gib"
#: Our unit per measured column, for the ``unit`` column of reference.csv.
OUR_UNITS = {"ips": "images/s (global)", "peak_mem_gib": "GiB per GPU",
             "peak_mem_reserved_gib": "GiB per GPU",
             RESIDENT: "GiB per rank (peak resident, CPU)",
             "relative_ips": "x step 0's images/s (same node count)"}
#: The prefix of a published metric that is a ratio to a recipe's baseline (PyCls's).
RELATIVE = "relative_"
#: Published recipe metrics -> the recipe.csv column measuring it (others: not measured).
RECIPE_MEASURED = {"relative_ips": "relative_ips"}
#: The figure that draws a row's published figure beside ours (reference.csv's ``drawn``).
DRAWN_IN = {"ips": "weak_scaling.png", "peak_mem_allocated": "memory.png",
            "relative_ips": "recipe.png"}
#: Columns of :func:`reference_table`, in order.
REFERENCE_COLUMNS = (
    "model", "configuration", "nodes", "metric", "measured", "published", "ratio_per_device",
    "unit",
    "compared", "differs", "drawn", "published_setup", "assumed", "study", "label", "source",
)  # fmt: skip
#: Columns of the published rows (every file of :data:`REFERENCE_PACKAGE`).
PUBLISHED_COLUMNS = (
    "study", "label", "metric", "unit", *SETUP_COLUMNS, "value", "assumed", "source", "note",
)  # fmt: skip
#: Columns a file may leave out ('' in its rows): ``recipe_step``, the step preset of ours a
#: recipe's relative figure belongs to (``pycls_recipe_3_foreach_adamw``; '' for a figure of
#: the recipe no step of ours expresses), and ``recipe_differs``, what the published step
#: has that ours has not.
OPTIONAL_COLUMNS = ("recipe_step", "recipe_differs")
#: Why a CPU point's memory is not compared with a published GPU allocated figure.
OTHER_MEASURE = ("peak resident memory of a rank's process here (CPU: no device allocator; "
                 "the interpreter, libraries and buffers counted too), GPU allocated memory "
                 "published")


@functools.cache
def published() -> pd.DataFrame:
    """Every published row of :data:`REFERENCE_PACKAGE`, as strings ('' = not stated) but
    ``value`` (float).

    Returns:
        The rows of all ``*.csv`` files with :data:`PUBLISHED_COLUMNS` and
        :data:`OPTIONAL_COLUMNS`; no rows (and one
        warning) where the package data is not installed (a wheel built without it).

    Raises:
        ValueError: a file lacks one of :data:`PUBLISHED_COLUMNS` (names the file).
    """
    files = published_data.tables()
    if not files:
        log.warning("no published reference data (%s/*.csv not installed): reference.csv "
                    "has no rows", REFERENCE_PACKAGE.replace(".", "/"))
        return pd.DataFrame(columns=[*PUBLISHED_COLUMNS, *OPTIONAL_COLUMNS])
    frames = []
    for name, table in files:
        missing = [c for c in PUBLISHED_COLUMNS if c not in table]
        if missing:
            raise ValueError(f"{REFERENCE_PACKAGE} {name}: missing columns {missing}")
        for column in OPTIONAL_COLUMNS:
            table[column] = table[column] if column in table else ""
        frames.append(table[[*PUBLISHED_COLUMNS, *OPTIONAL_COLUMNS]])
    rows = pd.concat(frames, ignore_index=True)
    return rows.assign(value=pd.to_numeric(rows["value"], errors="coerce"))


def sweep_points(df: pd.DataFrame) -> pd.DataFrame:
    """The completed points of a ``collect_runs`` frame: one row per line
    (:func:`~vitfsdp.analysis.lines.line_columns`) and node count, with ``configuration``
    (the line's label), the setup columns (:data:`SETUP_COLUMNS`), ``ips`` (median over
    repeats, images/s), ``peak_mem_gib`` (maximum, GiB; only where it is GPU allocated
    memory), ``resident_gib`` (maximum, GiB; only where it is CPU resident memory) and
    ``peak_mem_reserved_gib`` (maximum, GiB)."""
    done = df[(df["status"] == "completed") & df["nodes"].notna()]
    ours = list(dict.fromkeys([*SETUP_COLUMNS.values(), "device_type", "world_size"]))
    measured = ["ips", "peak_mem_gib", "peak_mem_reserved_gib", RESIDENT]
    if done.empty:
        return pd.DataFrame(columns=["configuration", *ours, *measured])
    kind = done["peak_mem_kind"]
    done = done.assign(configuration=configurations(df).loc[done.index],
                       peak_mem_gib=done["peak_mem_gib"].where(kind == "allocated"),
                       **{RESIDENT: done["peak_mem_gib"].where(kind == "rss")})
    keys = [*line_columns(df), "nodes"]
    aggs = {c: (c, "first") for c in ["configuration", *ours] if c not in keys}
    aggs |= {"ips": ("ips", "median"), "peak_mem_gib": ("peak_mem_gib", "max"),
             "peak_mem_reserved_gib": ("peak_mem_reserved_gib", "max"),
             RESIDENT: (RESIDENT, "max")}
    return done.groupby(keys, dropna=False, sort=False).agg(**aggs).reset_index()


def reference_table(df: pd.DataFrame, refs: pd.DataFrame | None = None) -> pd.DataFrame:
    """``reference.csv``: each completed sweep point against the published rows (see the
    module docstring for the matching rule).

    Args:
        df: a ``collect_runs`` frame.
        refs: the published rows (default :func:`published`).

    Returns:
        :data:`REFERENCE_COLUMNS`, one row per candidate published row of each point, and
        one row for a point without a candidate saying why (``compared`` False); then the
        rows of the recipe ablations (:func:`recipe_reference`). ``measured`` and
        ``published`` are in ``unit`` (ours, then the published one where they differ),
        ``ratio_per_device`` = measured / published per device where compared
        (:func:`per_device_ratio`), else NaN. ``differs`` names each
        differing setting (``key: ours here, theirs published``) or why nothing was
        measured; ``drawn`` names the figure that draws the published figure beside ours
        ('' none); ``published_setup`` sums up the row's setup; ``assumed`` names the setup
        fields the source did not state.
    """
    refs = published() if refs is None else refs
    by_point: dict[tuple[str, str, str], list[dict]] = {}  # one lookup a point
    for ref in refs.to_dict("records"):
        if not ref["metric"].startswith(RELATIVE):
            by_point.setdefault((ref["model"], ref["strategy"], ref["nodes"]), []).append(ref)
    models = ", ".join(sorted({model for model, _, _ in by_point})) or "none installed"
    rows = []
    for _, point in sweep_points(df).iterrows():
        rows += _point_rows(point, by_point, models)
    rows += recipe_reference(df, refs)[list(REFERENCE_COLUMNS)].to_dict("records")
    return pd.DataFrame(rows, columns=list(REFERENCE_COLUMNS))


def _point_rows(point: pd.Series, by_point: dict[tuple[str, str, str], list[dict]],
                models: str) -> list[dict]:  # fmt: skip
    """The reference.csv rows of one point: one per candidate (``by_point``: the published
    rows by model, strategy and nodes), or one saying why none (``models``: the published
    models, named)."""
    base = {"model": point["model"], "configuration": point["configuration"],
            "nodes": point["nodes"], "compared": False, "drawn": ""}
    model, strategy, nodes = (as_setting(point[c]) for c in ("model", "strategy", "nodes"))
    if not any(key[0] == model for key in by_point):
        return [{**base, "differs": f"model: {model or 'unknown'} here, in no published row "
                 f"(published models: {models})"}]
    candidates = by_point.get((model, strategy, nodes))
    if not candidates:
        return [{**base, "differs": f"strategy, nodes: no published row of {model} under "
                 f"{strategy} at {nodes} node(s)"}]
    return [_compare(point, ref, base) for ref in candidates]


def _compare(point: pd.Series, ref: dict | pd.Series, base: dict) -> dict:
    """One reference.csv row: the point against one published row (a row of
    :func:`published`, as a dict or a Series)."""
    differs = setting_differences(point, ref)
    differs += [w for w in [world_size_difference(point, ref)] if w]
    same_setup = not differs
    hardware = hardware_differences(point, ref)
    column = MEASURED.get(ref["metric"])
    measured = point.get(column) if column else None
    if column == "peak_mem_gib" and pd.isna(measured) and pd.notna(point.get(RESIDENT)):
        column, measured = RESIDENT, point.get(RESIDENT)  # a CPU point: another measure
        differs.append(f"{ref['metric']}: {OTHER_MEASURE}")
    elif column is None:
        differs.append(f"{ref['metric']}: not measured here")
    elif pd.isna(measured):
        differs.append(f"{ref['metric']}: no measurement here ({_why_none(column)})")
    compared = not differs
    ratio, unknown = (per_device_ratio(point, ref, float(measured)) if compared
                      else (None, ""))
    beside = compared or (same_setup and column == RESIDENT)  # drawn either way
    ours = OUR_UNITS.get(column)
    unit = (ref["unit"] if ours == ref["unit"] else f"{ours} here; {ref['unit']} published"
            if ours else f"{ref['unit']} published")
    return {**base, "metric": ref["metric"],
            "measured": None if measured is None or pd.isna(measured) else float(measured),
            "published": ref["value"], "unit": unit,
            "ratio_per_device": ratio, "compared": compared,
            "differs": "; ".join(p for p in [*differs, *hardware, unknown] if p),
            "drawn": DRAWN_IN.get(ref["metric"], "") if beside else "",
            "published_setup": published_setup(ref), "assumed": ref["assumed"],
            "study": ref["study"], "label": _label(ref, hardware), "source": ref["source"]}


def world_size_difference(point: pd.Series, ref: dict | pd.Series) -> str:
    """``differs``'s item where one side ran on one device and the other on several, e.g.
    ``world_size: 1 here (one device: no collectives), 8 published``: at world size 1 FSDP1
    runs FULL_SHARD as NO_SHARD and DDP all-reduces nothing, so images/s (and memory) a
    device are not of the same work as a sharded, communicating device's.

    Args:
        point: a row of :func:`sweep_points` (``world_size``; where not recorded, ``nodes``
            x ``ranks_per_node``).
        ref: the published row (its ``nodes`` x ``gpus_per_node``).

    Returns:
        The item (key :data:`WORLD_SIZE`), or ``""`` where both sides are 1, both above 1,
        or either is not known.
    """
    ours = _count(point.get("world_size")) or (
        _count(point.get("nodes")) * _count(point.get(SETUP_COLUMNS["gpus_per_node"])))
    theirs = _count(ref["nodes"]) * _count(ref["gpus_per_node"])
    if not (ours and theirs) or (ours == 1) == (theirs == 1):
        return ""
    return (f"{WORLD_SIZE}: {ours} here{f' ({ONE_DEVICE})' if ours == 1 else ''}, {theirs} "
            f"published{f' ({ONE_DEVICE})' if theirs == 1 else ''}")


def _count(value) -> int:
    """A count of nodes, devices or ranks as an int; 0 where missing or not a count."""
    try:
        number = float(as_setting(value))
    except ValueError:
        return 0
    return int(number) if number.is_integer() and number > 0 else 0


def per_device_ratio(point: pd.Series, ref: dict | pd.Series,
                     measured: float) -> tuple[float | None, str]:  # fmt: skip
    """A compared row's ``ratio_per_device``: ``measured`` over the published value, each
    per device (GPU, GCD or CPU rank).

    Args:
        point: a row of :func:`sweep_points` (its ``ranks_per_node``).
        ref: the published row (its ``metric``, ``value`` and ``gpus_per_node``).
        measured: ours, in the published metric's measure (images/s global, memory per GPU).

    Returns:
        ``(ratio, "")``; for images/s, each side divided by its devices a node first (the
        nodes are equal), so 1,324 images/s on 4 GPUs against 1,205 on 8 GCDs is 2.2. ``(None,
        why)`` where the published value is 0 or missing, or a side's devices a node are not
        known (``why`` names them, for ``differs``).
    """
    if not ref["value"] or pd.isna(ref["value"]):
        return None, ""
    if ref["metric"] != "ips":  # memory: per device on both sides
        return measured / ref["value"], ""
    ours, theirs = as_setting(point.get(SETUP_COLUMNS["gpus_per_node"])), ref["gpus_per_node"]
    try:
        ours_n, theirs_n = float(ours), float(theirs)
    except ValueError:
        ours_n = theirs_n = 0.0
    if not (ours_n > 0 and theirs_n > 0):
        return None, (f"ratio_per_device: devices a node not known ({ours or 'not recorded'} "
                      f"here, {theirs or 'not stated'} published)")
    return (measured / ours_n) / (ref["value"] / theirs_n), ""


def recipe_reference(df: pd.DataFrame, refs: pd.DataFrame | None = None) -> pd.DataFrame:
    """reference.csv's rows of the recipe ablations in ``df`` (the module docstring says
    which published rows belong to which step): never compared, ``drawn`` ``recipe.png``
    where our recipe has the step.

    Args:
        df: a ``collect_runs`` frame.
        refs: the published rows (default :func:`published`).

    Returns:
        :data:`REFERENCE_COLUMNS` and ``recipe`` and ``step`` (ours; NaN where no step of
        ours has the figure): per recipe, one row per published relative figure of its study
        and node count of the step it belongs to, or one row saying why there is none.
    """
    refs = published() if refs is None else refs
    columns = [*REFERENCE_COLUMNS, "recipe", "step"]
    table = recipe_table(df)
    figures = refs[refs["metric"].str.startswith(RELATIVE)] if len(refs) else refs
    if table.empty or figures.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for recipe, ours in table.groupby("recipe", sort=True):
        for ref in _recipe_figures(str(recipe), figures).to_dict("records"):
            rows += _recipe_rows(df, ours, ref)
    return pd.DataFrame(rows, columns=columns)


def _recipe_figures(recipe: str, figures: pd.DataFrame) -> pd.DataFrame:
    """The published relative figures of ``recipe``: every one of a study whose rows name a
    step of ``recipe`` (``recipe_step``), or of the recipe ``recipe`` sizes (its name
    followed by ``_<sizing>``: ``pycls_recipe_cpu`` sizes ``pycls_recipe``)."""
    steps = [STEP_NAME.match(s) for s in figures["recipe_step"]]
    theirs = pd.Series([m["recipe"] if m else "" for m in steps], index=figures.index)
    mine = theirs.map(lambda r: bool(r) and (recipe == r or recipe.startswith(f"{r}_")))
    return figures[figures["study"].isin(figures.loc[mine, "study"])]


def _recipe_rows(df: pd.DataFrame, ours: pd.DataFrame, ref: dict) -> list[dict]:
    """The reference.csv rows of one published relative figure ``ref`` and our recipe
    (``ours``: its rows of :func:`~vitfsdp.analysis.recipe.recipe_table`): one per node
    count of the step it belongs to, or one saying why none."""
    recipe = ours["recipe"].iloc[0]
    theirs = STEP_NAME.match(ref["recipe_step"]) if ref["recipe_step"] else None
    model = ours["model"].dropna()
    base = {"model": model.iloc[0] if len(model) else None, "configuration": recipe,
            "metric": ref["metric"], "published": ref["value"], "compared": False,
            "unit": f"{ref['unit']} published", "drawn": "",
            "published_setup": published_setup(ref), "assumed": ref["assumed"],
            "study": ref["study"], "label": recipe_label(ref), "source": ref["source"],
            "recipe": recipe}
    if theirs is None:
        return [{**base, "differs": f"recipe step: {ref['recipe_differs'] or 'none of ours'}"}]
    step = ours[(ours["step"] == int(theirs["step"])) & (ours["what"] == theirs["what"])]
    if step.empty:
        return [{**base, "differs": f"recipe step: no step {theirs['step']} "
                 f"({theirs['what']}) of {recipe} in these runs"}]
    return [_recipe_row(df, at, ref, base) for _, at in step.iterrows()]


def _recipe_row(df: pd.DataFrame, at: pd.Series, ref: dict, base: dict) -> dict:
    """The row of one published relative figure ``ref`` and our step ``at`` (a row of
    :func:`~vitfsdp.analysis.recipe.recipe_table`: one node count): its setup is that of
    the step's runs there (a completed one where any did)."""
    runs = df[(df["experiment"] == at["experiment"]) & (df["nodes"] == at["nodes"])]
    point = runs.sort_values("status", key=lambda s: s != "completed", kind="stable").iloc[0]
    column = RECIPE_MEASURED.get(ref["metric"])
    measured = at[column] if column else None
    differs = setting_differences(point, ref)
    if ref["recipe_differs"]:
        differs.append(f"recipe: {ref['recipe_differs']}")
    if column is None:
        differs.append(f"{ref['metric']}: not measured here")
    elif pd.isna(measured):
        differs.append(f"{ref['metric']}: no measurement here (the step or step 0 did not "
                       "complete at this node count)")
    unit = OUR_UNITS.get(column or "")
    return {**base, "configuration": at["experiment"], "nodes": at["nodes"],
            "model": at["model"], "step": at["step"],
            "measured": None if measured is None or pd.isna(measured) else float(measured),
            "unit": f"{unit} here; {ref['unit']} published" if unit else base["unit"],
            "differs": "; ".join([*differs, *hardware_differences(point, ref)]),
            "drawn": DRAWN_IN.get(ref["metric"], "") if column else ""}


def recipe_label(ref: dict | pd.Series) -> str:
    """The legend label of a published recipe figure: the study's label with the published
    model and image size, e.g. ``PyCls, A100, 2022 (ViT-H/16, 224 px)``."""
    setup = ", ".join(p for p in (ref["model"], f"{ref['img_size']} px" if ref["img_size"]
                                  else "") if p)
    return f"{ref['label']} ({setup})" if setup else ref["label"]


def _label(ref: dict | pd.Series, hardware: list[str]) -> str:
    """The published row's label, with its hardware where ours differs (``hardware``:
    :func:`hardware_differences`), e.g. ``ORNL, Frontier, 2023 (8 x AMD MI250X GCD a
    node)``."""
    if not hardware:
        return ref["label"]
    count = f"{ref['gpus_per_node']} x " if ref["gpus_per_node"] else ""
    return f"{ref['label']} ({count}{ref['device'] or 'GPU'} a node)"


def _why_none(column: str) -> str:
    """Why a point has no value in a measured column."""
    return ("memory here is not GPU allocated memory (CPU: resident memory)"
            if column == "peak_mem_gib" else "not recorded")


def setting_differences(point: pd.Series, ref: dict | pd.Series) -> list[str]:
    """Each setting of :data:`REQUIRED` that differs or is not stated on either side, and
    each of :data:`WHERE_STATED` the published row states and the point differs in, as
    ``"key: ours here, theirs published"``; empty when the point matches the row."""
    out = []
    for key in (*REQUIRED, *WHERE_STATED):
        theirs, ours = ref[key], as_setting(point.get(SETUP_COLUMNS[key]))
        if key in WHERE_STATED and not theirs:
            continue
        if ours != theirs or not theirs:
            out.append(f"{key}: {ours or 'not recorded'} here, "
                       f"{theirs or 'not stated'} published")
    return out


def hardware_differences(point: pd.Series, ref: dict | pd.Series) -> list[str]:
    """Each setting of :data:`HARDWARE` the published row states and the point differs in,
    e.g. ``["gpus_per_node: 2 ranks here, 8 published", "device: cpu (AMD EPYC) here, AMD
    MI250X GCD published"]``. Devices are the same when the published name's words, but vendor and
    unit words (:data:`DEVICE_WORDS`), are all in ours; a CPU is never a published GPU."""
    out = []
    ranks, gpus = as_setting(point.get(SETUP_COLUMNS["gpus_per_node"])), ref["gpus_per_node"]
    if gpus and ranks != gpus:
        kind = "ranks" if as_setting(point.get("device_type")) == "cpu" else "GPUs"
        out.append(f"gpus_per_node: {ranks or 'not recorded'} {kind} here, {gpus} published")
    if ref["device"] and not _same_device(point, ref["device"]):
        kind, name = (as_setting(point.get(c)) for c in ("device_type", "device_name"))
        ours = f"{kind} ({name})" if kind and name and kind != name else kind or name
        out.append(f"device: {ours or 'not recorded'} here, {ref['device']} published")
    return out


def _same_device(point: pd.Series, theirs: str) -> bool:
    """Whether the point ran on the published device (see :func:`hardware_differences`)."""
    if as_setting(point.get("device_type")) == "cpu":
        return False
    wanted = _device_words(theirs)
    return bool(wanted) and wanted <= _device_words(as_setting(point.get("device_name")))


def _device_words(name: str) -> set[str]:
    """The words of a device name that tell devices apart (lower case, no vendor or unit
    word of :data:`DEVICE_WORDS`): ``AMD Instinct MI250X`` -> ``{"mi250x"}``."""
    return set(re.findall(r"[a-z0-9]+", name.lower())) - DEVICE_WORDS


def published_setup(ref: dict | pd.Series) -> str:
    """A published row's setup in one line, e.g. ``vit_base DDP, 1 node x 8 GPUs, batch
    32/GPU, fp32, 224 px, activation checkpointing, synthetic``; unstated parts left out."""
    parts = [f"{ref['model']} {ref['strategy']}".strip()]
    if ref["nodes"]:
        gpus = f" x {ref['gpus_per_node']} GPUs" if ref["gpus_per_node"] else ""
        parts.append(f"{ref['nodes']} node{'s' if ref['nodes'] != '1' else ''}{gpus}")
    if ref["local_batch_size"]:
        parts.append(f"batch {ref['local_batch_size']}/GPU")
    parts += [p for p in (ref["precision"], f"{ref['img_size']} px" if ref["img_size"] else "")
              if p]
    if ref["activation_checkpointing"] == "true":
        parts.append("activation checkpointing")
    if ref["backward_prefetch"]:
        limit = ", limit_all_gathers" if ref["limit_all_gathers"] == "true" else ""
        parts.append(f"{ref['backward_prefetch']}{limit}")
    return ", ".join(p for p in [*parts, ref["data"]] if p)


def matched(table: pd.DataFrame, metric: str = "ips") -> pd.DataFrame:
    """The compared rows of a :func:`reference_table` for ``metric``: what the figures mark."""
    if table.empty:
        return table
    return table[table["compared"].astype(bool) & (table["metric"] == metric)]


def reference_summary(table: pd.DataFrame) -> str:
    """The analysis's printed lines on reference.csv: how many points were compared with
    which study and the median ratio (min-max), and how many were not with the settings
    that most often differed (not :data:`HARDWARE`, which decides nothing), e.g.
    ``published figures (reference.csv): 2 of 12 points compared with ORNL, Frontier, 2023:
    images/s measured / published per device, median 0.93 (0.91-0.95); 10 not compared (differing:
    local_batch_size 10, precision 10)``; the rows of the same setup left out for a world size
    of 1 on one side only (:func:`one_device_apart`: their ratio would compare one device's
    work without collectives with a sharded one's), e.g. ``ORNL, Frontier, 2023 (8 x AMD
    MI250X GCD a node), ips: 2 figure(s) of the same setup not compared (world_size: 1 here
    (one device: no collectives), 8 published): not the same work a device, no ratio``;
    then the published figures drawn beside ours without being compared (a recipe step's
    relative figure, CPU memory)."""
    if table.empty:
        return "published figures (reference.csv): no completed point to compare"
    relative = table["metric"].map(lambda m: isinstance(m, str) and m.startswith(RELATIVE))
    points = table[~relative].groupby(["model", "configuration", "nodes"], dropna=False)
    compared = points["compared"].any()
    lines = [f"published figures (reference.csv): {int(compared.sum())} of {len(compared)} "
             "points compared"]
    for (label, metric), rows in matched_all(table).groupby(["label", "metric"]):
        ratio = rows["ratio_per_device"].astype(float)
        lines.append(f"  {label}, {metric}: measured / published per device, median "
                     f"{_ratio(ratio.median())} ({_ratio(ratio.min())}-{_ratio(ratio.max())}) "
                     f"over {len(rows)} figures")
    for (label, metric), rows in one_device_apart(table).groupby(["label", "metric"]):
        sizes = "; ".join(dict.fromkeys(
            part for text in rows["differs"] for part in text.split("; ")
            if part.startswith(f"{WORLD_SIZE}:")))
        lines.append(f"  {label}, {metric}: {len(rows)} figure(s) of the same setup not "
                     f"compared ({sizes}): not the same work a device, no ratio")
    if (~compared).any():
        keys = table.loc[~relative & ~table["compared"].astype(bool), "differs"].fillna("")
        counts = pd.Series([part.split(":")[0] for text in keys for part in text.split("; ")
                            if part and part.split(":")[0] not in HARDWARE]).value_counts()
        most = ", ".join(f"{k} {v}" for k, v in counts.head(4).items())
        lines.append(f"  {int((~compared).sum())} points not compared (differing, in rows of "
                     f"reference.csv: {most})")
    drawn = table["drawn"].map(lambda d: isinstance(d, str) and d != "")
    beside = table[~table["compared"].astype(bool) & drawn]
    for (label, metric, drawn), rows in beside.groupby(["label", "metric", "drawn"]):
        values = ", ".join(f"{v:g}" for v in dict.fromkeys(rows["published"]))
        lines.append(f"  drawn in {drawn}, not compared: {label} {metric} {values} beside "
                     f"{len(rows)} of ours (why: differs)")
    return "\n".join(lines)


def one_device_apart(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of a :func:`reference_table` not compared for a world size of 1 on one side
    only (:func:`world_size_difference`), every other setting equal (the hardware aside):
    what would otherwise have been compared."""
    if table.empty:
        return table

    def only_world_size(text) -> bool:
        keys = [part.split(":")[0] for part in str(text or "").split("; ") if part]
        keys = [k for k in keys if k not in (*HARDWARE, "ratio_per_device")]
        return keys == [WORLD_SIZE]

    return table[~table["compared"].astype(bool) & table["differs"].map(only_world_size)]


def _ratio(value: float) -> str:
    """A ratio to two decimals, or two significant digits below 0.01 (a CPU against a GPU
    node: ``0.00034``, not ``0.00``)."""
    return f"{value:.2f}" if abs(value) >= 0.01 or value == 0 else f"{value:.2g}"


def matched_all(table: pd.DataFrame) -> pd.DataFrame:
    """The compared rows of a :func:`reference_table`, every metric."""
    return table[table["compared"].astype(bool)] if len(table) else table
