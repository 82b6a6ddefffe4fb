"""A skills run in the report: its figures (skill distribution, labels per worker, components, identifiability,
consensus confidence, estimated vs gold-measured worker accuracy, confusion matrix) and what to act on (best and
worst workers, tasks to re-label, labels changed against majority vote, where estimates and gold disagree)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from crowdflow.report.figure import BLUE, GREY, ORANGE, STATUS_COLOURS, Action, Plot, style

# Workers ranked by their estimate need this many labels (when at least TOP workers have them): a worker with
# two labels has an accuracy of 0, 0.5 or 1 and would top or tail every list.
MIN_LABELS = 10
TOP = 5
RELABEL = 10
LOW_CONFIDENCE = 0.6
# the label-count figure's rank bins at most (~4 a pixel of its ~500-pixel-wide axes): see rank_curve
CURVE_POINTS = 2000
_STATUS_MEANING = {
    "ok": "in a non-bipartite component, so its skill is identifiable",
    "bipartite_component": "in a bipartite component: skills are only determined up to a sign flip between its sides",
    "isolated": "shares no task with any other worker: no skill can be estimated",
    "too_few_labels": "has too few labels for a skill",
}


def skills_figures(t: Mapping[str, pd.DataFrame], manifest: Mapping[str, Any]) -> list[Plot]:
    skills = t.get("skills")
    consensus = t.get("consensus")
    comps = t.get("components")
    out: list[Plot] = []

    # skill distribution
    fid, title = "fig-skill-distribution", "Worker skill distribution"
    if skills is None or skills.empty:
        out.append(Plot(fid, title, "No skills table in this run.", note="nothing to plot"))
    else:
        col = "skill" if skills["skill"].notna().any() else "accuracy"
        vals = pd.to_numeric(skills[col], errors="coerce").dropna().to_numpy(dtype=float)
        n_missing = len(skills) - len(vals)
        if vals.size == 0:
            out.append(Plot(fid, title, "No worker has an estimated skill or accuracy.", note="nothing to plot"))
        else:
            qs = np.quantile(vals, [0.1, 0.5, 0.9])
            caption = (
                f"Histogram of the fitted worker {col} ({len(vals)} workers"
                + (f"; {n_missing} without one: not identifiable or too few labels" if n_missing else "")
                + f"). Median {qs[1]:.3f}, 10–90 % range {qs[0]:.3f} … {qs[2]:.3f}."
                + (" Skill s ∈ [−1, 1]: 0 is a spammer, 1 always right." if col == "skill" else "")
            )
            lo, hi = (-1.0, 1.0) if col == "skill" else (0.0, 1.0)
            counts, edges = np.histogram(np.clip(vals, lo, hi), bins=40, range=(lo, hi))
            data = pd.DataFrame({"bin_from": edges[:-1], "bin_to": edges[1:], "workers": counts})
            data = data[data["workers"] > 0]

            def draw_1(fig: Any, vals: np.ndarray = vals, lo: float = lo, hi: float = hi, col: str = col) -> None:
                ax = fig.add_subplot()
                ax.hist(vals, bins=40, range=(lo, hi), color=BLUE, edgecolor="white")
                if col == "skill":
                    ax.axvline(0.0, color=GREY, ls="--", lw=1)
                ax.axvline(float(np.median(vals)), color=ORANGE, lw=1.5, label="median")
                ax.set_xlabel(f"worker {col}")
                ax.set_ylabel("workers")
                ax.legend(frameon=False)
                style(ax)

            out.append(Plot(fid, title, caption, draw_1, data, margins={"bottom": 0.27}))

    # per-worker label counts
    fid, title = "fig-worker-label-counts", "Labels per worker"
    if skills is None or skills.empty or "n_labels" not in skills:
        out.append(Plot(fid, title, "No per-worker label counts in this run.", note="nothing to plot"))
    else:
        out.append(_label_counts_plot(skills))

    # worker-graph components
    fid, title = "fig-worker-components", "Worker-graph components"
    if comps is None or comps.empty:
        out.append(Plot(fid, title, "No component table in this run.", note="nothing to plot"))
    else:
        out.append(_components_plot(comps, skills))

    # identifiability status counts
    fid, title = "fig-identifiability", "Identifiability status of workers"
    if skills is None or skills.empty or "status" not in skills:
        out.append(Plot(fid, title, "No worker status in this run.", note="nothing to plot"))
    else:
        vc = skills["status"].astype(str).value_counts()
        data = vc.rename_axis("status").reset_index(name="workers")
        n_id = int(skills["identifiable"].sum()) if "identifiable" in skills else int(vc.get("ok", 0))
        caption = (
            f"Workers by identifiability status: {n_id} of {len(skills)} have an identifiable skill. "
            "`ok`: in a non-bipartite component; `bipartite_component`: the skills of that component are "
            "only determined up to a sign flip between its two sides; `isolated`: shares no task with anyone."
        )
        if len(vc) == 1:  # one bar says nothing: say it
            only = str(vc.index[0])
            sentence = (
                f"All {len(skills)} workers have status {only}: each is "
                + _STATUS_MEANING.get(only, f"in status {only}")
                + "."
            )
            out.append(Plot(fid, title, caption, None, data, sentence=sentence))
        else:

            def draw_4(fig: Any, vc: pd.Series = vc) -> None:
                ax = fig.add_subplot()
                colours = [STATUS_COLOURS.get(s, GREY) for s in vc.index[::-1]]
                ax.barh(vc.index[::-1], vc.to_numpy()[::-1], color=colours)
                for y, v in enumerate(vc.to_numpy()[::-1]):
                    ax.text(v, y, f" {v}", va="center", fontsize=9)
                ax.set_xlabel("workers")
                ax.spines[["top", "right"]].set_visible(False)

            out.append(Plot(fid, title, caption, draw_4, data, size=(6.4, 2.4), margins={"left": 0.27, "bottom": 0.2}))

    # consensus confidence
    fid, title = "fig-consensus-confidence", "Consensus confidence"
    if consensus is None or consensus.empty:
        out.append(Plot(fid, title, "No consensus table in this run.", note="nothing to plot"))
    else:
        conf = pd.to_numeric(consensus["confidence"], errors="coerce").to_numpy(dtype=float)
        fb = consensus["fallback"].to_numpy(dtype=bool) if "fallback" in consensus else np.zeros(len(conf), bool)
        ok = np.isfinite(conf)
        method = str(manifest.get("method") or "")
        meaning = (
            "the winning vote share"
            if method == "mv"
            else f"{method}'s probability of the chosen label"
            if method.startswith("crowdkit:")
            else "the posterior probability of the chosen label"
        )
        caption = (
            f"Histogram of the consensus confidence ({meaning}) over {int(ok.sum())} tasks: "
            f"mean {np.nanmean(conf):.3f}, "
            f"{(conf[ok] < 0.6).mean():.1%} below 0.6"
            + (f"; {int(fb.sum())} task(s) decided by the majority-vote fallback (orange)" if fb.any() else "")
            + "."
        )
        counts, edges = np.histogram(conf[ok], bins=20, range=(0.0, 1.0))
        data = pd.DataFrame({"bin_from": edges[:-1], "bin_to": edges[1:], "tasks": counts})
        data = data[data["tasks"] > 0]
        metrics = manifest.get("metrics") or {}
        if "accuracy" in metrics:
            caption += f" Accuracy on {metrics.get('n_gold')} gold tasks: {metrics['accuracy']:.4f}"
            scoring = str(metrics.get("accuracy_scoring", ""))
            # gold in the fit: say that the score is cross-fitted (no gold task scored by a fit that saw it)
            caption += f" ({scoring})." if scoring.startswith("cross-fitted") else "."

        def draw_5(fig: Any, conf: np.ndarray = conf[ok], fb: np.ndarray = fb[ok]) -> None:
            ax = fig.add_subplot()
            parts = [conf[~fb]] + ([conf[fb]] if fb.any() else [])
            colours = [BLUE] + ([ORANGE] if fb.any() else [])
            names = ["fitted"] + (["fallback (MV)"] if fb.any() else [])
            ax.hist(parts, bins=20, range=(0.0, 1.0), stacked=True, color=colours, label=names, edgecolor="white")
            ax.set_xlabel("confidence of the consensus label")
            ax.set_ylabel("tasks")
            if np.histogram(conf, bins=20, range=(0.0, 1.0))[0].max() > 0.5 * max(len(conf), 1):
                ax.set_yscale("log")  # one bin holds most tasks: a log axis keeps the uncertain tail visible
                ax.set_ylim(bottom=0.7)
                ax.set_ylabel("tasks (log scale)")
            ax.set_xlim(0, 1)
            if fb.any():
                ax.legend(frameon=False)
            style(ax)

        out.append(Plot(fid, title, caption, draw_5, data))
    out.append(_gold_vs_estimated_plot(skills, t.get("gold_workers")))
    out.append(_confusion_plot(t.get("gold_confusion"), manifest))
    return out


@dataclass(frozen=True)
class RankCurve:
    """The workers' label counts sorted in decreasing order (the label-count figure's curve), in rank bins.

    Attributes
    ----------
    edges : ndarray of int64, shape (K + 1,)
        Bin ``j`` holds the workers of ranks ``edges[j] + 1 … edges[j + 1]`` (rank 1: the most labels; ties in
        table order). ``K = W`` when ``W ≤ points``: one bin a worker.
    heights : dict of status → ndarray of float64, shape (K,)
        The largest label count among the bin's workers of that status; 0 where the bin has none.
    counts : dict of status → ndarray of int64, shape (K,)
        How many of the bin's workers have that status (they sum to the bin's width).
        Statuses, in both, in order of first appearance by rank (drawn in that order: later ones over earlier ones).
    order : ndarray of int64
        Table positions of the busiest ``min(W, 20)`` workers, in rank order (the figure's data table).
    """

    edges: np.ndarray
    heights: dict[str, np.ndarray]
    counts: dict[str, np.ndarray]
    order: np.ndarray

    def segments(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Step points ``(x, y)`` of one status: in bin ``j`` its workers as one run of ``counts[name][j]`` ranks,
        after the runs of the statuses before it, at ``heights[name][j]``; 0 between runs. A worker of rank ``r``
        spans ``x`` from ``r − ½`` to ``r + ½``, cut to ``[1, W]`` (as a step area through the points 1 … W)."""
        before = np.zeros(len(self.edges) - 1, dtype=np.int64)
        for other in self.counts:
            if other == name:
                break
            before += self.counts[other]
        start = self.edges[:-1] + before + 0.5
        x = np.clip(np.stack([start, start + self.counts[name]], axis=1).ravel(), 1.0, float(self.edges[-1]))
        y = np.stack([self.heights[name], np.zeros_like(self.heights[name])], axis=1).ravel()
        return x, y


def rank_curve(n_labels: np.ndarray, status: pd.Series | None, points: int = CURVE_POINTS) -> RankCurve:
    """The decreasing label-count curve of ``W`` workers in at most ``points`` rank bins (:class:`RankCurve`).

    Bins are equal runs of ranks, plus single-worker bins at rank 1 (the maximum), rank ``W`` (the minimum) and
    the last rank with a positive count, so the extremes are exact. In a bin each status gets a run of ranks as
    wide as its workers there, at their largest count: what one bar a worker shows where a pixel spans many
    workers (the figure is ~500 pixels wide; a bin is under a pixel at the default), the status colours mixed in
    their shares. ``W ≤ points``: one bin a worker, the per-worker bars themselves.
    Memory: O(points · statuses) kept; transients O(W) numbers (the sort), no Python object a worker.
    """
    n = np.asarray(n_labels, dtype=np.float64)
    w = len(n)
    order = np.argsort(-n, kind="stable")  # = sort_values(ascending=False, kind="stable"): ties in table order
    n_sorted = n[order]
    codes: np.ndarray
    if status is None:
        codes, names = np.zeros(w, dtype=np.int8), [(0, "ok")]
    else:
        c, uniques = pd.factorize(status, use_na_sentinel=False)
        codes = c[order]
        del c
        seen, first = np.unique(codes, return_index=True)
        names = [(int(k), str(uniques[k])) for k in seen[np.argsort(first)]]  # in order of first appearance by rank
    top = order[: min(w, 20)].copy()
    del order
    if w <= points:
        edges = np.arange(w + 1, dtype=np.int64)
    else:
        n_pos = int(np.count_nonzero(n_sorted > 0))
        base = np.rint(np.linspace(0, w, max(points, 6) - 3)).astype(np.int64)  # ≤ points bins with the extra
        extra = np.array([0, 1, w - 1, w, n_pos - 1, n_pos], dtype=np.int64)
        edges = np.unique(np.clip(np.concatenate([base, extra]), 0, w))
    starts = edges[:-1]
    heights, counts = {}, {}
    for k, name in names:
        mine = codes == k
        heights[name] = np.maximum.reduceat(np.where(mine, n_sorted, 0.0), starts) if w else np.zeros(0)
        counts[name] = np.add.reduceat(mine.astype(np.int64), starts) if w else np.zeros(0, dtype=np.int64)
    return RankCurve(edges=edges, heights=heights, counts=counts, order=top)


def _label_counts_plot(skills: pd.DataFrame) -> Plot:
    """``fig-worker-label-counts``: the workers' label counts, sorted, coloured by identifiability status, drawn
    from :func:`rank_curve` (at most :data:`CURVE_POINTS` bins: its memory does not grow with the workers)."""
    fid, title = "fig-worker-label-counts", "Labels per worker"
    n = skills["n_labels"].to_numpy(dtype=float)
    curve = rank_curve(n, skills.get("status"))
    w, total = len(n), float(n.sum())
    n_max, n_min, median = float(n.max()), float(n.min()), float(np.median(n))
    top = max(1, math.ceil(0.1 * w))
    busiest = float(np.partition(n, w - top)[w - top :].sum())  # the top-10 % set; integer sums are exact
    del n
    binned = len(curve.edges) - 1 < w
    caption = (
        f"Workers sorted by their number of labels ({w} workers, {int(total)} labels; median "
        f"{median:.0f}, max {n_max:.0f}). The busiest 10 % gave {busiest / max(total, 1):.0%} "
        "of the labels. Colour: identifiability status of the worker."
        + (
            f" Drawn in {len(curve.edges) - 1} bins of ranks (each bin's statuses side by side in their shares, at "
            "their busiest worker's count)."
            if binned
            else ""
        )
    )
    data = skills.iloc[curve.order][["worker", "n_labels"] + (["status"] if "status" in skills else [])]
    data = data.reset_index(drop=True)

    def draw(fig: Any, curve: RankCurve = curve, w: int = w, log: bool = n_max > 50 * max(n_min, 1)) -> None:
        ax = fig.add_subplot()
        for st in curve.heights:  # one filled step area per status (no patch per worker)
            if binned:
                x, y = curve.segments(st)
            else:  # one bar a worker, as drawn before the bins (the same image)
                x, y = np.arange(1.0, w + 1), np.where(curve.counts[st] > 0, curve.heights[st], 0.0)
            ax.fill_between(x, y, step="post" if binned else "mid", color=STATUS_COLOURS.get(st, GREY), label=st, lw=0)
        if log:
            ax.set_yscale("log")
        ax.set_xlabel("worker (sorted by label count)")
        ax.set_ylabel("labels")
        ax.set_xlim(0.5, w + 0.5)
        if len(curve.heights) > 1:
            ax.legend(frameon=False, fontsize=8)
        style(ax)

    return Plot(fid, title, caption, draw, data)


def _components_plot(comps: pd.DataFrame, skills: pd.DataFrame | None) -> Plot:
    fid, title = "fig-worker-components", "Worker-graph components"
    c = comps.sort_values("n_workers", ascending=False, kind="stable").reset_index(drop=True)
    cstat = c["status"].astype(str).to_numpy() if "status" in c else np.full(len(c), "ok")
    status_counts = pd.Series(cstat).value_counts()
    keep = [k for k in ("component", "status", "n_workers", "n_tasks", "n_labels", "bipartite") if k in c]
    data = c[keep].head(30)
    shown = c.head(30)
    partners = (
        skills["n_partners"].to_numpy(dtype=float)
        if skills is not None and "n_partners" in skills
        else np.array([], dtype=float)
    )
    partners = partners[np.isfinite(partners)]  # missing in a partitioned run without pairs (docs/scale.md)
    spectral = ""
    if "lambda_min_signless_unit" in c and c["lambda_min_signless_unit"].notna().any():
        lam = float(pd.to_numeric(c["lambda_min_signless_unit"], errors="coerce").iloc[0])
        if not math.isnan(lam):
            spectral = (
                f" Largest component: smallest eigenvalue of the signless Laplacian {lam:.3g} "
                "(> 0 proves it is not bipartite)."
            )
    degree = " Right: how many other workers each worker shares a task with (its degree in the graph)."
    if len(c) == 1:  # one bar says nothing: say it, and keep the degree histogram (that one says something)
        status = str(cstat[0])
        sentence = f"All {int(c['n_workers'].iloc[0])} workers form one connected component (status {status}): " + (
            "the worker graph is connected and not bipartite, so every skill is identifiable."
            if status == "ok"
            else _STATUS_MEANING.get(status, f"status {status}") + "."
        )
        if not partners.size:
            return Plot(fid, title, "Connected components of the worker interaction graph." + spectral, None, data,
                        sentence=sentence)  # fmt: skip
        caption = (
            "Connected components of the worker interaction graph (workers linked when they labelled a common "
            "task)." + spectral + " The histogram: how many other workers each worker shares a task with "
            f"(its degree in the graph; median {np.median(partners):.0f})."
        )

        def draw_degrees(fig: Any, partners: np.ndarray = partners) -> None:
            ax = fig.add_subplot()
            ax.hist(partners, bins=30, color=BLUE, edgecolor="white")
            ax.set_xlabel("partners per worker (graph degree)")
            ax.set_ylabel("workers")
            style(ax)

        return Plot(fid, title, caption, draw_degrees, data, sentence=sentence)
    caption = (
        f"Connected components of the worker interaction graph (workers linked when they labelled a common "
        f"task), largest first: {len(c)} component(s), "
        + ", ".join(f"{v} {k}" for k, v in status_counts.items())
        + ". Skills are identifiable only in non-bipartite components with at least two workers"
        + (" (largest 30 shown)." if len(c) > 30 else ".")
        + spectral
        + (degree if partners.size else "")
    )

    def draw_3(
        fig: Any, shown: pd.DataFrame = shown, cstat: np.ndarray = cstat[:30], partners: np.ndarray = partners
    ) -> None:
        axes = fig.subplots(1, 2, width_ratios=[1, 1.3]) if partners.size else [fig.add_subplot()]
        ax = axes[0]
        labels = [str(v) for v in shown["component"]]
        colours = [STATUS_COLOURS.get(st, GREY) for st in cstat]
        ax.bar(labels, shown["n_workers"], color=colours, width=0.7)
        for st in dict.fromkeys(cstat):
            ax.bar([], [], color=STATUS_COLOURS.get(st, GREY), label=st)
        ax.set_xlabel("component id")
        ax.set_ylabel("workers")
        if shown["n_workers"].max() > 50 * max(shown["n_workers"].min(), 1):
            ax.set_yscale("log")
        if len(set(cstat)) > 1:
            ax.legend(frameon=False, fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        style(ax)
        if partners.size:
            ax = axes[1]
            ax.hist(partners, bins=30, color=BLUE, edgecolor="white")
            ax.set_xlabel("partners per worker (graph degree)")
            ax.set_ylabel("workers")
            style(ax)

    return Plot(fid, title, caption, draw_3, data)


def _gold_and_estimate(skills: pd.DataFrame | None, gold: pd.DataFrame | None) -> pd.DataFrame | None:
    """Per worker: the fitted accuracy next to the accuracy measured on gold (workers with gold labels)."""
    if skills is None or gold is None or gold.empty or "accuracy" not in skills:
        return None
    if {"accuracy", "n_labels"} & set(gold.columns) or gold["worker"].duplicated().any():
        est = skills[["worker", "accuracy", "n_labels"]].astype({"worker": str})  # not a per-worker gold table
        both = gold.astype({"worker": str}).merge(est, on="worker", how="inner")
    else:
        # the inner join on the ids' text (gold rows in their order, each with its skills row), found by an Arrow
        # hash lookup: a pandas merge on text keys held ~200 bytes a worker of Python objects at its peak
        at = pc.index_in(pa.array(gold["worker"].astype(str)), value_set=pa.array(skills["worker"].astype(str)))
        pos = pc.fill_null(at, -1).to_numpy()
        hit = pos >= 0
        both = gold.loc[hit].astype({"worker": str}).reset_index(drop=True)
        both["accuracy"] = skills["accuracy"].to_numpy()[pos[hit]]
        both["n_labels"] = skills["n_labels"].to_numpy()[pos[hit]]
    both = both.rename(columns={"accuracy": "estimated_accuracy"})
    both = both[both["estimated_accuracy"].notna()].copy()
    both["difference"] = both["estimated_accuracy"] - both["gold_accuracy"]
    return both


def _gold_vs_estimated_plot(skills: pd.DataFrame | None, gold: pd.DataFrame | None) -> Plot:
    fid, title = "fig-gold-vs-estimated", "Estimated vs gold-measured worker accuracy"
    both = _gold_and_estimate(skills, gold)
    if both is None or both.empty:
        why = "no gold labels in this run (a truth: table in the spec measures each worker on gold)"
        return Plot(fid, title, f"Needs gold labels: {why}.", note=f"nothing to plot: {why}")
    w = both["n_gold_labels"].to_numpy(dtype=float)
    diff = both["difference"].to_numpy(dtype=float)
    mad = float(np.average(np.abs(diff), weights=w))
    r = float(np.corrcoef(both["estimated_accuracy"], both["gold_accuracy"])[0, 1]) if len(both) > 2 else float("nan")
    caption = (
        f"Each dot is a worker with gold labels ({len(both)} workers, dot area ∝ its gold labels): the accuracy the "
        f"model estimated (x) against the share of its labels that match gold (y); on the diagonal they agree. "
        f"Mean |estimated − gold| weighted by gold labels: {mad:.3f}"
        + (f"; correlation {r:.2f}" if math.isfinite(r) else "")
        + (
            f"; the model {'over' if np.average(diff, weights=w) > 0 else 'under'}estimates on average."
            if len(w)
            else "."
        )
    )
    data = both.sort_values("n_gold_labels", ascending=False)[
        ["worker", "n_gold_labels", "gold_accuracy", "estimated_accuracy"]
    ].head(20)

    def draw(fig: Any, both: pd.DataFrame = both) -> None:
        ax = fig.add_subplot()
        size = 12 + 120 * both["n_gold_labels"] / max(float(both["n_gold_labels"].max()), 1.0)
        ax.scatter(both["estimated_accuracy"], both["gold_accuracy"], s=size, color=BLUE, alpha=0.55, lw=0)
        ax.plot([0, 1], [0, 1], color=GREY, ls="--", lw=1)
        ax.set_xlim(-0.02, 1.02)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("estimated accuracy (model)")
        ax.set_ylabel("accuracy on gold")
        style(ax)

    return Plot(fid, title, caption, draw, data, size=(6.4, 4.0))


def _confusion_plot(conf: pd.DataFrame | None, manifest: Mapping[str, Any]) -> Plot:
    fid, title = "fig-confusion", "Confusion matrix against gold"
    if conf is None or conf.empty:
        why = "no gold labels in this run (a truth: table in the spec)"
        return Plot(fid, title, f"Needs gold labels: {why}.", note=f"nothing to plot: {why}")
    grid = conf.pivot(index="true_label", columns="predicted_label", values="n_tasks").fillna(0).astype(int)
    n = int(grid.to_numpy().sum())
    right = int(np.trace(grid.reindex(index=grid.columns, fill_value=0).to_numpy())) if n else 0
    recall = {str(k): grid.loc[k, k] / max(grid.loc[k].sum(), 1) for k in grid.index if k in grid.columns}
    caption = (
        f"Gold label (rows) against the consensus label (columns) on {n} gold tasks: {right} on the diagonal "
        f"(accuracy {right / max(n, 1):.4f}). Share of each gold class recovered: "
        + ", ".join(f"{k}: {v:.1%}" for k, v in recall.items())
        + "."
    )
    data = grid.reset_index().rename(columns={"true_label": "gold label"})
    data.columns = [str(c) for c in data.columns]

    def draw(fig: Any, grid: pd.DataFrame = grid) -> None:
        ax = fig.add_subplot()
        values = grid.to_numpy(dtype=float)
        ax.imshow(values, cmap="Blues")
        for (i, j), v in np.ndenumerate(values):
            colour = "white" if v > 0.6 * values.max() else "black"
            ax.text(j, i, f"{int(v)}", ha="center", va="center", color=colour, fontsize=10)
        ax.set_xticks(range(len(grid.columns)), [str(c) for c in grid.columns])
        ax.set_yticks(range(len(grid.index)), [str(c) for c in grid.index])
        ax.set_xlabel("consensus label")
        ax.set_ylabel("gold label")

    side = min(2.6 + 0.45 * len(grid), 7.0)
    return Plot(fid, title, caption, draw, data, size=(side + 1.2, side), margins={"left": 0.2, "bottom": 0.18})


def _worker_table(df: pd.DataFrame) -> pd.DataFrame:
    cols = [c for c in ("worker", "n_labels", "accuracy", "n_gold_labels", "gold_accuracy") if c in df]
    out = df[cols].dropna(axis=1, how="all").reset_index(drop=True)
    return out.rename(columns=_SHOWN)


# column headers of the "What to act on" tables (words wrap in a narrow card; the table names stay in the data)
_SHOWN = {
    "n_labels": "labels",
    "accuracy": "estimated accuracy",
    "estimated_accuracy": "estimated accuracy",
    "n_gold_labels": "gold labels",
    "gold_accuracy": "accuracy on gold",
    "difference": "estimated − gold",
    "majority_labels": "majority label",
    "majority_share": "majority share",
}


def _best_and_worst(skills: pd.DataFrame, k: int) -> tuple[tuple[pd.DataFrame, pd.DataFrame], int, bool]:
    """The ``k`` best and ``k`` worst workers with an accuracy, their rows only (ids as text), and the pool.

    The pool: the workers with an accuracy and at least :data:`MIN_LABELS` labels when there are ``2k`` of them,
    else every worker with an accuracy. The order is the table's sorted by accuracy, then labels, both decreasing,
    ties in table order: the best are its first ``k`` rows, the worst its last ``k`` reversed. Selected on the two
    number columns (a partition, then a sort of the rows tied at the threshold), so only the ``2k`` rows chosen
    are copied: O(W) numbers, no Python object a worker.

    Returns
    -------
    (best, worst), pool size, whether the pool is the busy workers
    """
    acc = skills["accuracy"].to_numpy(dtype=np.float64, na_value=np.nan)
    has = ~np.isnan(acc)
    n_lab = skills["n_labels"].to_numpy(dtype=np.float64) if "n_labels" in skills else np.zeros(len(acc))
    busy_pool = has & (n_lab >= MIN_LABELS)
    busy = "n_labels" in skills and int(busy_pool.sum()) >= 2 * k
    pool = np.flatnonzero(busy_pool if busy else has)
    del busy_pool, has
    take = min(k, len(pool))
    a = acc[pool]
    hi = np.partition(a, len(a) - take)[len(a) - take]  # the k-th largest accuracy: ties at it are sorted below
    lo = np.partition(a, take - 1)[take - 1]  # the k-th smallest
    cand = pool[a >= hi]
    best = cand[np.lexsort((cand, -n_lab[cand], -acc[cand]))[:take]]
    cand = pool[a <= lo]
    worst = cand[np.lexsort((-cand, n_lab[cand], acc[cand]))[:take]]
    rows = [skills.iloc[r].astype({"worker": str}).reset_index(drop=True) for r in (best, worst)]
    return (rows[0], rows[1]), len(pool), busy


def _with_gold(rows: pd.DataFrame, gold: pd.DataFrame | None) -> pd.DataFrame:
    """``rows`` (a few workers, ids as text) with their gold measures (a left join on the text of the id), reading
    only the gold rows of those workers."""
    if gold is None or gold.empty:
        return rows
    ids, wanted = gold["worker"], set(rows["worker"])
    if ids.dtype == object:
        text = pd.api.types.infer_dtype(ids, skipna=False) == "string"
    else:
        text = pd.api.types.is_string_dtype(ids) and not isinstance(ids.dtype, pd.CategoricalDtype)
    mine = ids.isin(wanted) if text else ids.astype(str).isin(wanted)  # ids not stored as text: their text
    return rows.merge(gold[mine.to_numpy()].astype({"worker": str}), on="worker", how="left")


def skills_actions(t: Mapping[str, pd.DataFrame], manifest: Mapping[str, Any]) -> list[Action]:
    """What a person acts on after a skills run: who to trust or coach, what to re-label, what the model changed."""
    skills, consensus, gold = t.get("skills"), t.get("consensus"), t.get("gold_workers")
    method = str(manifest.get("method") or "")
    out: list[Action] = _fit_actions(manifest)

    # best and worst workers by name
    if skills is not None and not skills.empty and "accuracy" in skills and skills["accuracy"].notna().any():
        (best, worst), n_pool, busy = _best_and_worst(skills, TOP)
        best, worst = _with_gold(best, gold), _with_gold(worst, gold)
        which = f"the {n_pool} workers with at least {MIN_LABELS} labels" if busy else f"all {n_pool} workers"
        meaning = (
            "agreement with the majority vote"
            if method == "mv"
            else f"the accuracy the model ({method or 'fit'}) estimated"
        )
        out.append(
            Action(
                "act-best-workers",
                "Best workers",
                f"Ranked by {meaning}, among {which}: {', '.join(best['worker'])}. Route the hard tasks to them.",
                _worker_table(best),
            )
        )
        out.append(
            Action(
                "act-worst-workers",
                "Worst workers",
                f"Lowest by {meaning}, among {which}: {', '.join(worst['worker'])}. Review their labels, coach "
                "or stop assigning them.",
                _worker_table(worst),
            )
        )
    # lowest-confidence tasks
    if consensus is not None and not consensus.empty and "confidence" in consensus:
        conf = pd.to_numeric(consensus["confidence"], errors="coerce")
        low = consensus.assign(confidence=conf).sort_values(["confidence", "n_labels", "task"], kind="stable")
        cols = [c for c in ("task", "label", "confidence", "n_labels", "fallback") if c in low]
        n_low = int((conf < LOW_CONFIDENCE).sum())
        out.append(
            Action(
                "act-relabel",
                "Tasks to send for re-labelling",
                f"{n_low} of {len(consensus)} tasks have a consensus confidence below {LOW_CONFIDENCE}; the "
                f"{min(RELABEL, len(low))} least certain are below. More labels on them change the most.",
                low[cols].head(RELABEL).reset_index(drop=True),
            )
        )
    # changes against majority vote
    review = manifest.get("review") or {}
    if "n_changed_vs_majority" in review:
        n = int(review["n_changed_vs_majority"])
        total = int(review.get("n_tasks") or (len(consensus) if consensus is not None else 0))
        examples = pd.DataFrame(review.get("changed_vs_majority") or [])
        if method == "mv":
            text = "This run is the majority vote: it changes no label against itself (ties are broken, not changed)."
        else:
            text = (
                f"The model changed {n} of {total} task labels ({n / max(total, 1):.1%}) against the majority vote: "
                "the workers it trusts more outvoted the majority there."
                + (" The clearest majorities it overruled:" if n else "")
            )
        shown = examples.rename(columns=_SHOWN) if n else None
        out.append(Action("act-majority", "Labels changed against majority vote", text, shown))
    # estimated vs gold-measured accuracy
    both = _gold_and_estimate(skills, gold)
    if both is None or both.empty:
        out.append(
            Action(
                "act-gold",
                "Estimated vs gold-measured accuracy",
                "No gold labels in this run: add a truth: table (task, label) to the spec to measure workers on gold.",
            )
        )
    else:
        enough = both[both["n_gold_labels"] >= MIN_LABELS]
        pool = enough if len(enough) >= TOP else both
        far = pool.reindex(pool["difference"].abs().sort_values(ascending=False).index).head(TOP)
        w = both["n_gold_labels"].to_numpy(dtype=float)
        mad = float(np.average(np.abs(both["difference"]), weights=w))
        out.append(
            Action(
                "act-gold",
                "Estimated vs gold-measured accuracy",
                f"On {len(both)} workers with gold labels the estimate is off by {mad:.3f} on average (weighted by "
                f"gold labels). Largest gaps: {', '.join(far['worker'])}; check their gold answers before "
                "trusting or dropping them.",
                far[["worker", "n_labels", "n_gold_labels", "gold_accuracy", "estimated_accuracy", "difference"]]
                .rename(columns=_SHOWN)
                .reset_index(drop=True),
            )
        )
    return out


def _fit_actions(manifest: Mapping[str, Any]) -> list[Action]:
    """The fit itself: which model ``method: auto`` chose and every candidate's held-out score; a fit that
    stopped at its iteration cap (``fit_status`` ``not_converged``)."""
    fit = manifest.get("fit") or {}
    out: list[Action] = []
    auto = fit.get("auto") if isinstance(fit, Mapping) else None
    if isinstance(auto, Mapping) and auto.get("candidates"):
        table = pd.DataFrame(list(auto["candidates"]))
        keep = [
            c
            for c in (
                "candidate",
                "mean_log_lik",
                "std_error",
                "diff_vs_choice",
                "diff_std_error",
                "converged",
                "chosen",
            )
            if c in table
        ]
        text = (
            f"method auto chose {auto.get('choice')}: it predicts held-out labels best (mean log-likelihood per "
            f"held-out label over {auto.get('folds')} folds, {int(table['n_heldout'].iloc[0])} labels; a difference "
            "smaller than about twice its standard error is noise)."
        )
        if auto.get("note"):
            text += f" Note: {auto['note']}."
        out.append(Action("act-auto-choice", "Model chosen by the data", text, table[keep]))
    gold = fit.get("auto_gold") if isinstance(fit, Mapping) else None
    if isinstance(gold, Mapping) and gold.get("candidates"):
        table = pd.DataFrame(list(gold["candidates"]))
        cols = ["candidate", "n_gold", "n_right", "accuracy", "wins", "losses", "p_value", "converged", "chosen"]
        text = (
            f"With the gold answers in the fit, method auto chose {gold.get('choice')} by the "
            f"{'gold answers' if gold.get('rule') == 'gold' else 'held-out likelihood (the gold did not overrule it)'}"
            f": {gold.get('note')}. Each candidate is scored on the gold tasks by its fit without gold; `wins` / "
            f"`losses` are the gold tasks only it / only the likelihood pick gets right, `p_value` the one-sided exact "
            f"sign test; a switch needs p ≤ {float(gold.get('threshold', 0.0)):.3g}. The accuracy this run reports "
            "is cross-fitted over the whole choice."
        )
        if fit.get("gold_fold_choices"):
            text += " Choice in each fold of the cross-fitted score: " + ", ".join(map(str, fit["gold_fold_choices"]))
            text += "."
        shown = table[[c for c in cols if c in table]]
        out.append(Action("act-auto-gold", "Model chosen by the gold answers", text, shown))
    if fit.get("fit_status") == "not_converged":
        out.append(
            Action(
                "act-not-converged",
                "Fit stopped at its iteration cap",
                f"The {fit.get('method')} fit stopped after {fit.get('iterations')} iterations without converging: "
                "its labels may change with more iterations. Raise ds_max_iter (or max_iter for pgd) and rerun.",
            )
        )
    return out
