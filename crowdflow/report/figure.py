"""What every figure builder of the report shares: the figure record, the optional matplotlib canvas, colours.

A builder (one module per job: :mod:`~crowdflow.report.skills`, :mod:`~crowdflow.report.ranking`,
:mod:`~crowdflow.report.personal`, :mod:`~crowdflow.report.assignment`) turns a run's tables into
:class:`Plot` records; :mod:`crowdflow.report.page` renders them with :func:`png` when matplotlib is
installed and lays out the page. Figures are drawn with the Agg canvas through matplotlib's object-oriented
API (no pyplot, no global backend state).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

INSTALL_HINT = "pip install 'crowdflow[report]'"

STATUS_COLOURS = {
    "ok": "#2a9d8f",
    "bipartite_component": "#e76f51",
    "isolated": "#9e9e9e",
    "too_few_labels": "#e9c46a",
}
BLUE, ORANGE, GREY, RED = "#3a6ea5", "#f4a261", "#9e9e9e", "#c0392b"


@dataclass
class ReportFigure:
    """One figure of the report.

    Attributes
    ----------
    id : str
        Stable HTML id (``fig-…``), also the artifact's reference.
    title, caption : str
        The caption says what is plotted and how any derived quantity was computed.
    png : bytes or None
        The rendered image; None without matplotlib or when there is nothing to plot.
    note : str or None
        Why there is no image (nothing to plot, matplotlib missing).
    data : DataFrame or None
        A small table of the plotted numbers (shown without matplotlib, and in the Prefect artifacts).
    sentence : str or None
        What the figure would show, said in words instead of a chart that would say nothing (one bar).
    legend : list of (colour, label)
        What each colour of the drawn image stands for, read from the drawn artists (:func:`png`); the page shows
        it under the image, so a figure always says what its colours mean.
    reading : str or None
        One line saying what the figure shows for this run (the builder's, else the caption's first sentence
        with a number).
    """

    id: str
    title: str
    caption: str
    png: bytes | None = None
    note: str | None = None
    data: pd.DataFrame | None = None
    sentence: str | None = None
    legend: list[tuple[str, str]] = field(default_factory=list)
    reading: str | None = None

    @property
    def alt(self) -> str:
        return f"{self.title} ({self.id})"

    def data_uri(self) -> str | None:
        if self.png is None:
            return None
        return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")


# --------------------------------------------------------------------------------------------------
# matplotlib (optional)


def matplotlib_figure() -> Any | None:
    """``matplotlib.figure.Figure`` when matplotlib is installed, else None."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    return Figure


MARGINS = {"left": 0.11, "right": 0.97, "bottom": 0.15, "top": 0.95, "wspace": 0.32}


def png(
    figure_cls: Any, draw: Callable[[Any], None], size: tuple[float, float], margins: Mapping[str, float] | None = None
) -> tuple[bytes, list[tuple[str, str]]]:
    """The drawn figure as PNG bytes, and its legend: (colour, label) of every labelled artist of every axes.

    An axes without labelled artists (one histogram, one bar series) gets one entry, its first artist's colour
    labelled "<y label> by <x label>", so every figure says what its colour stands for.
    """
    # Fixed margins instead of a layout engine: constrained/tight layout doubles the drawing time.
    fig = figure_cls(figsize=size, dpi=100)
    fig.subplots_adjust(**{**MARGINS, **(margins or {})})
    draw(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue(), legend_of(fig)


def _colour(artist: Any) -> str | None:
    from matplotlib.colors import to_hex

    for getter in ("get_facecolor", "get_color"):
        if hasattr(artist, getter):
            value = getattr(artist, getter)()
            if hasattr(value, "ndim") and value.ndim == 2:
                value = value[0] if len(value) else None
            if value is None:
                continue
            try:
                return str(to_hex(value))
            except (ValueError, TypeError):
                continue
    return None


def legend_of(fig: Any) -> list[tuple[str, str]]:
    """(colour, label) pairs for the page's legend of a drawn figure (see :func:`png`)."""
    out: dict[tuple[str, str], None] = {}
    for ax in fig.axes:
        handles, labels = ax.get_legend_handles_labels()
        pairs = [(c, lab) for h, lab in zip(handles, labels, strict=True) if (c := _colour(h)) is not None]
        if not pairs:
            first = next(iter([*ax.patches, *ax.collections, *ax.lines, *ax.images]), None)
            what = " by ".join(x for x in (ax.get_ylabel(), ax.get_xlabel()) if x) or ax.get_title() or "plotted values"
            colour = _colour(first) if first is not None and not ax.images else None
            pairs = [(colour or "#777777", what if not ax.images else f"colour scale: {what}")]
        out.update(dict.fromkeys(pairs))
    return list(out)


def style(ax: Any) -> None:
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


@dataclass
class Plot:
    """What a figure builder returns: text, the data table and a draw callback (None: nothing to plot).

    ``sentence`` replaces a chart that would say nothing (a single bar): the page shows the sentence instead.
    """

    id: str
    title: str
    caption: str
    draw: Callable[[Any], None] | None = None
    data: pd.DataFrame | None = None
    note: str | None = None
    size: tuple[float, float] = (6.4, 3.6)
    margins: dict[str, float] | None = None
    sentence: str | None = None
    reading: str | None = None


@dataclass
class Action:
    """One item of the report's "What to act on": who or what to look at, in a sentence and a short table.

    Attributes
    ----------
    id : str
        Stable HTML id (``act-…``).
    title, text : str
    table : DataFrame or None
        The workers or tasks named (a few rows).
    """

    id: str
    title: str
    text: str
    table: pd.DataFrame | None = None
