"""The plots' shared style: distinct colours per selector and labels that do not overlap."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from chunksel.study.plotstyle import (  # noqa: E402
    LABEL_OFFSETS,
    distinct_colors,
    is_flagship,
    place_labels,
    selector_colors,
)


@pytest.mark.parametrize("n", [1, 10, 14, 20, 33])
def test_distinct_colors_never_repeat(n):
    colors = distinct_colors(n)
    assert len(colors) == n
    assert len({tuple(round(c, 6) for c in col) for col in colors}) == n


def test_selector_colors_follow_row_order():
    names = ["retrieval", "random", "oracle", "bm25", "ranksvm", "lambdamart", "knrm", "drmm",
             "duet", "sras", "crossencoder", "prototype", "anchored", "anchored-ce"]
    a = selector_colors(names)
    assert set(a) == set(names)
    assert len({tuple(v) for v in a.values()}) == len(names)
    assert selector_colors(names) == a  # the same report draws the same colours


def test_flagship_rows_are_those_the_registry_declares():
    assert is_flagship("anchored") and is_flagship("anchored-ce")
    assert not is_flagship("lambdamart") and not is_flagship("no-such-selector")


def _axes():
    fig = Figure(figsize=(6, 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_xscale("log")
    return fig, ax


def test_crowded_labels_do_not_overlap():
    fig, ax = _axes()
    pts = [("LambdaMART", 0.68, 81.9), ("RankSVM", 0.62, 81.6), ("Anchored prototype", 1.29, 82.2),
           ("DRMM", 2.5, 76.4), ("KNRM", 3.05, 75.4), ("BM25", 0.25, 75.9)]
    ax.scatter([p[1] for p in pts], [p[2] for p in pts])
    ax.set_xlim(0.005, 1000)
    ax.set_ylim(20, 110)
    anns = place_labels(ax, pts)
    fig.canvas.draw()  # text positions are final only once drawn
    renderer = fig.canvas.get_renderer()
    assert len(anns) == len(pts)
    boxes = [_text_box(a, renderer) for a in anns]
    overlaps = [(pts[i][0], pts[j][0]) for i in range(len(pts)) for j in range(i + 1, len(pts))
                if boxes[i].overlaps(boxes[j])]
    assert overlaps == []


def _text_box(ann, renderer):
    """The annotation's text box without its leader line."""
    from matplotlib.text import Text

    return Text.get_window_extent(ann, renderer)


def test_a_lone_label_takes_the_first_offset_and_no_leader():
    fig, ax = _axes()
    ax.scatter([1.0], [50.0])
    ax.set_xlim(0.01, 100)
    ax.set_ylim(0, 100)
    (ann,) = place_labels(ax, [("alone", 1.0, 50.0)])
    assert ann.get_position() == LABEL_OFFSETS[0]
    assert ann.arrow_patch is None


def test_colliding_labels_move_and_get_a_leader():
    fig, ax = _axes()
    ax.scatter([1.0, 1.0], [50.0, 50.0])
    ax.set_xlim(0.01, 100)
    ax.set_ylim(0, 100)
    first, second = place_labels(ax, [("same place", 1.0, 50.0), ("same place too", 1.0, 50.0)])
    assert first.get_position() == LABEL_OFFSETS[0]
    assert second.get_position() != LABEL_OFFSETS[0]
    assert second.arrow_patch is not None
