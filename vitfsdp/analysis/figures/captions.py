"""The caption words that belong to one figure, not to every figure that draws a kind of
mark: :func:`vitfsdp.analysis.report.caption` takes a figure's own words for a kind over the
report's shared ones, and a figure's one-device caption where it drew every point on one
device (:data:`SINGLE_DEVICE`)."""

#: The kind a figure adds to its drawn kinds (the PNG's ``DRAWN_KEY``) where every point ran
#: on one device (world size 1): no collectives, so no scaling and no ideal line to draw.
SINGLE_DEVICE = "single_device"

#: The caption of such a figure, by figure name, in place of the report's own.
SINGLE_DEVICE_CAPTIONS = {
    "weak_scaling": "Single-device throughput: images/s of one GPU (world size 1: no "
                    "collectives, so no scaling is measured and no ideal is drawn), one panel "
                    "per model, a line per configuration beside the others at the one node.",
    "tflops": "Model FLOP rate of one GPU (3 x forward FLOPs x images/s; world size 1: no "
              "collectives), a configuration per marker beside the others, median over "
              "repeats; in TFLOP/s, or GFLOP/s where TFLOP/s would read below 0.1.",
}

#: The words for the published figures not compared, in every figure that draws them.
PUBLISHED_OTHER_WORDS = ("thick dark-grey segment with its value: a published figure drawn "
                         "beside ours, not compared (another model, device or measure; "
                         "reference.csv's differs says which)")

#: A figure's own words for a kind of mark, by figure name, then kind (the keys of
#: ``MARK_CAPTIONS``): the memory figure's prediction is of memory, beside the measured peak;
#: the line figures' is of images/s, at the point; a failure is drawn where nothing hides it.
FIGURE_MARK_CAPTIONS = {
    "weak_scaling": {
        "predicted": "dotted line with small marks in the line's colour and shape: the "
                     "plan's predicted images/s, at the line's points",
        "failed": "black x over the line's marker, in the grey strip at the panel's bottom, "
                  "over everything drawn: a point with runs that did not complete, at its "
                  "line's x (side by side where two stand at one x; what they reached before "
                  "they ended: failures.csv; the note under the panel names them)",
    },
    "efficiency": {
        "not_from_zero": "the y axis starts a little below the lowest efficiency or bound "
                         "drawn, not at 0 (its label says where), so lines within a few "
                         "percent of each other are told apart",
        "failed": "black x over the line's marker, in the grey strip at the panel's bottom: a "
                  "point with runs that did not complete, at its line's x (the note under the "
                  "panel names them)",
    },
    "recipe": {"published_other": PUBLISHED_OTHER_WORDS},
    "memory": {
        "published_other": PUBLISHED_OTHER_WORDS,
        "device_off_scale": "arrow up in a panel's top right corner: the device's memory (or "
                            "XLA's pool) above the panel's scale, named with its size; each "
                            "panel has its own y scale",
        "state_rest_no_grads": "dashed hollow top of a bar: the peak above the model state "
                               "of a run that recorded no gradient bytes (JAX), its "
                               "gradients in it",
        "predicted": "dotted: the plan's prediction of what the legend names (the peak "
                     "reserved memory on a GPU, XLA's peak in use for JAX on a GPU, its "
                     "reserved being its preallocated pool, the resident memory on CPU), just "
                     "left of the measured peak",
    },
}
