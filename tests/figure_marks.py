"""What a line figure's axes drew, as a reader reads it off: each strategy's measured line,
each error bar by colour, and each hollow one-run marker by colour (the figure tests of
tflops.png, weak_scaling.png and efficiency.png)."""

from matplotlib.colors import to_hex


def measured_lines(ax) -> dict:
    """The axes' labelled lines with markers (a strategy's measured points), by label."""
    return {ln.get_label(): ln for ln in ax.lines if not ln.get_label().startswith("_")
            and ln.get_marker() not in (None, "None", "")}


def bars_by_colour(ax) -> dict[str, list[tuple[float, bool]]]:
    """Each error bar an axes drew, by colour: (x, capped)."""
    bars: dict[str, list[tuple[float, bool]]] = {}
    for container in ax.containers:
        (segments,) = container.lines[2]
        capped = bool(container.lines[1])
        bars.setdefault(to_hex(segments.get_color()[0]), []).extend(
            (seg[0][0], capped) for seg in segments.get_segments())
    return bars


def hollow_by_colour(ax) -> dict[str, list[float]]:
    """The x of each hollow one-run marker (``_one run`` scatter), by edge colour."""
    return {to_hex(c.get_edgecolor()[0]): list(c.get_offsets()[:, 0])
            for c in ax.collections if c.get_label() == "_one run"}


def marks_by_line(ax):
    """Per measured line (:func:`measured_lines`): its label, its markers' x, the x of its
    window bars (uncapped) and of its repeat bars (capped), and of its hollow markers."""
    bars, hollow = bars_by_colour(ax), hollow_by_colour(ax)
    for label, line in measured_lines(ax).items():
        color = to_hex(line.get_color())
        yield (label, list(line.get_xdata()), [x for x, capped in bars[color] if not capped],
               [x for x, capped in bars[color] if capped], hollow[color])


def window_bars_over_one_run_markers(ax) -> bool:
    """Whether every window bar (an uncapped error bar) is drawn above every hollow one-run
    marker, so that the bar reads through its marker's face."""
    window_z = {c.lines[2][0].get_zorder() for c in ax.containers if not c.lines[1]}
    return bool(window_z) and min(window_z) > max(
        c.get_zorder() for c in ax.collections if c.get_label() == "_one run")


def unfilled_share(collection) -> float:
    """The share of a scatter marker's filled area that is left white where it is drawn as
    the collection draws it (its path, size and edge width, white face): rendered alone at
    300 dpi, once filled, once as drawn. Below about 0.4 the outline fills the face and
    the marker reads filled."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path, size = collection.get_paths()[0], collection.get_sizes()[0]
    width = collection.get_linewidths()[0]

    def dark(hollow: bool):
        fig = Figure(figsize=(0.3, 0.3), dpi=300)
        FigureCanvasAgg(fig)
        ax = fig.add_axes((0, 0, 1, 1))
        ax.set_axis_off()
        ax.set_xlim(-1, 1)
        ax.set_ylim(-1, 1)
        ax.scatter([0], [0], marker=path, s=size, facecolors="white" if hollow else "black",
                   edgecolors="black", lw=width if hollow else 0)
        fig.canvas.draw()
        return np.asarray(fig.canvas.buffer_rgba())[..., 0] < 128

    filled, drawn = dark(False), dark(True)
    return float((filled & ~drawn).sum() / filled.sum())


def grey(color) -> float:
    """A colour's grey level as a greyscale print or copier renders it (luma: 0.299 R +
    0.587 G + 0.114 B)."""
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(color)
    return 0.299 * r + 0.587 * g + 0.114 * b
