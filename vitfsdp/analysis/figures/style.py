"""The figures' look: matplotlib (imported at the first figure drawn), the paper sizes and
text, and each strategy's fixed colour, marker and line style."""

from __future__ import annotations

import functools
import re
import types

import pandas as pd

from vitfsdp.analysis.lines import line_label as _line_label
from vitfsdp.analysis.lines import line_labels
from vitfsdp.models import VARIANTS


@functools.cache
def _mpl() -> types.SimpleNamespace:
    """The matplotlib names the figures use, imported on the first figure drawn: an analysis
    whose figures did not change (:class:`~vitfsdp.analysis.figures.write.PendingFigures`) imports
    no matplotlib, which
    would be a third of its time."""
    # matplotlib at first use, not with this module (see above)
    import matplotlib
    import matplotlib.colors
    from matplotlib import font_manager
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.font_manager import FontProperties
    from matplotlib.lines import Line2D
    from matplotlib.markers import MarkerStyle
    from matplotlib.patches import Patch, Rectangle
    from matplotlib.ticker import FuncFormatter, NullFormatter, NullLocator
    from matplotlib.transforms import ScaledTranslation

    return types.SimpleNamespace(
        matplotlib=matplotlib, font_manager=font_manager, FigureCanvasAgg=FigureCanvasAgg,
        Figure=Figure, FontProperties=FontProperties, Line2D=Line2D, MarkerStyle=MarkerStyle,
        Patch=Patch, Rectangle=Rectangle,
        FuncFormatter=FuncFormatter, NullFormatter=NullFormatter, NullLocator=NullLocator,
        ScaledTranslation=ScaledTranslation)

DPI = 300  # PNG resolution (dots per inch): print quality at the figure's own size
#: zlib's level for the PNGs (Pillow's default is 6): level 1 saves a quarter of the time to
#: encode (0.24 s of memory.png's 1.5 s at 10,000 runs) for files 15 % larger.
PNG_COMPRESS_LEVEL = 1
#: Height (axes fraction) at which runs that did not complete and reached nothing are marked:
#: the panel's bottom band, below every value (no mark there reads as a measurement).
NOT_COMPLETED_Y = 0.04
#: The step right (points) between such marks that would stand at one x (lines drawn at the
#: node count itself): side by side in the band, not stacked up the axis onto its values.
NOT_COMPLETED_STEP_PT = 5.0
#: The text in a panel whose runs give nothing to draw at a value (none completed).
NOTHING_TO_PLOT = "no completed run: nothing to plot\n(why: failures.csv)"
#: Width of one panel in inches, labels included: one column of a two-column paper (IEEE,
#: ACM and Springer columns are 3.3-3.5 in), so a figure prints at 100 % with no shrinking.
PANEL_WIDTH_IN = 3.5
AXES_HEIGHT_IN = 1.9  # height of each panel's plotting area (inches); the figure grows to fit
MAX_COLUMNS = 2  # panels a row: two columns make a full page width (7 in)
#: Matplotlib settings of every figure: text sizes readable at 100 % print size.
PAPER_RC = {
    "font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "xtick.labelsize": 7,
    "ytick.labelsize": 7, "legend.fontsize": 7, "figure.titlesize": 9, "lines.linewidth": 1.2,
    "lines.markersize": 4.5, "errorbar.capsize": 2, "hatch.linewidth": 0.6,
}  # fmt: skip
NOTE_FONTSIZE = 6.5  # points: the not-completed note under a panel
Y_LABELS_IN = 0.8  # inches of a panel's width taken by the y label and tick labels


#: Colour-blind-safe colours (Paul Tol's "muted" and Okabe-Ito palettes) by grey level
#: (luma, 0.299 R + 0.587 G + 0.114 B): the six usual strategies' are
#: :data:`MIN_GREY_STEP` apart, so a greyscale print still tells them apart by lightness
#: as well as by marker: indigo 0.20, green 0.32, purple 0.42, rose 0.53, orange 0.64,
#: cyan 0.74.
MUTED = {"indigo": "#332288", "green": "#117733", "purple": "#AA4499", "rose": "#CC6677",
         "orange": "#E69F00", "cyan": "#88CCEE", "wine": "#882255", "teal": "#44AA99",
         "sand": "#DDCC77", "olive": "#999933", "vermillion": "#D55E00", "sky": "#56B4E9"}
#: The least grey-level difference between the colours of :data:`USUAL_STRATEGIES`.
MIN_GREY_STEP = 0.1
#: The strategies of the presets a sweep runs by default (and of the synthetic sample).
USUAL_STRATEGIES = ("DDP", "NO_SHARD", "FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_2GPU",
                    "HYBRID_8GPU")
#: Colours of strategies outside :data:`STRATEGY_LOOKS` (picked by the name, so fixed too).
LINE_COLORS = tuple(MUTED[c] for c in ("olive", "vermillion", "sky", "wine", "teal", "sand"))
#: Markers that still read hollow when a one-run point draws them white inside
#: (:func:`~vitfsdp.analysis.figures.panels._hollow_one_run`: at least
#: :data:`MIN_HOLLOW_SHARE` of the filled marker's area white); a star or a thin cross
#: fills up with its outline and reads as a point of repeats.
LINE_MARKERS = ("o", "s", "^", "v", "P", "<", ">", "p", "h")
#: Markers of a strategy's further lines (a swept setting splitting it, or its JAX line
#: beside its PyTorch one), none a strategy's, nor a memory mark's (:data:`RESERVED_MARKER`),
#: nor the skipped point's hollow diamond ("D"), and each reads hollow.
VARIANT_MARKERS = ("X", "H", "8")
#: The edge width (points) of a one-run point's hollow marker: thin enough that the white
#: face shows in every marker of :data:`LINE_MARKERS` and :data:`VARIANT_MARKERS`.
HOLLOW_LW = 0.7
#: The least share of a marker's filled area that its hollow form leaves white.
MIN_HOLLOW_SHARE = 0.4
#: memory.png's marks beside a measured point, in shapes no line uses (not a strategy's,
#: :data:`LINE_MARKERS`, nor :data:`VARIANT_MARKERS`), so a hollow one-run point is not taken
#: for one: the measured peak reserved memory as a thin hollow diamond, the whole device's
#: used memory as a three-spoked "tri up".
RESERVED_MARKER = "d"
DEVICE_USED_MARKER = "2"
#: Most not-completed points listed in one panel's note; the rest are counted.
MAX_NOTE_ITEMS = 3
#: A fixed colour and marker per strategy preset, so a strategy looks the same in every
#: figure, panel, sweep and report, in colour and in greyscale (:data:`MUTED`). A strategy
#: split into several lines (a swept setting) keeps its colour; its first line (by label)
#: keeps the marker and the others take :data:`VARIANT_MARKERS`.
STRATEGY_LOOKS = {"DDP": (MUTED["indigo"], "o"), "NO_SHARD": (MUTED["cyan"], "v"),
                  "FULL_SHARD": (MUTED["orange"], "s"),
                  "SHARD_GRAD_OP": (MUTED["green"], "^"),
                  "HYBRID_1GPU": (MUTED["wine"], "<"), "HYBRID_2GPU": (MUTED["rose"], ">"),
                  "HYBRID_8GPU": (MUTED["purple"], "P"), "HYBRID_4GPU": (MUTED["teal"], "p"),
                  "HYBRID_16GPU": (MUTED["sand"], "h")}  # fmt: skip
DEVICE_COLOR = "black"  # the device-memory line (no strategy line is black)


#: Shortest error bar drawn, as a fraction of the panel's height (a linear axis) or of the
#: point's value (a log axis): a shorter one hides under its point's marker (4.5 pt on a
#: panel 137 pt high), so it is neither drawn nor listed in the legend.
MIN_ERROR_BAR = 0.02


#: Line style per framework when both are plotted; one framework: solid. Measured lines are
#: solid or dash-dot, ideal lines dashed, the plan's predictions dotted.
FRAMEWORK_STYLES = {"torch": "-", "jax": "-."}
DEFAULT_STYLE = "-"


def _paper_style(plot):
    """Run a figure function under :data:`PAPER_RC` (text sizes are fixed as it draws)."""

    @functools.wraps(plot)
    def styled(*args, **kwargs):
        with _mpl().matplotlib.rc_context(PAPER_RC):
            return plot(*args, **kwargs)

    return styled


def _look_label(line: pd.DataFrame, keys: list[str]) -> str:
    """The key of a line's rows in :func:`_looks`: its label."""
    return _line_label(line.iloc[0], keys)


def _linestyle(line: pd.DataFrame, keys: list[str]) -> str:
    """Line style of a measured line: by framework when frameworks vary, else solid."""
    if "framework" not in keys:
        return DEFAULT_STYLE
    return FRAMEWORK_STYLES.get(line["framework"].iloc[0], DEFAULT_STYLE)


def strategy_look(strategy: str) -> tuple[str, str]:
    """The fixed ``(colour, marker)`` of a strategy: :data:`STRATEGY_LOOKS`, else picked by
    the name's bytes (stable across runs and sweeps)."""
    if strategy in STRATEGY_LOOKS:
        return STRATEGY_LOOKS[strategy]
    code = sum(str(strategy).encode())
    return LINE_COLORS[code % len(LINE_COLORS)], LINE_MARKERS[code % len(LINE_MARKERS)]


def _looks(df: pd.DataFrame, keys: list[str]) -> dict[str, tuple[str, str]]:
    """``(colour, marker)`` per line label (``keys``: :func:`line_labels`), the same in every
    panel and figure: the strategy's fixed look (:func:`strategy_look`); a strategy's further
    lines keep its colour and take, in label order, the cross of :data:`VARIANT_MARKERS`, the
    :data:`LINE_MARKERS` of strategies ``df`` does not hold, then the rest of
    :data:`VARIANT_MARKERS`, its JAX lines
    after its PyTorch ones, so a JAX point differs in shape from the PyTorch point beside it
    (a lone point has no line style to tell them apart, and hollow means one run)."""
    rows = df.assign(_key=line_labels(df, keys),
                     _jax=df["framework"].eq("jax") if "framework" in keys else False)
    by_strategy = rows.groupby(rows["strategy"].astype("string").fillna("unknown strategy"))
    looks, extra = {}, 0
    groups = sorted(by_strategy[["_key", "_jax"]])
    taken = {strategy_look(strategy)[1] for strategy, _ in groups}
    # the cross, then the shapes of the strategies not drawn here (all read hollow), then
    # the hexagon and octagon, which hollow read near a circle (they come last)
    variants = (VARIANT_MARKERS[:1] + tuple(m for m in LINE_MARKERS if m not in taken)
                + VARIANT_MARKERS[1:])
    for strategy, lines in groups:
        color, marker = strategy_look(strategy)
        ordered = sorted(set(zip(lines["_jax"], lines["_key"], strict=True)))
        for i, label in enumerate(label for _, label in ordered):
            if i:
                marker, extra = variants[extra % len(variants)], extra + 1
            looks[label] = (color, marker)
    return looks


#: How a published figure that is not compared with ours is drawn (another model, device
#: or measure: reference.csv's ``differs``): a short thick dark-grey segment (no strategy's
#: colour is grey: :data:`MUTED`) at its value, labelled.
PUBLISHED_OTHER = {"color": "0.3", "lw": 2}
#: Half the width of a published memory segment where the panel draws no bars (octaves).
PUBLISHED_HALF_OCTAVES = 0.15


def _chars_per_line(width_in: float, fontsize: float) -> int:
    """About how many characters of DejaVu Sans at ``fontsize`` points fit ``width_in``
    inches (an average character taken as 0.62 em: upper-case names run wide)."""
    return max(20, int(width_in * 72 / (0.62 * fontsize)))


def log_label(label: str) -> str:
    """An axis label that says its scale is logarithmic: ``nodes`` -> ``nodes (log scale)``,
    ``throughput (images/s, global)`` -> ``throughput (images/s, global; log scale)``: on a log
    axis equal distances are equal ratios, which a reader of plain-number ticks may miss."""
    if label.endswith(")"):
        return f"{label[:-1]}; log scale)"
    return f"{label} (log scale)"


#: A line label's settings as a reader says them: ``key=value`` (a word of
#: :func:`vitfsdp.analysis.lines.line_label`) by key, then value; a value not listed keeps
#: ``name=value`` with the key's last part (``adamw=foreach``).
SHORT_SETTINGS = {
    "train.activation_checkpointing": {"True": "AC on", "False": "AC off"},
    "kernels.fused_attn": {"True": "fused attention", "False": "unfused attention"},
    "kernels.compile": {"True": "compiled", "False": "eager"},
    "strategy.use_orig_params": {"True": "orig params", "False": "flat params"},
    "limit_all_gathers": {"True": "limit all-gathers", "False": "no all-gather limit"},
}
#: The frameworks' words of a line label, as their names are written.
FRAMEWORK_WORDS = {"torch": "PyTorch", "jax": "JAX"}


def short_label(label: str) -> str:
    """A line label as the legend shows it: the strategy, then its settings in the reader's
    words in brackets, ``DDP torch train.activation_checkpointing=False
    kernels.fused_attn=True`` -> ``DDP (PyTorch, AC off, fused attention)``; a part after
    `` (`` (``(ideal from 2 nodes)``) kept as it is; a label with no setting unchanged."""
    head, sep, tail = label.partition(" (")
    first, *words = head.split(" ")
    if not (re.fullmatch(r"[A-Z][A-Z0-9_]*", first)
            and any("=" in word or word in FRAMEWORK_WORDS for word in words)):
        return label  # not a strategy's line with settings: a device line, a mark's words
    said = []
    for word in words:
        key, eq, value = word.partition("=")
        if key == "kernels.adamw":
            said.append(f"AdamW {value}")
        elif eq:
            said.append(SHORT_SETTINGS.get(key, {}).get(value, f"{key.split('.')[-1]}={value}"))
        else:
            said.append(FRAMEWORK_WORDS.get(word, word))
    return f"{first} ({', '.join(said)})" + (f" {sep.strip()}{tail}" if sep else "")


#: Readable names of the model table's variants (:data:`vitfsdp.models.VARIANTS`): the ViT
#: size and patch, and whose architecture it is (the ORNL study's SwiGLU rows, timm's
#: registered GELU ViTs); ``vit_huge`` and ``vit_huge_patch14_224`` both read as a 224 px
#: ViT-H/14 by their keys.
SIZE_NAMES = {"small": "S", "base": "B", "large": "L", "huge": "H", "giant": "g",
              "gigantic": "G"}


def model_name(model: str) -> str:
    """A panel's name for ``model`` (a key of :data:`vitfsdp.models.VARIANTS`): ``ViT-H/14
    (ORNL, SwiGLU)`` for ``vit_huge``, ``ViT-H/14 (timm)`` for ``vit_huge_patch14_224``,
    ``ViT-3B/14 (ORNL, SwiGLU)`` for ``vit_3b``; a model outside the table (or ``vit_tiny``,
    the tests' CPU model) keeps its key."""
    spec = VARIANTS.get(model)
    parts = model.split("_")
    if spec is None or len(parts) < 2 or parts[1] == "tiny":
        return model
    size = SIZE_NAMES.get(parts[1], parts[1].upper())
    if spec.mlp == "swiglu":
        return f"ViT-{size}/{spec.patch_size} (ORNL, SwiGLU)"
    return f"ViT-{size}/{spec.patch_size} (timm)"
