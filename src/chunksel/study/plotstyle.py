"""What the report's plots share: one distinct colour per selector, legends that do not
cover the data, and bubble labels that do not overlap."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def distinct_colors(n: int) -> list[Any]:
    """``n`` distinct colours: tab10's ten, then the dark shades of tab20b and tab20c
    (other hues), then samples of a continuous map."""
    from matplotlib import colormaps

    pool = [colormaps["tab10"](i) for i in range(10)]
    pool += [colormaps[m](i) for m in ("tab20b", "tab20c") for i in (0, 4, 8, 12, 16)]
    if n <= len(pool):
        return pool[:n]
    return [colormaps["turbo"](x) for x in np.linspace(0.05, 0.95, n)]


def selector_colors(names: Sequence[str]) -> dict[str, Any]:
    """One colour per selector, by its position in ``names`` (Table 1's row order), so a
    selector has the same colour in every plot drawn from the same report."""
    return dict(zip(names, distinct_colors(len(names))))


def is_flagship(name: str) -> bool:
    """Whether a registered selector declares the flagship role (drawn thicker)."""
    from chunksel.study.names import selector_role

    return selector_role(name) == "flagship"


def line_style(name: str, colors: dict[str, Any]) -> dict[str, Any]:
    """A selector's line in a line plot: its colour and display name; dashed for a
    reference row (random, oracle), thicker for a flagship row (roles from the registry)."""
    from chunksel.study.names import selector_label, selector_role

    role = selector_role(name)
    return {"color": colors[name], "label": selector_label(name),
            "linestyle": "--" if role == "reference" else "-",
            "linewidth": 2.2 if role == "flagship" else 1.1}


def save_png(fig: Any, path: Any) -> Any:
    """Lay out and write ``fig``; ``bbox_inches="tight"`` keeps legends placed outside the axes."""
    fig.tight_layout()
    fig.savefig(path, format="png", bbox_inches="tight")
    return path


def legend_below(fig: Any, handles: Sequence[Any], labels: Sequence[str], ncol: int = 4,
                 fontsize: float = 7) -> Any:
    """A figure legend under the axes (``savefig(bbox_inches="tight")`` keeps it in)."""
    return fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=ncol,
                      fontsize=fontsize, frameon=False)


#: offsets (points) tried in turn for a bubble's label: right-up, right-down, left-up,
#: left-down, then further up and down
LABEL_OFFSETS = ((6, 6), (6, -12), (-6, 6), (-6, -12), (6, 16), (6, -22), (-6, 16), (-6, -22),
                 (6, 26), (6, -32))


def place_labels(ax: Any, points: Sequence[tuple[str, float, float]], fontsize: float = 8) -> list[Any]:
    """Annotate each ``(label, x, y)`` at the first offset of :data:`LABEL_OFFSETS` whose text
    box overlaps no label placed before (the last offset when none is free); a label moved
    from the first offset gets a thin leader line to its point. Returns the annotations."""
    fig = ax.figure
    fig.canvas.draw()  # fixes the transforms (log scale, margins) before measuring text
    renderer = fig.canvas.get_renderer()
    placed: list[Any] = []
    boxes: list[Any] = []  # the text boxes placed so far (leader lines not counted)
    for label, x, y in sorted(points, key=lambda p: (-p[2], p[1])):
        for dx, dy in LABEL_OFFSETS:
            probe = ax.annotate(label, (x, y), textcoords="offset points", xytext=(dx, dy),
                                fontsize=fontsize, ha="left" if dx >= 0 else "right")
            box = probe.get_window_extent(renderer)
            probe.remove()
            if not any(box.overlaps(b) for b in boxes):
                break
        moved = (dx, dy) != LABEL_OFFSETS[0]
        placed.append(ax.annotate(
            label, (x, y), textcoords="offset points", xytext=(dx, dy), fontsize=fontsize,
            ha="left" if dx >= 0 else "right",
            arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "grey", "shrinkA": 0} if moved else None))
        boxes.append(box)
    return placed
