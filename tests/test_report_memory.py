"""The skills report's worker figure and actions in memory that does not grow with the workers (issue #36).

``fig-worker-label-counts`` is drawn from at most ``CURVE_POINTS`` rank bins (:func:`rank_curve`) and the
best/worst-workers and gold actions select their rows on number columns before any id text: checked against the
former per-worker implementations (kept here as references) and by ``tracemalloc`` at two sizes.
"""

from __future__ import annotations

import io
import tracemalloc
from itertools import pairwise
from typing import Any

import numpy as np
import pandas as pd
import pytest

from crowdflow.report.figure import GREY, STATUS_COLOURS, png, style
from crowdflow.report.skills import (
    CURVE_POINTS,
    MIN_LABELS,
    TOP,
    _label_counts_plot,
    _worker_table,
    rank_curve,
    skills_actions,
)

mpl_figure = pytest.importorskip("matplotlib.figure")
Figure = mpl_figure.Figure
STATUSES = ["ok", "bipartite_component", "isolated", "too_few_labels"]


def _skills(w: int, seed: int, *, clustered: bool = False, ids: str = "text") -> pd.DataFrame:
    """A skills table of ``w`` workers: heavy-tailed label counts with many ties, accuracies with ties and NaNs."""
    rng = np.random.default_rng(seed)
    n = rng.zipf(1.7, w).clip(1, 3000) - (rng.random(w) < 0.02)  # a few workers with 0 labels
    if clustered:  # as in a run: the workers with one label isolated or in bipartite components
        status = np.where(n <= 1, rng.choice(STATUSES[1:], w), np.where(rng.random(w) < 0.05, STATUSES[1], "ok"))
    else:
        status = rng.choice(STATUSES[: 1 + seed % 4], w)
    acc = np.round(rng.random(w), 1 + seed % 3)  # 1-3 decimals: many ties
    acc[rng.random(w) < 0.2] = np.nan
    worker: Any = np.arange(w) * 7 + 3 if ids == "int" else np.array([f"w{i:06d}" for i in range(w)], dtype=object)
    table = pd.DataFrame({"worker": worker, "accuracy": acc, "n_labels": n.astype(np.int64), "status": status})
    if ids == "str":
        table["worker"] = table["worker"].astype("str")
    return table


def _gold(skills: pd.DataFrame, seed: int) -> pd.DataFrame:
    """A per-worker gold table (as ``review_skills`` writes it) over ~40 % of the workers and a few strangers."""
    rng = np.random.default_rng(seed + 1)
    ids = skills["worker"].astype(str).to_numpy(dtype=object)
    some = ids[rng.random(len(ids)) < 0.4]
    some = np.concatenate([some, np.array([f"x{i}" for i in range(5)], dtype=object)])
    ng = rng.integers(1, 9, len(some))
    gold = pd.DataFrame(
        {"worker": some, "n_gold_labels": ng, "n_gold_correct": rng.integers(0, 9, len(some)) % (ng + 1)}
    )
    gold["gold_accuracy"] = gold["n_gold_correct"] / gold["n_gold_labels"]
    return gold


# --------------------------------------------------------------------------------------------------
# the former implementations (main 9ea96cf), the references


def _reference_draw(skills: pd.DataFrame) -> Any:
    s = skills.sort_values("n_labels", ascending=False, kind="stable").reset_index(drop=True)
    n = s["n_labels"].to_numpy(dtype=float)
    status = s["status"].astype(str).to_numpy()

    def draw_2(fig: Any) -> None:
        ax = fig.add_subplot()
        x = np.arange(1, len(n) + 1)
        for st in dict.fromkeys(status):
            m = status == st
            ax.fill_between(x, np.where(m, n, 0.0), step="mid", color=STATUS_COLOURS.get(st, GREY), label=st, lw=0)
        if n.max() > 50 * max(n.min(), 1):
            ax.set_yscale("log")
        ax.set_xlabel("worker (sorted by label count)")
        ax.set_ylabel("labels")
        ax.set_xlim(0.5, len(n) + 0.5)
        if len(set(status)) > 1:
            ax.legend(frameon=False, fontsize=8)
        style(ax)

    return draw_2


def _reference_best_worst(skills: pd.DataFrame, gold: pd.DataFrame | None) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    ranked = skills[skills["accuracy"].notna()].astype({"worker": str})
    if gold is not None and not gold.empty:
        ranked = ranked.merge(gold.astype({"worker": str}), on="worker", how="left")
    busy = ranked[ranked["n_labels"] >= MIN_LABELS]
    pool = busy if len(busy) >= 2 * TOP else ranked
    order = pool.sort_values(["accuracy", "n_labels"], ascending=[False, False], kind="stable")
    return _worker_table(order.head(TOP)), _worker_table(order.tail(TOP).iloc[::-1]), len(pool)


def _reference_gold(skills: pd.DataFrame, gold: pd.DataFrame) -> pd.DataFrame:
    est = skills[["worker", "accuracy", "n_labels"]].astype({"worker": str})
    both = gold.astype({"worker": str}).merge(est, on="worker", how="inner")
    both = both.rename(columns={"accuracy": "estimated_accuracy"})
    both = both[both["estimated_accuracy"].notna()].copy()
    both["difference"] = both["estimated_accuracy"] - both["gold_accuracy"]
    return both


def _pixels(image: bytes) -> np.ndarray:
    from matplotlib.image import imread

    return np.asarray(imread(io.BytesIO(image)))[..., :3]


# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("w", [1, 2, 9, 1999, 2000, 2001, 7919, 40_000])
@pytest.mark.parametrize("points", [CURVE_POINTS, 37])
def test_rank_curve_is_the_sorted_counts_binned(w: int, points: int) -> None:
    """Against the per-worker curve (pandas' stable descending sort): each bin's count and largest label count per
    status, at most ``points`` bins, the first, last and last positive ranks single-worker bins, the busiest 20."""
    for seed, clustered in ((w, False), (w + 1, True)):
        skills = _skills(w, seed, clustered=clustered)
        curve = rank_curve(skills["n_labels"].to_numpy(), skills["status"], points)
        s = skills.sort_values("n_labels", ascending=False, kind="stable")
        n, status = s["n_labels"].to_numpy(dtype=float), s["status"].to_numpy()
        e = curve.edges
        assert e[0] == 0 and e[-1] == w and (np.diff(e) > 0).all() and len(e) - 1 <= points
        if w <= points:
            assert (np.diff(e) == 1).all()
        n_pos = int((n > 0).sum())
        for r in {1, w, n_pos} - {0}:  # ranks in a bin of their own
            assert r - 1 in e and r in e
        assert list(curve.heights) == list(dict.fromkeys(status)) == list(curve.counts)
        for st in curve.heights:
            mine = status == st
            want_h = [np.where(mine, n, 0.0)[a:b].max() for a, b in pairwise(e)]
            want_c = [int(mine[a:b].sum()) for a, b in pairwise(e)]
            np.testing.assert_array_equal(curve.heights[st], want_h)
            np.testing.assert_array_equal(curve.counts[st], want_c)
        np.testing.assert_array_equal(curve.order, skills.index.get_indexer(s.index[:20]))


@pytest.mark.parametrize("w", [1, 7, 300, CURVE_POINTS])
def test_label_count_figure_is_the_former_image_up_to_curve_points_workers(w: int) -> None:
    """One bin a worker: the PNG is byte for byte the former per-worker drawing's, legend included."""
    skills = _skills(w, w, clustered=w % 2 == 0)
    plot = _label_counts_plot(skills)
    assert plot.draw is not None
    assert png(Figure, plot.draw, plot.size, plot.margins) == png(Figure, _reference_draw(skills), plot.size,
                                                                  plot.margins)  # fmt: skip
    assert "bins of ranks" not in plot.caption


@pytest.mark.parametrize("clustered", [False, True])
def test_label_count_figure_in_bins_looks_like_the_per_worker_bars(clustered: bool) -> None:
    """At 30,000 workers (~60 a pixel) the binned figure mixes the status colours as the per-worker bars did:
    the images differ by under 0.3 % of the colour range on average (the bins at one status's busiest count
    instead of its shares: ~10 % on the mixed tail), the legend is the same, the caption says it is binned."""
    skills = _skills(30_000, 5, clustered=clustered)
    plot = _label_counts_plot(skills)
    assert plot.draw is not None
    got, legend = png(Figure, plot.draw, plot.size, plot.margins)
    want, want_legend = png(Figure, _reference_draw(skills), plot.size, plot.margins)
    assert legend == want_legend
    assert float(np.abs(_pixels(got) - _pixels(want)).mean()) < 0.003
    assert f"Drawn in {CURVE_POINTS} bins of ranks" in plot.caption
    ref = skills.sort_values("n_labels", ascending=False, kind="stable").reset_index(drop=True)
    pd.testing.assert_frame_equal(plot.data, ref[["worker", "n_labels", "status"]].head(20))


@pytest.mark.parametrize("ids", ["text", "int", "str"])
def test_best_worst_and_gold_actions_are_the_former_ones(ids: str) -> None:
    """Best and worst workers and the gold item on tables with tied accuracies and label counts, NaN accuracies,
    gold for some workers (and for workers not in the table), few busy workers: the former full-table sort and
    merges' tables and text exactly."""
    for seed, w in enumerate([3, 8, 12, 25, 400, 5000]):
        skills = _skills(w, seed, ids=ids)
        for gold in (None, _gold(skills, seed)):
            tables = {"skills": skills} | ({} if gold is None else {"gold_workers": gold})
            acts = {a.id: a for a in skills_actions(tables, {"method": "ds"})}
            best, worst, n_pool = _reference_best_worst(skills, gold)
            pd.testing.assert_frame_equal(acts["act-best-workers"].table, best, check_exact=True)
            pd.testing.assert_frame_equal(acts["act-worst-workers"].table, worst, check_exact=True)
            assert f" {n_pool} workers" in acts["act-best-workers"].text
            assert ", ".join(best["worker"]) in acts["act-best-workers"].text
            assert ", ".join(worst["worker"]) in acts["act-worst-workers"].text
            if gold is not None:
                both = _reference_gold(skills, gold)
                from crowdflow.report.skills import _gold_and_estimate

                pd.testing.assert_frame_equal(_gold_and_estimate(skills, gold), both, check_exact=True)


def _traced_peak(fn: Any) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_worker_figure_and_actions_memory_does_not_grow_with_the_workers() -> None:
    """``tracemalloc`` peak of building and drawing ``fig-worker-label-counts`` and of the skills actions (with a
    gold table over 40 % of the workers), 10,000 → 60,000 workers: ≤ 48 and ≤ 64 bytes a worker added (the
    sort's and the id lookup's number arrays; measured ~35 and ~45). The former code: ~300 (one filled step
    area over every worker) and ~400 (the table copied with its ids as text, two merges on text keys). The drawn
    figure's vertices do not grow with the workers."""
    peaks: dict[str, list[int]] = {"figure": [], "actions": []}
    vertices = []
    sizes = (10_000, 60_000)
    for w in sizes:
        skills = _skills(w, 3, clustered=True)
        tables = {"skills": skills, "gold_workers": _gold(skills, 3)}
        png(Figure, lambda f: f.add_subplot().plot([1, 2]), (2, 2))  # matplotlib's caches before the count

        def figure() -> None:
            plot = _label_counts_plot(skills)
            assert plot.draw is not None
            png(Figure, plot.draw, plot.size, plot.margins)

        peaks["figure"].append(_traced_peak(figure))
        peaks["actions"].append(_traced_peak(lambda: skills_actions(tables, {"method": "ds"})))
        fig = Figure()
        plot = _label_counts_plot(skills)
        assert plot.draw is not None
        plot.draw(fig)
        vertices.append(sum(len(p.vertices) for c in fig.axes[0].collections for p in c.get_paths()))
    grow = {k: (v[1] - v[0]) / (sizes[1] - sizes[0]) for k, v in peaks.items()}
    assert grow["figure"] <= 48, grow
    assert grow["actions"] <= 64, grow
    assert vertices[1] <= vertices[0] * 1.05 and vertices[1] <= 9 * CURVE_POINTS * len(STATUSES), vertices
