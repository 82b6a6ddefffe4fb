"""The run report: one self-contained static ``report.html`` per run (no server, no external URLs).

:func:`render_report` turns a run's output tables and its manifest into an HTML page with

* a header: run id, pipeline, job, method, start time, status, per-step timings, input fingerprints
  (path, SHA-256, rows), output row counts and relative links to each Parquet file and the manifest;
* the job's figures, each a ``<figure>`` with a stable ``id`` (see :data:`FIGURE_IDS`), a PNG embedded
  as a ``data:`` URI, ``alt`` text and a caption saying what is plotted and how it was computed;
* previews of every output table.

Figures need matplotlib (``pip install 'crowdflow[report]'``), drawn with the Agg canvas through the
object-oriented API (no pyplot, no global backend state). Without matplotlib the page is still written:
every figure keeps its ``id`` and caption, shows the numbers it would plot as a small table, and says
how to get the plots.

This module is pure library code: it imports neither Prefect nor Great Expectations.
"""

from __future__ import annotations

import base64
import html
import io
import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.sparse.linalg import splu

from crowdflow import __version__
from crowdflow.io import run_date_of

log = logging.getLogger(__name__)

REPORT_FILE = "report.html"
INSTALL_HINT = "pip install 'crowdflow[report]'"

#: Figure ids per job, in page order. Every id is present in the page of a run of that job (with a note
#: instead of an image when the run has nothing to plot for it, or matplotlib is missing).
FIGURE_IDS: dict[str, tuple[str, ...]] = {
    "skills": (
        "fig-skill-distribution",
        "fig-worker-label-counts",
        "fig-worker-components",
        "fig-identifiability",
        "fig-consensus-confidence",
    ),
    "ranking": ("fig-ranking-intervals", "fig-outlier-path", "fig-annotator-outliers"),
    "personal_rankings": ("fig-personal-heatmap", "fig-item-score-spread"),
    "personal_models": ("fig-residual-histogram", "fig-convergence"),
    "assignment": ("fig-worker-load", "fig-task-load"),
    "next_batch": ("fig-worker-load", "fig-task-load", "fig-candidate-scores"),
}

_STATUS_COLOURS = {
    "ok": "#2a9d8f",
    "bipartite_component": "#e76f51",
    "isolated": "#9e9e9e",
    "too_few_labels": "#e9c46a",
}
_BLUE, _ORANGE, _GREY, _RED = "#3a6ea5", "#f4a261", "#9e9e9e", "#c0392b"


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
    """

    id: str
    title: str
    caption: str
    png: bytes | None = None
    note: str | None = None
    data: pd.DataFrame | None = None

    @property
    def alt(self) -> str:
        return f"{self.title} ({self.id})"

    def data_uri(self) -> str | None:
        if self.png is None:
            return None
        return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")


@dataclass
class RunReport:
    """The rendered report: the HTML page and the figures it embeds."""

    html: str
    figures: list[ReportFigure]
    has_plots: bool
    seconds: float
    summary: pd.DataFrame = field(default_factory=pd.DataFrame)

    def figure(self, fig_id: str) -> ReportFigure:
        for f in self.figures:
            if f.id == fig_id:
                return f
        raise KeyError(fig_id)


# --------------------------------------------------------------------------------------------------
# matplotlib (optional)


def _matplotlib() -> Any | None:
    """``matplotlib.figure.Figure`` when matplotlib is installed, else None."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    return Figure


_MARGINS = {"left": 0.11, "right": 0.97, "bottom": 0.15, "top": 0.95, "wspace": 0.32}


def _png(
    figure_cls: Any, draw: Callable[[Any], None], size: tuple[float, float], margins: Mapping[str, float] | None = None
) -> bytes:
    # Fixed margins instead of a layout engine: constrained/tight layout doubles the drawing time.
    fig = figure_cls(figsize=size, dpi=100)
    fig.subplots_adjust(**{**_MARGINS, **(margins or {})})
    draw(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def _style(ax: Any) -> None:
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


@dataclass
class _Plot:
    """What a figure builder returns: text, the data table and a draw callback (None: nothing to plot)."""

    id: str
    title: str
    caption: str
    draw: Callable[[Any], None] | None = None
    data: pd.DataFrame | None = None
    note: str | None = None
    size: tuple[float, float] = (6.4, 3.6)
    margins: dict[str, float] | None = None


# --------------------------------------------------------------------------------------------------
# skills


def _skills_figures(t: Mapping[str, pd.DataFrame], manifest: Mapping[str, Any]) -> list[_Plot]:
    skills = t.get("skills")
    consensus = t.get("consensus")
    comps = t.get("components")
    out: list[_Plot] = []

    # skill distribution
    fid, title = "fig-skill-distribution", "Worker skill distribution"
    if skills is None or skills.empty:
        out.append(_Plot(fid, title, "No skills table in this run.", note="nothing to plot"))
    else:
        col = "skill" if skills["skill"].notna().any() else "accuracy"
        vals = pd.to_numeric(skills[col], errors="coerce").dropna().to_numpy(dtype=float)
        n_missing = len(skills) - len(vals)
        if vals.size == 0:
            out.append(_Plot(fid, title, "No worker has an estimated skill or accuracy.", note="nothing to plot"))
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
                ax.hist(vals, bins=40, range=(lo, hi), color=_BLUE, edgecolor="white")
                if col == "skill":
                    ax.axvline(0.0, color=_GREY, ls="--", lw=1)
                ax.axvline(float(np.median(vals)), color=_ORANGE, lw=1.5, label="median")
                ax.set_xlabel(f"worker {col}")
                ax.set_ylabel("workers")
                ax.legend(frameon=False)
                _style(ax)

            out.append(_Plot(fid, title, caption, draw_1, data, margins={"bottom": 0.27}))

    # per-worker label counts
    fid, title = "fig-worker-label-counts", "Labels per worker"
    if skills is None or skills.empty or "n_labels" not in skills:
        out.append(_Plot(fid, title, "No per-worker label counts in this run.", note="nothing to plot"))
    else:
        s = skills.sort_values("n_labels", ascending=False, kind="stable").reset_index(drop=True)
        n = s["n_labels"].to_numpy(dtype=float)
        total = n.sum()
        top = max(1, math.ceil(0.1 * len(n)))
        caption = (
            f"Workers sorted by their number of labels ({len(n)} workers, {int(total)} labels; median "
            f"{np.median(n):.0f}, max {n.max():.0f}). The busiest 10 % gave {n[:top].sum() / max(total, 1):.0%} "
            "of the labels. Colour: identifiability status of the worker."
        )
        status = s["status"].astype(str).to_numpy() if "status" in s else np.full(len(s), "ok")
        data = s[["worker", "n_labels"] + (["status"] if "status" in s else [])].head(20)

        def draw_2(fig: Any, n: np.ndarray = n, status: np.ndarray = status) -> None:
            ax = fig.add_subplot()
            x = np.arange(1, len(n) + 1)
            for st in dict.fromkeys(status):  # one filled step area per status (fast: no patch per worker)
                m = status == st
                ax.fill_between(
                    x, np.where(m, n, 0.0), step="mid", color=_STATUS_COLOURS.get(st, _GREY), label=st, lw=0
                )
            if n.max() > 50 * max(n.min(), 1):
                ax.set_yscale("log")
            ax.set_xlabel("worker (sorted by label count)")
            ax.set_ylabel("labels")
            ax.set_xlim(0.5, len(n) + 0.5)
            if len(set(status)) > 1:
                ax.legend(frameon=False, fontsize=8)
            _style(ax)

        out.append(_Plot(fid, title, caption, draw_2, data))

    # worker-graph components
    fid, title = "fig-worker-components", "Worker-graph components"
    if comps is None or comps.empty:
        out.append(_Plot(fid, title, "No component table in this run.", note="nothing to plot"))
    else:
        c = comps.sort_values("n_workers", ascending=False, kind="stable").reset_index(drop=True)
        cstat = c["status"].astype(str).to_numpy() if "status" in c else np.full(len(c), "ok")
        status_counts = pd.Series(cstat).value_counts()
        caption = (
            f"Connected components of the worker interaction graph (workers linked when they labelled a common "
            f"task), largest first: {len(c)} component(s), "
            + ", ".join(f"{v} {k}" for k, v in status_counts.items())
            + ". Skills are identifiable only in non-bipartite components with at least two workers"
            + (" (largest 30 shown)." if len(c) > 30 else ".")
        )
        keep = [k for k in ("component", "status", "n_workers", "n_tasks", "n_labels", "bipartite") if k in c]
        data = c[keep].head(30)
        shown = c.head(30)

        partners = (
            skills["n_partners"].to_numpy(dtype=float)
            if skills is not None and "n_partners" in skills
            else np.array([], dtype=float)
        )
        if "lambda_min_signless_unit" in c and c["lambda_min_signless_unit"].notna().any():
            lam = float(pd.to_numeric(c["lambda_min_signless_unit"], errors="coerce").iloc[0])
            if not math.isnan(lam):
                caption += (
                    f" Largest component: smallest eigenvalue of the signless Laplacian {lam:.3g} "
                    "(> 0 proves it is not bipartite)."
                )
        if partners.size:
            caption += " Right: how many other workers each worker shares a task with (its degree in the graph)."

        def draw_3(
            fig: Any, shown: pd.DataFrame = shown, cstat: np.ndarray = cstat[:30], partners: np.ndarray = partners
        ) -> None:
            axes = fig.subplots(1, 2, width_ratios=[1, 1.3]) if partners.size else [fig.add_subplot()]
            ax = axes[0]
            labels = [str(v) for v in shown["component"]]
            colours = [_STATUS_COLOURS.get(st, _GREY) for st in cstat]
            ax.bar(labels, shown["n_workers"], color=colours, width=0.7)
            for st in dict.fromkeys(cstat):
                ax.bar([], [], color=_STATUS_COLOURS.get(st, _GREY), label=st)
            ax.set_xlabel("component id")
            ax.set_ylabel("workers")
            if shown["n_workers"].max() > 50 * max(shown["n_workers"].min(), 1):
                ax.set_yscale("log")
            if len(set(cstat)) > 1:
                ax.legend(frameon=False, fontsize=8)
            ax.tick_params(axis="x", labelsize=7)
            _style(ax)
            if partners.size:
                ax = axes[1]
                ax.hist(partners, bins=30, color=_BLUE, edgecolor="white")
                ax.set_xlabel("partners per worker (graph degree)")
                ax.set_ylabel("workers")
                _style(ax)

        out.append(_Plot(fid, title, caption, draw_3, data))

    # identifiability status counts
    fid, title = "fig-identifiability", "Identifiability status of workers"
    if skills is None or skills.empty or "status" not in skills:
        out.append(_Plot(fid, title, "No worker status in this run.", note="nothing to plot"))
    else:
        vc = skills["status"].astype(str).value_counts()
        data = vc.rename_axis("status").reset_index(name="workers")
        n_id = int(skills["identifiable"].sum()) if "identifiable" in skills else int(vc.get("ok", 0))
        caption = (
            f"Workers by identifiability status: {n_id} of {len(skills)} have an identifiable skill. "
            "`ok`: in a non-bipartite component; `bipartite_component`: the skills of that component are "
            "only determined up to a sign flip between its two sides; `isolated`: shares no task with anyone."
        )

        def draw_4(fig: Any, vc: pd.Series = vc) -> None:
            ax = fig.add_subplot()
            ax.barh(vc.index[::-1], vc.to_numpy()[::-1], color=[_STATUS_COLOURS.get(s, _GREY) for s in vc.index[::-1]])
            for y, v in enumerate(vc.to_numpy()[::-1]):
                ax.text(v, y, f" {v}", va="center", fontsize=9)
            ax.set_xlabel("workers")
            ax.spines[["top", "right"]].set_visible(False)

        out.append(_Plot(fid, title, caption, draw_4, data, size=(6.4, 2.4), margins={"left": 0.27, "bottom": 0.2}))

    # consensus confidence
    fid, title = "fig-consensus-confidence", "Consensus confidence"
    if consensus is None or consensus.empty:
        out.append(_Plot(fid, title, "No consensus table in this run.", note="nothing to plot"))
    else:
        conf = pd.to_numeric(consensus["confidence"], errors="coerce").to_numpy(dtype=float)
        fb = consensus["fallback"].to_numpy(dtype=bool) if "fallback" in consensus else np.zeros(len(conf), bool)
        ok = np.isfinite(conf)
        method = str(manifest.get("method") or "")
        meaning = "the winning vote share" if method == "mv" else "the posterior probability of the chosen label"
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
            caption += f" Accuracy on {metrics.get('n_gold')} gold tasks: {metrics['accuracy']:.4f}."

        def draw_5(fig: Any, conf: np.ndarray = conf[ok], fb: np.ndarray = fb[ok]) -> None:
            ax = fig.add_subplot()
            parts = [conf[~fb]] + ([conf[fb]] if fb.any() else [])
            colours = [_BLUE] + ([_ORANGE] if fb.any() else [])
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
            _style(ax)

        out.append(_Plot(fid, title, caption, draw_5, data))
    return out


# --------------------------------------------------------------------------------------------------
# ranking


def score_intervals(
    ranking: pd.DataFrame, rows: pd.DataFrame | None, items: list[str] | None = None, z: float = 1.96
) -> pd.DataFrame:
    """Normal-theory least-squares standard errors and intervals of the (centred) item scores.

    For the comparisons kept in the fit (``is_outlier`` False when that column exists), with weights
    ``w`` and residuals ``r = outcome − (score_a − score_b)``, the weighted least-squares score of a
    component with ``n`` items has covariance ``σ̂² L⁺``, where ``L = Σ w (e_a − e_b)(e_a − e_b)ᵀ`` is
    the weighted graph Laplacian of the component and ``σ̂² = Σ w r² / (m − n + 1)``. The interval is
    ``score ± z·σ̂·√(L⁺)_ii``. It assumes independent, equal-variance noise and ignores the uncertainty of
    the outlier selection, so it is a lower bound on the real uncertainty of a robust fit.

    ``(L⁺)_ii`` is computed from one sparse LU factorisation of the grounded Laplacian per component:
    ``x = L⁺ e_i`` solves ``L x = e_i − 1/n`` with ``Σ x = 0``.

    Parameters
    ----------
    ranking : DataFrame
        ``item, score, component``.
    rows : DataFrame or None
        Comparison rows with ``item_a, item_b, residual`` (optional ``weight``, ``is_outlier``): the
        ``outliers`` or ``residuals`` table of a ranking run. None gives NaN intervals.
    items : list of str, optional
        Only these items (default: all).
    z : float
        Normal quantile (1.96: 95 %).

    Returns
    -------
    DataFrame
        ``item, score, component, se, lower, upper, sigma, dof``.
    """
    r = ranking if items is None else ranking[ranking["item"].astype(str).isin(items)]
    res = r[["item", "score", "component"]].copy()
    res["item"] = res["item"].astype(str)
    res["se"] = np.nan
    res["sigma"] = np.nan
    res["dof"] = 0
    if rows is None or rows.empty or "residual" not in rows:
        res["lower"] = np.nan
        res["upper"] = np.nan
        return res.reset_index(drop=True)
    keep = ~rows["is_outlier"].to_numpy(dtype=bool) if "is_outlier" in rows else np.ones(len(rows), bool)
    kept = rows[keep]
    comp_of = dict(zip(ranking["item"].astype(str), ranking["component"].astype(int), strict=True))
    a = kept["item_a"].astype(str).to_numpy()
    b = kept["item_b"].astype(str).to_numpy()
    w = kept["weight"].to_numpy(dtype=float) if "weight" in kept else np.ones(len(kept))
    resid = kept["residual"].to_numpy(dtype=float)
    row_comp = np.array([comp_of.get(x, -1) for x in a], dtype=np.int64)
    for comp, idx in res.groupby("component").groups.items():
        members = ranking.loc[ranking["component"] == comp, "item"].astype(str).to_numpy()
        n = len(members)
        sel = row_comp == comp
        m = int(sel.sum())
        dof = m - n + 1
        if n < 2 or dof <= 0:
            continue
        pos = {it: k for k, it in enumerate(members)}
        ia = np.array([pos[x] for x in a[sel]])
        ib = np.array([pos[x] for x in b[sel]])
        ws = w[sel]
        sigma2 = float(np.sum(ws * resid[sel] ** 2) / dof)
        rows_idx = np.concatenate([ia, ib, ia, ib])
        cols_idx = np.concatenate([ia, ib, ib, ia])
        vals = np.concatenate([ws, ws, -ws, -ws])
        L = sp.csc_matrix((vals, (rows_idx, cols_idx)), shape=(n, n))
        grounded = L[1:, 1:].tocsc()
        try:
            lu = splu(grounded)
        except RuntimeError:  # singular: the kept rows leave the component disconnected
            continue
        wanted = res.loc[idx, "item"].to_numpy()
        rhs = np.full((n, len(wanted)), -1.0 / n)
        for j, it in enumerate(wanted):
            rhs[pos[it], j] += 1.0
        sol = np.zeros((n, len(wanted)))
        sol[1:] = lu.solve(rhs[1:])
        sol -= sol.mean(axis=0, keepdims=True)
        diag = np.array([sol[pos[it], j] for j, it in enumerate(wanted)])
        res.loc[idx, "se"] = np.sqrt(sigma2 * np.maximum(diag, 0.0))
        res.loc[idx, "sigma"] = math.sqrt(sigma2)
        res.loc[idx, "dof"] = dof
    res["lower"] = res["score"] - z * res["se"]
    res["upper"] = res["score"] + z * res["se"]
    return res.reset_index(drop=True)


def _ranking_figures(t: Mapping[str, pd.DataFrame], manifest: Mapping[str, Any]) -> list[_Plot]:
    ranking = t.get("ranking")
    outliers = t.get("outliers")
    rows = outliers if outliers is not None else t.get("residuals")
    path = t.get("path")
    out: list[_Plot] = []

    fid, title = "fig-ranking-intervals", "Ranking with score intervals"
    if ranking is None or ranking.empty:
        out.append(_Plot(fid, title, "No ranking table in this run.", note="nothing to plot"))
    else:
        sizes = ranking["component"].value_counts()
        main = int(sizes.index[0])
        comp = ranking[ranking["component"] == main].sort_values("score", ascending=False, kind="stable")
        if len(comp) > 40:
            shown = pd.concat([comp.head(20), comp.tail(20)])
            which = f"the top 20 and bottom 20 of its {len(comp)} items"
        else:
            shown = comp
            which = f"all {len(comp)} items"
        iv = score_intervals(ranking, rows, list(shown["item"].astype(str)))
        iv = iv.set_index("item").loc[list(shown["item"].astype(str))].reset_index()
        has_iv = bool(iv["se"].notna().any())
        caption = (
            f"Scores of the largest connected component of the comparison graph (component {main}; {which}"
            + (
                f"; {len(sizes)} components in all, scores are not comparable across components"
                if len(sizes) > 1
                else ""
            )
            + "). "
        )
        if has_iv:
            caption += (
                f"Bars: 95 % normal-theory intervals score ± 1.96·σ̂·√(L⁺)ᵢᵢ of the weighted least-squares fit on "
                f"the {'inlier ' if outliers is not None else ''}comparisons, with L the comparison-graph Laplacian "
                f"and σ̂ = {float(iv['sigma'].dropna().iloc[0]):.3g} the residual standard deviation "
                f"({int(iv['dof'].max())} degrees of freedom). They assume independent equal-variance noise and "
                "ignore the uncertainty of the outlier selection, so they understate it."
            )
        else:
            caption += "No intervals: the run has no per-comparison residuals (or no residual degrees of freedom)."
        data = iv[["item", "score", "lower", "upper"]].copy()

        def draw_6(fig: Any, iv: pd.DataFrame = iv, has_iv: bool = has_iv) -> None:
            ax = fig.add_subplot()
            y = np.arange(len(iv))[::-1]
            if has_iv:
                ax.errorbar(
                    iv["score"],
                    y,
                    xerr=1.96 * iv["se"].fillna(0.0),
                    fmt="o",
                    color=_BLUE,
                    ecolor=_ORANGE,
                    elinewidth=2,
                    capsize=2,
                    ms=4,
                )
            else:
                ax.plot(iv["score"], y, "o", color=_BLUE)
            ax.set_yticks(y)
            ax.set_yticklabels([str(s)[:24] for s in iv["item"]], fontsize=7 if len(iv) > 25 else 8)
            ax.axvline(0.0, color=_GREY, lw=0.8, ls="--")
            ax.set_xlabel("score (centred in its component)")
            ax.grid(axis="x", alpha=0.3)
            ax.spines[["top", "right"]].set_visible(False)

        height = min(max(3.0, 0.16 * len(iv) + 1.0), 8.0)
        width = max(len(str(x)[:24]) for x in iv["item"])
        margins = {"left": min(0.4, 0.05 + 0.011 * width), "bottom": 0.6 / height, "top": 1 - 0.15 / height}
        out.append(_Plot(fid, title, caption, draw_6, data, size=(6.4, height), margins=margins))

    fid, title = "fig-outlier-path", "Outlier regularisation path"
    if outliers is None or outliers.empty or "entry_time" not in outliers:
        method = (manifest.get("spec") or {}).get("ranking", {}).get("outliers", "none")
        out.append(
            _Plot(
                fid,
                title,
                f"No outlier path in this run (ranking.outliers: {method}).",
                note="nothing to plot: outlier detection was off",
            )
        )
    else:
        o = outliers
        et = o["entry_time"].to_numpy(dtype=float)
        entered = np.isfinite(et)
        flagged = o["is_outlier"].to_numpy(dtype=bool)
        fit = manifest.get("fit") or {}
        t_stop = fit.get("t_stop")
        use_path = path is not None and not path.empty and path["t"].nunique() > 1
        caption = (
            f"Comparisons entering the robust path (LBI/HLASSO): {int(entered.sum())} of {len(o)} rows entered, "
            f"{int(flagged.sum())} are flagged as outliers at the stop"
            + (f" (t = {float(t_stop):.3g}, dashed)" if t_stop is not None else "")
            + ". "
            + (
                "Left: γ of each row along the path (path.parquet, the first 60 rows to enter). Right: "
                if use_path
                else ""
            )
            + "final γ (outlier magnitude) against the row's entry time (outliers.parquet); rows that enter early are "
            "the most inconsistent with the ranking."
        )
        data = (
            o.loc[entered, ["row_id", "item_a", "item_b", "entry_time", "gamma", "is_outlier"]]
            .sort_values("entry_time")
            .head(20)
        )

        def draw_7(fig: Any, o: pd.DataFrame = o, entered: np.ndarray = entered, flagged: np.ndarray = flagged) -> None:
            axes = fig.subplots(1, 2) if use_path else [None, fig.add_subplot()]
            if use_path:
                assert path is not None  # use_path implies a path table
                ax = axes[0]
                first = o.loc[entered].sort_values("entry_time")["row_id"].head(60)
                p = path[path["row_id"].isin(first)]
                ts = np.sort(path["t"].unique())
                for rid, g in p.groupby("row_id"):
                    gam = pd.Series(0.0, index=ts)
                    gam.loc[g["t"].to_numpy()] = g["gamma"].to_numpy()
                    ax.plot(ts, gam.to_numpy(), lw=0.9, alpha=0.8)
                if t_stop is not None:
                    ax.axvline(float(t_stop), color=_GREY, ls="--", lw=1)
                ax.set_xlabel("path time t")
                ax.set_ylabel("γ (outlier magnitude)")
                _style(ax)
            ax = axes[1]
            ax.scatter(
                et[entered & ~flagged], o["gamma"].to_numpy()[entered & ~flagged], s=8, color=_BLUE, label="kept"
            )
            ax.scatter(
                et[entered & flagged], o["gamma"].to_numpy()[entered & flagged], s=8, color=_RED, label="outlier"
            )
            if t_stop is not None:
                ax.axvline(float(t_stop), color=_GREY, ls="--", lw=1)
            ax.set_xlabel("entry time")
            ax.set_ylabel("final γ")
            ax.legend(frameon=False, fontsize=8)
            _style(ax)

        out.append(_Plot(fid, title, caption, draw_7, data, size=(7.2, 3.4)))

    fid, title = "fig-annotator-outliers", "Outlier rate per annotator"
    ann = t.get("annotators")
    if ann is None or ann.empty:
        out.append(_Plot(fid, title, "No per-annotator outlier counts in this run.", note="nothing to plot"))
    else:
        a = ann[ann["n_comparisons"] >= 5].sort_values(["outlier_rate", "n_comparisons"], ascending=False).head(20)
        caption = (
            f"The 20 annotators with the highest share of comparisons flagged as outliers (at least 5 comparisons; "
            f"{len(ann)} annotators in all, overall rate "
            f"{ann['n_outliers'].sum() / max(ann['n_comparisons'].sum(), 1):.1%}, dashed)."
        )
        overall = float(ann["n_outliers"].sum() / max(ann["n_comparisons"].sum(), 1))

        def draw_8(fig: Any, a: pd.DataFrame = a, overall: float = overall) -> None:
            ax = fig.add_subplot()
            ax.barh(a["annotator"].astype(str)[::-1], a["outlier_rate"][::-1], color=_ORANGE)
            ax.axvline(overall, color=_GREY, ls="--", lw=1)
            ax.set_xlabel("outlier rate")
            ax.tick_params(axis="y", labelsize=7)
            ax.spines[["top", "right"]].set_visible(False)

        width = max([len(str(x)) for x in a["annotator"]] or [4])
        out.append(
            _Plot(
                fid,
                title,
                caption,
                draw_8 if len(a) else None,
                a,
                note=None if len(a) else "no annotator with ≥ 5 comparisons",
                margins={"left": min(0.4, 0.06 + 0.011 * width)},
            )
        )
    return out


# --------------------------------------------------------------------------------------------------
# personal rankings / personal models


def _personal_rankings_figures(t: Mapping[str, pd.DataFrame], manifest: Mapping[str, Any]) -> list[_Plot]:
    pr = t.get("personal_rankings")
    out: list[_Plot] = []
    fid, title = "fig-personal-heatmap", "Per-user item scores"
    if pr is None or pr.empty:
        out.append(_Plot(fid, title, "No personal rankings in this run.", note="nothing to plot"))
        out.append(
            _Plot("fig-item-score-spread", "Item scores across users", "No personal rankings.", note="nothing to plot")
        )
        return out
    X = pr.pivot_table(index="user", columns="item", values="score", aggfunc="mean")
    item_order = X.mean(axis=0).sort_values(ascending=False).index
    X = X[item_order]
    users = X.index
    uf = t.get("user_factors")
    if uf is not None and "f0" in uf:
        order = uf.set_index(uf["user"].astype(str))["f0"].reindex(users.astype(str)).to_numpy()
        users = users[np.argsort(np.nan_to_num(order), kind="stable")]
    if len(users) > 60:
        users = users[np.linspace(0, len(users) - 1, 60).round().astype(int)]
    items = X.columns
    if len(items) > 60:
        items = items[np.linspace(0, len(items) - 1, 60).round().astype(int)]
    H = X.loc[users, items]
    caption = (
        f"Score of each item for each user ({X.shape[0]} users × {X.shape[1]} items"
        + (f"; {len(users)} users × {len(items)} items shown, evenly spaced" if H.shape != X.shape else "")
        + "). Items sorted by their mean score (best left); users sorted by their first latent factor, so users "
        "with similar taste are adjacent. Scores are on the ‖X‖∞ = 1 scale."
    )
    data = (
        pr.groupby("item")["score"].agg(["mean", "std", "min", "max"]).sort_values("mean", ascending=False).head(20)
    ).reset_index()

    def draw_9(fig: Any, H: pd.DataFrame = H) -> None:
        ax = fig.add_subplot()
        im = ax.imshow(H.to_numpy(dtype=float), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
        ax.set_xlabel("item (sorted by mean score)")
        ax.set_ylabel("user")
        if H.shape[1] <= 30:
            ax.set_xticks(range(H.shape[1]))
            ax.set_xticklabels([str(c)[:10] for c in H.columns], rotation=90, fontsize=7)
        else:
            ax.set_xticks([])
        ax.set_yticks([])
        fig.colorbar(im, ax=ax, label="score")

    out.append(_Plot(fid, title, caption, draw_9, data, size=(6.4, 4.2), margins={"left": 0.06, "bottom": 0.2}))

    fid, title = "fig-item-score-spread", "Item scores across users"
    top = X.columns[:30] if X.shape[1] <= 30 else X.columns[np.linspace(0, X.shape[1] - 1, 30).round().astype(int)]
    caption = (
        "Distribution over users of each item's personal score (box: quartiles, whiskers: 5–95 %). Wide boxes are "
        "items users disagree on; a global ranking would hide this."
        + (" 30 items shown, evenly spaced in mean-score order." if X.shape[1] > 30 else "")
    )
    B = X[top]

    def draw2(fig: Any, B: pd.DataFrame = B) -> None:
        ax = fig.add_subplot()
        cols = [B[c].dropna().to_numpy(dtype=float) for c in B.columns]
        ax.boxplot(cols, whis=(5, 95), showfliers=False, patch_artist=True, boxprops={"facecolor": "#cfe0f3"})
        ax.set_xticks(range(1, len(cols) + 1))
        ax.set_xticklabels([str(c)[:10] for c in B.columns], rotation=90, fontsize=7)
        ax.set_ylabel("personal score")
        _style(ax)

    out.append(_Plot(fid, title, caption, draw2, data, margins={"bottom": 0.27}))
    return out


def _personal_models_figures(t: Mapping[str, pd.DataFrame], manifest: Mapping[str, Any]) -> list[_Plot]:
    pm = t.get("personal_models")
    conv = t.get("convergence")
    out: list[_Plot] = []
    fid, title = "fig-residual-histogram", "Per-agent residuals"
    if pm is None or pm.empty or "residual" not in pm:
        out.append(_Plot(fid, title, "No per-agent residuals in this run.", note="nothing to plot"))
    else:
        r = pm["residual"].to_numpy(dtype=float)
        r = r[np.isfinite(r)]
        caption = (
            f"Histogram of each agent's residual norm ‖y − f(θᵢ)‖ on its own samples ({len(r)} agents; median "
            f"{np.median(r):.3g}, max {r.max():.3g}). Agents far right fit their data worst after smoothing over "
            "the agent graph."
            if len(r)
            else "No finite residuals."
        )
        counts, edges = np.histogram(r, bins=30) if len(r) else (np.array([]), np.array([0.0]))
        data = pd.DataFrame({"bin_from": edges[:-1], "bin_to": edges[1:], "agents": counts})
        data = data[data["agents"] > 0]

        def draw_10(fig: Any, r: np.ndarray = r) -> None:
            ax = fig.add_subplot()
            ax.hist(r, bins=30, color=_BLUE, edgecolor="white")
            ax.set_xlabel("residual norm")
            ax.set_ylabel("agents")
            _style(ax)

        out.append(
            _Plot(fid, title, caption, draw_10 if len(r) else None, data, note=None if len(r) else "nothing to plot")
        )

    fid, title = "fig-convergence", "Convergence trace"
    if conv is None or conv.empty or "round" not in conv:
        out.append(
            _Plot(fid, title, "No convergence trace in this run (a direct solve has none).", note="nothing to plot")
        )
    else:
        cols = [c for c in ("kkt_norm", "error_bound", "rel_error_bound") if c in conv]
        metrics = manifest.get("metrics") or {}
        caption = (
            f"Stopping quantities per checkpoint ({len(conv)} checkpoints, log scale): "
            + ", ".join(cols)
            + f". {'Converged' if metrics.get('converged') else 'Not converged'} after "
            f"{metrics.get('iterations', '?')} rounds; the certified error bound is what the stopping rule tests."
        )
        data = conv[["round", *cols]].tail(20)

        def draw_11(fig: Any, conv: pd.DataFrame = conv, cols: list[str] = cols) -> None:
            ax = fig.add_subplot()
            for c, colour in zip(cols, (_BLUE, _ORANGE, _RED), strict=False):
                v = conv[c].to_numpy(dtype=float)
                ok = np.isfinite(v) & (v > 0)
                ax.plot(conv["round"].to_numpy()[ok], v[ok], color=colour, label=c, lw=1.5)
            ax.set_yscale("log")
            ax.set_xlabel("round (edge activations)")
            ax.legend(frameon=False)
            _style(ax)

        out.append(_Plot(fid, title, caption, draw_11, data))
    return out


# --------------------------------------------------------------------------------------------------
# assignment / next batch


def _assignment_figures(t: Mapping[str, pd.DataFrame], manifest: Mapping[str, Any]) -> list[_Plot]:
    out: list[_Plot] = []
    wl, tl = t.get("worker_load"), t.get("task_load")
    metrics = manifest.get("metrics") or {}

    fid, title = "fig-worker-load", "Per-worker load"
    if wl is None or wl.empty:
        out.append(_Plot(fid, title, "No worker loads in this run.", note="nothing to plot"))
    else:
        w = wl.sort_values("n_assigned", ascending=False, kind="stable")
        shown = w.head(40)
        cap = pd.to_numeric(shown["capacity"], errors="coerce") if "capacity" in shown else None
        full = int((w["slack"] <= 0).sum()) if "slack" in w else 0
        caption = (
            f"Tasks assigned to each worker (bars) against the worker's capacity (ticks); {len(w)} workers, "
            f"{int(w['n_assigned'].sum())} assignments, {int((w['n_assigned'] > 0).sum())} workers used, "
            f"{full} at capacity"
            + ("; busiest 40 shown" if len(w) > 40 else "")
            + (
                f". Objective {metrics['objective']:.4g}" + (" (certified optimal)" if metrics.get("certified") else "")
                if "objective" in metrics
                else ""
            )
            + "."
        )
        data = shown[[c for c in ("worker", "n_assigned", "capacity", "slack") if c in shown]].head(20)

        def draw_12(fig: Any, shown: pd.DataFrame = shown, cap: Any = cap) -> None:
            ax = fig.add_subplot()
            x = np.arange(len(shown))
            ax.bar(x, shown["n_assigned"], color=_BLUE, label="assigned")
            if cap is not None and np.isfinite(cap.to_numpy(dtype=float)).any():
                ax.scatter(x, cap, marker="_", s=120, color=_RED, label="capacity", zorder=3)
            ax.set_xticks(x)
            ax.set_xticklabels([str(s)[:12] for s in shown["worker"]], rotation=90, fontsize=7)
            ax.set_ylabel("tasks")
            ax.legend(frameon=False, fontsize=8)
            _style(ax)

        out.append(_Plot(fid, title, caption, draw_12, data))

    fid, title = "fig-task-load", "Per-task load"
    if tl is None or tl.empty:
        out.append(_Plot(fid, title, "No task loads in this run.", note="nothing to plot"))
    else:
        vc = tl["n_assigned"].value_counts().sort_index()
        caps = pd.to_numeric(tl["cap"], errors="coerce") if "cap" in tl else pd.Series(dtype=float)
        caption = (
            f"Number of tasks by how many workers they were assigned to ({len(tl)} tasks, "
            f"{int((tl['n_assigned'] == 0).sum())} got none"
            + (f"; per-task cap {int(caps.max())}, dashed" if caps.notna().any() and caps.nunique() == 1 else "")
            + ")."
        )
        data = vc.rename_axis("workers_assigned").reset_index(name="tasks")

        def draw_13(fig: Any, vc: pd.Series = vc, caps: pd.Series = caps) -> None:
            ax = fig.add_subplot()
            ax.bar(vc.index.astype(int), vc.to_numpy(), color=_BLUE, width=0.8)
            if caps.notna().any() and caps.nunique() == 1:
                ax.axvline(float(caps.max()), color=_RED, ls="--", lw=1)
            ax.set_xlabel("workers assigned to the task")
            ax.set_ylabel("tasks")
            ax.xaxis.get_major_locator().set_params(integer=True)
            _style(ax)

        out.append(_Plot(fid, title, caption, draw_13, data, size=(6.4, 3.0)))

    if manifest.get("job") == "next_batch":
        fid, title = "fig-candidate-scores", "Candidate scores"
        cand, asg = t.get("candidates"), t.get("assignment")
        if cand is None or cand.empty:
            out.append(_Plot(fid, title, "No candidates in this run.", note="nothing to plot"))
        else:
            picked = set()
            if asg is not None and not asg.empty:
                picked = set(zip(asg["task"].astype(str), asg["worker"].astype(str), strict=True))
            is_sel = np.array(
                [(a, b) in picked for a, b in zip(cand["task"].astype(str), cand["worker"].astype(str), strict=True)]
            )
            sc = cand["score"].to_numpy(dtype=float)
            caption = (
                f"Predicted gain of each open-task × worker candidate ({len(cand)} candidates; {int(is_sel.sum())} "
                "selected, orange). The assignment picks the highest-gain pairs within the budget and caps."
            )
            data = pd.DataFrame({"selected": [True, False], "n": [int(is_sel.sum()), int((~is_sel).sum())]})

            def draw_14(fig: Any, sc: np.ndarray = sc, is_sel: np.ndarray = is_sel) -> None:
                ax = fig.add_subplot()
                rng = (float(np.nanmin(sc)), float(np.nanmax(sc)) + 1e-12)
                ax.hist(
                    [sc[~is_sel], sc[is_sel]],
                    bins=30,
                    range=rng,
                    stacked=True,
                    color=[_BLUE, _ORANGE],
                    label=["not selected", "selected"],
                )
                ax.set_xlabel("candidate score (predicted gain)")
                ax.set_ylabel("candidates")
                ax.legend(frameon=False)
                _style(ax)

            out.append(_Plot(fid, title, caption, draw_14, data))
    return out


_BUILDERS: dict[str, Callable[[Mapping[str, pd.DataFrame], Mapping[str, Any]], list[_Plot]]] = {
    "skills": _skills_figures,
    "ranking": _ranking_figures,
    "personal_rankings": _personal_rankings_figures,
    "personal_models": _personal_models_figures,
    "assignment": _assignment_figures,
    "next_batch": _assignment_figures,
}


# --------------------------------------------------------------------------------------------------
# HTML


_CSS = """
:root{--fg:#1f2933;--muted:#616e7c;--line:#e4e7eb;--bg:#f7f8fa;--accent:#3a6ea5}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
 color:var(--fg);background:var(--bg)}
main{max-width:1240px;margin:0 auto;padding:20px 24px 40px}
header.run{background:#fff;border:1px solid var(--line);border-radius:8px;padding:16px 20px;margin-bottom:16px}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:17px;margin:24px 0 10px;border-bottom:1px solid var(--line);padding-bottom:4px}
.sub{color:var(--muted);margin:0 0 12px}
.kv{display:grid;grid-template-columns:repeat(auto-fill,minmax(220px,1fr));gap:6px 18px;margin:0}
.kv div{min-width:0} .kv dt{color:var(--muted);font-size:12px} .kv dd{margin:0;font-weight:600;overflow-wrap:anywhere}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;background:#e3f2ec;color:#1d6b54}
.badge.warn{background:#fdecea;color:#a4282a}
nav.toc a{margin-right:14px;color:var(--accent);text-decoration:none}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:16px}
figure{margin:0;background:#fff;border:1px solid var(--line);border-radius:8px;padding:12px}
figure img{width:100%;height:auto;display:block}
figcaption{color:var(--fg);font-size:13px;margin-top:8px} figcaption b{display:block;margin-bottom:2px}
.note{background:#fff8e1;border:1px solid #f3d27a;border-radius:6px;padding:8px 12px;margin:8px 0}
table{border-collapse:collapse;font-size:12.5px;background:#fff;margin:4px 0 8px}
th,td{border:1px solid var(--line);padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f0f2f5} td.num{text-align:right;font-variant-numeric:tabular-nums}
details{margin:6px 0} summary{cursor:pointer;font-weight:600}
.cols{display:grid;grid-template-columns:repeat(auto-fit,minmax(380px,1fr));gap:16px}
code{font-size:12px;overflow-wrap:anywhere} a{color:var(--accent)}
footer{color:var(--muted);font-size:12px;margin-top:28px}
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, bool | np.bool_):
        return str(bool(v))
    if isinstance(v, float | np.floating):
        return f"{float(v):.4g}"
    return str(v)


def _table_html(df: pd.DataFrame, max_rows: int = 20, table_id: str | None = None) -> str:
    if df is None or df.empty:
        return '<p class="sub">(no rows)</p>'
    head = df.head(max_rows)
    num = [pd.api.types.is_numeric_dtype(head[c]) and not pd.api.types.is_bool_dtype(head[c]) for c in head.columns]
    parts = [f"<table{f' id={_q(table_id)}' if table_id else ''}><thead><tr>"]
    parts += [f"<th>{_e(c)}</th>" for c in head.columns]
    parts.append("</tr></thead><tbody>")
    for row in head.itertuples(index=False):
        parts.append("<tr>")
        for v, isnum in zip(row, num, strict=True):
            text = _fmt(v)
            if len(text) > 80:
                text = text[:77] + "…"
            parts.append(f'<td class="num">{_e(text)}</td>' if isnum else f"<td>{_e(text)}</td>")
        parts.append("</tr>")
    parts.append("</tbody></table>")
    if len(df) > max_rows:
        parts.append(f'<p class="sub">… {len(df) - max_rows} more rows</p>')
    return "".join(parts)


def _q(s: str) -> str:
    return '"' + html.escape(s, quote=True) + '"'


def _kv(items: list[tuple[str, Any]]) -> str:
    cells = "".join(f"<div><dt>{_e(k)}</dt><dd>{v}</dd></div>" for k, v in items)
    return f'<dl class="kv">{cells}</dl>'


def _figure_html(f: ReportFigure, has_mpl: bool) -> str:
    parts = [f"<figure id={_q(f.id)} data-figure={_q(f.id)}>"]
    uri = f.data_uri()
    if uri:
        parts.append(f'<img src="{uri}" alt={_q(f.alt)}>')
    else:
        reason = f.note or ""
        if not has_mpl and f.data is not None:
            reason = f"Figure needs matplotlib: <code>{_e(INSTALL_HINT)}</code>. The numbers it would plot:"
            parts.append(f'<div class="note">{reason}</div>')
            parts.append(_table_html(f.data, 20))
        else:
            parts.append(f'<div class="note">{_e(reason or "nothing to plot")}</div>')
    parts.append(f"<figcaption><b>{_e(f.title)}</b>{_e(f.caption)}</figcaption></figure>")
    return "".join(parts)


def planned_outputs(
    tables: Mapping[str, pd.DataFrame], layout: str = "flat", pipeline: str = "", run_id: str = ""
) -> dict[str, dict[str, Any]]:
    """The manifest ``outputs`` the atomic writer will record for these tables (name → path, rows).

    Paths are relative to the run folder ``<out>/<pipeline>/<run_id>``; with the hive layout a table
    is the part ``<out>/<table>/pipeline=<pipeline>/run_date=<date>/part-<run_id>.parquet``.
    """
    if layout == "hive":
        date = run_date_of(run_id)
        return {
            name: {"path": f"../../{name}/pipeline={pipeline}/run_date={date}/part-{run_id}.parquet", "rows": len(df)}
            for name, df in tables.items()
        }
    return {name: {"path": f"{name}.parquet", "rows": len(df)} for name, df in tables.items()}


def _header(manifest: Mapping[str, Any], outputs: Mapping[str, Mapping[str, Any]]) -> str:
    run_id = manifest.get("run_id", "?")
    status = manifest.get("status") or "completed"
    timings = manifest.get("timings") or {}
    total = sum(float(v) for v in timings.values() if isinstance(v, int | float))
    checks = manifest.get("checks") or {}
    warn = any(str(v) in ("warn", "failed") for v in checks.values())
    items: list[tuple[str, Any]] = [
        ("pipeline", _e(manifest.get("pipeline", "?"))),
        ("job", _e(manifest.get("job", "?"))),
        ("method", _e(manifest.get("method") or "—")),
        ("started (UTC)", _e(manifest.get("started_at", "?"))),
        ("status", f'<span class="badge{" warn" if warn else ""}">{_e(status)}</span>'),
        ("timed steps", f"{total:.2f} s"),
        ("flow run", f"<code>{_e(manifest.get('flow_run_id') or '—')}</code>"),
        ("crowdflow", _e((manifest.get("versions") or {}).get("crowdflow", __version__))),
    ]
    for k, v in (manifest.get("metrics") or {}).items():
        if isinstance(v, int | float | bool | str) and v is not None:
            items.append((k, _e(_fmt(v))))
    return (
        f'<header class="run" id="run-header"><h1>crowdflow run <code>{_e(run_id)}</code></h1>'
        f'<p class="sub">Static report of one run: figures, the tables it wrote and where its inputs came from. '
        f"Links are relative to this file's folder.</p>{_kv(items)}</header>"
    )


def _meta_sections(manifest: Mapping[str, Any], outputs: Mapping[str, Mapping[str, Any]]) -> str:
    out_rows = [
        {"output": name, "file": info.get("path", ""), "rows": info.get("rows")} for name, info in outputs.items()
    ]
    links = ['<table id="outputs-table"><thead><tr><th>output</th><th>file</th><th>rows</th></tr></thead><tbody>']
    for r in out_rows:
        links.append(
            f"<tr><td>{_e(r['output'])}</td><td><a href={_q(r['file'])}>{_e(r['file'])}</a></td>"
            f'<td class="num">{_e(_fmt(r["rows"]))}</td></tr>'
        )
    links.append(
        '<tr><td>manifest</td><td><a href="manifest.json">manifest.json</a></td><td class="num"></td></tr>'
        "</tbody></table>"
    )
    inputs = pd.DataFrame(manifest.get("inputs") or [])
    if not inputs.empty:
        inputs = inputs.rename(columns={"name": "input"})
    in_html = (
        '<table id="inputs-table"><thead><tr><th>input</th><th>rows</th><th>format</th><th>SHA-256</th><th>path</th>'
        "</tr></thead><tbody>"
        + "".join(
            f'<tr><td>{_e(r.get("input", ""))}</td><td class="num">{_e(_fmt(r.get("rows")))}</td>'
            f"<td>{_e(r.get('format', ''))}</td><td><code title={_q(str(r.get('sha256', '')))}>"
            f"{_e(str(r.get('sha256', ''))[:16])}…</code></td><td><code>{_e(r.get('path', ''))}</code></td></tr>"
            for r in inputs.to_dict("records")
        )
        + "</tbody></table>"
    )
    timings = manifest.get("timings") or {}
    t_html = _table_html(
        pd.DataFrame({"step": list(timings), "seconds": [float(v) for v in timings.values()]}), 50, "timings-table"
    )
    checks = manifest.get("checks") or {}
    c_html = _table_html(
        pd.DataFrame({"check": list(checks), "result": [str(v) for v in checks.values()]}), 50, "checks-table"
    )
    return (
        '<section id="outputs"><h2>Outputs</h2><div class="cols">'
        f"<div><h3>Files of this run</h3>{''.join(links)}</div>"
        f"<div><h3>Checks</h3>{c_html}<h3>Timings</h3>{t_html}</div></div></section>"
        f'<section id="inputs"><h2>Inputs (fingerprints)</h2>{in_html}</section>'
    )


def render_report(
    manifest: Mapping[str, Any],
    tables: Mapping[str, pd.DataFrame],
    outputs: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    plots: bool = True,
) -> RunReport:
    """Render the static HTML report of one run.

    Parameters
    ----------
    manifest : mapping
        The run manifest (``run_id``, ``pipeline``, ``job``, ``inputs``, ``timings``, ``metrics``…).
    tables : mapping of name → DataFrame
        The run's output tables.
    outputs : mapping, optional
        Output files (name → ``path``, ``rows``) to link; defaults to the manifest's ``outputs`` or, before
        the export, :func:`planned_outputs` of ``tables`` plus the report itself.
    plots : bool
        False skips matplotlib even when it is installed (the page then shows the plotted numbers).

    Returns
    -------
    RunReport
    """
    t0 = time.perf_counter()
    job = str(manifest.get("job", ""))
    if outputs is None:
        layout = str(((manifest.get("spec") or {}).get("output") or {}).get("layout", "flat"))
        planned = planned_outputs(tables, layout, str(manifest.get("pipeline", "")), str(manifest.get("run_id", "")))
        outputs = manifest.get("outputs") or {
            **planned,
            "report": {"path": REPORT_FILE, "rows": None},
        }
    figure_cls = _matplotlib() if plots else None
    builder = _BUILDERS.get(job)
    plots_spec = builder(tables, manifest) if builder else []
    figures: list[ReportFigure] = []
    for p in plots_spec:
        png = None
        note = p.note
        if p.draw is not None and figure_cls is not None:
            png = _png(figure_cls, p.draw, p.size, p.margins)
        elif p.draw is not None:
            note = f"figure needs matplotlib: {INSTALL_HINT}"
        figures.append(ReportFigure(p.id, p.title, p.caption, png, note, p.data))

    run_id = str(manifest.get("run_id", "?"))
    body = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>crowdflow {_e(manifest.get('pipeline', ''))} · {_e(run_id)}</title>",
        f"<style>{_CSS}</style></head><body><main>",
        _header(manifest, outputs),
        '<nav class="toc"><a href="#figures">Figures</a><a href="#outputs">Outputs</a><a href="#inputs">Inputs</a>'
        '<a href="#tables">Table previews</a><a href="#versions">Versions</a></nav>',
        '<section id="figures"><h2>Figures</h2>',
    ]
    if figure_cls is None and any(p.draw is not None for p in plots_spec):
        body.append(
            f'<div class="note" id="no-matplotlib">Figures need matplotlib: <code>{_e(INSTALL_HINT)}</code>. '
            "Each figure below shows the numbers it would plot instead.</div>"
        )
    if not plots_spec:
        body.append(f'<p class="sub">No figures for job {_e(job)!r}.</p>')
    body.append('<div class="grid">')
    body += [_figure_html(f, figure_cls is not None) for f in figures]
    body.append("</div></section>")
    body.append(_meta_sections(manifest, outputs))
    body.append('<section id="tables"><h2>Table previews</h2>')
    for name, df in tables.items():
        body.append(
            f'<details id="table-{_e(name)}"><summary>{_e(name)} — {len(df)} rows × {df.shape[1]} columns '
            f"(<a href={_q(str(outputs.get(name, {}).get('path', f'{name}.parquet')))}>{_e(name)}.parquet</a>)"
            f"</summary>{_table_html(df, 15)}</details>"
        )
    body.append("</section>")
    versions = manifest.get("versions") or {}
    body.append(
        '<section id="versions"><h2>Versions</h2>'
        + _table_html(pd.DataFrame({"package": list(versions), "version": list(versions.values())}), 50)
        + "</section>"
    )
    spec = manifest.get("spec")
    if spec:
        body.append(
            '<details id="spec"><summary>Pipeline spec</summary><pre>'
            + _e(json.dumps(spec, indent=2, default=str))
            + "</pre></details>"
        )
    seconds = time.perf_counter() - t0
    body.append(
        f"<footer>Generated by crowdflow {_e(__version__)} in {seconds:.2f} s; self-contained (images embedded), "
        "no network access needed.</footer></main></body></html>"
    )
    summary = pd.DataFrame([{"output": k, "file": v.get("path"), "rows": v.get("rows")} for k, v in outputs.items()])
    return RunReport(
        html="\n".join(body),
        figures=figures,
        has_plots=figure_cls is not None,
        seconds=time.perf_counter() - t0,
        summary=summary,
    )


def report_from_run_dir(run_dir: str | Path, *, plots: bool = True) -> RunReport:
    """Re-render the report of an exported run from its ``manifest.json`` and Parquet files."""
    run = Path(run_dir)
    manifest = json.loads((run / "manifest.json").read_text())
    tables = {
        name: pd.read_parquet(run / info["path"])
        for name, info in (manifest.get("outputs") or {}).items()
        if str(info.get("path", "")).endswith(".parquet")
    }
    return render_report(manifest, tables, plots=plots)
