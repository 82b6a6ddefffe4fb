"""Figures of a ranking run: score intervals, the outlier path, annotators' outlier rates."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from crowdflow.ranking.baseline import BaselineComparison, compare_with_least_squares
from crowdflow.ranking.intervals import score_intervals
from crowdflow.report.figure import BLUE, GREY, ORANGE, RED, Plot, style

BASELINE = "plain least squares (HodgeRank, no outlier rule)"


def ranking_baseline(t: Mapping[str, pd.DataFrame]) -> BaselineComparison | None:
    """The run's ranking beside plain least squares on every row it read (one sparse solve; None: no rows)."""
    ranking = t.get("ranking")
    rows = t.get("outliers")
    rows = rows if rows is not None else t.get("residuals")
    if ranking is None or rows is None:
        return None
    return compare_with_least_squares(ranking, rows)


def baseline_line(cmp: BaselineComparison) -> str:
    """One line: Kendall τ, the top-k overlap and the rows flagged, against the least-squares baseline."""
    return (
        f"Kendall τ {cmp.tau:.3f} vs {BASELINE}; top-{cmp.k} overlap {cmp.top_overlap}/{cmp.k}; "
        f"{cmp.n_flagged} of {cmp.n_rows} rows flagged ({cmp.n_flagged / max(cmp.n_rows, 1):.1%})"
    )


def ranking_header(t: Mapping[str, pd.DataFrame], manifest: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The header's "ranking vs baseline" entry (empty when the run has no comparison rows)."""
    cmp = ranking_baseline(t)
    return [("ranking vs baseline", baseline_line(cmp))] if cmp is not None else []


def _baseline_plot(t: Mapping[str, pd.DataFrame], manifest: Mapping[str, Any]) -> Plot:
    fid, title = "fig-ranking-baseline", "Robust ranking vs plain least squares"
    cmp = ranking_baseline(t)
    if cmp is None:
        return Plot(fid, title, "No comparison rows in this run to fit the baseline on.", note="nothing to plot")
    line = baseline_line(cmp)
    method = str((manifest.get("fit") or {}).get("method") or manifest.get("method") or "this run's fit")
    moved = cmp.table.assign(shift=(cmp.table["rank"] - cmp.table["ls_rank"]).abs())
    moved = moved.sort_values(["shift", "rank"], ascending=[False, True], kind="stable")
    top = moved.iloc[0]
    caption = (
        f"Each dot is an item of component {cmp.component} ({len(cmp.table)} items): its score in this run "
        f"({method}, x) against its score from {BASELINE} on all {cmp.n_rows} comparison rows, the flagged ones "
        "included (y); on the dashed diagonal they agree. The baseline is one sparse Laplacian solve per component. "
        + (
            f"Largest rank change: {top['item']} ({int(top['ls_rank'])} → {int(top['rank'])})."
            if int(top["shift"]) > 0
            else "No item changes rank."
        )
    )
    data = moved[["item", "score", "ls_score", "rank", "ls_rank"]].head(20).reset_index(drop=True)
    if cmp.n_flagged == 0 and float(np.max(np.abs(cmp.table["score"] - cmp.table["ls_score"]))) < 1e-9:
        sentence = (
            f"This run flagged no comparison: its ranking is the {BASELINE} ranking itself "
            f"(Kendall τ {cmp.tau:.3f} over {len(cmp.table)} items)."
        )
        return Plot(fid, title, caption, None, data, sentence=sentence, reading=line + ".")
    k_top = set(cmp.table.nlargest(cmp.k, "score")["item"])

    def draw(fig: Any, tab: pd.DataFrame = cmp.table, k_top: set[str] = k_top, k: int = cmp.k) -> None:
        ax = fig.add_subplot()
        in_top = tab["item"].isin(k_top).to_numpy()
        ax.scatter(tab["score"][~in_top], tab["ls_score"][~in_top], s=16, color=BLUE, label="item")
        ax.scatter(tab["score"][in_top], tab["ls_score"][in_top], s=22, color=ORANGE, label=f"this run's top {k}")
        lo = float(min(tab["score"].min(), tab["ls_score"].min()))
        hi = float(max(tab["score"].max(), tab["ls_score"].max()))
        ax.plot([lo, hi], [lo, hi], color=GREY, ls="--", lw=1, label="agreement (diagonal)")
        ax.set_xlabel("score, this run")
        ax.set_ylabel("score, plain least squares")
        ax.legend(frameon=False, fontsize=8)
        style(ax)

    return Plot(fid, title, caption, draw, data, size=(6.4, 3.8), reading=line + ".")


def ranking_figures(t: Mapping[str, pd.DataFrame], manifest: Mapping[str, Any]) -> list[Plot]:
    ranking = t.get("ranking")
    outliers = t.get("outliers")
    rows = outliers if outliers is not None else t.get("residuals")
    path = t.get("path")
    out: list[Plot] = []

    fid, title = "fig-ranking-intervals", "Ranking with score intervals"
    if ranking is None or ranking.empty:
        out.append(Plot(fid, title, "No ranking table in this run.", note="nothing to plot"))
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
                    color=BLUE,
                    ecolor=ORANGE,
                    elinewidth=2,
                    capsize=2,
                    ms=4,
                )
            else:
                ax.plot(iv["score"], y, "o", color=BLUE)
            ax.set_yticks(y)
            ax.set_yticklabels([str(s)[:24] for s in iv["item"]], fontsize=7 if len(iv) > 25 else 8)
            ax.axvline(0.0, color=GREY, lw=0.8, ls="--")
            ax.set_xlabel("score (centred in its component)")
            ax.grid(axis="x", alpha=0.3)
            ax.spines[["top", "right"]].set_visible(False)

        height = min(max(3.0, 0.16 * len(iv) + 1.0), 8.0)
        width = max(len(str(x)[:24]) for x in iv["item"])
        margins = {"left": min(0.4, 0.05 + 0.011 * width), "bottom": 0.6 / height, "top": 1 - 0.15 / height}
        out.append(Plot(fid, title, caption, draw_6, data, size=(6.4, height), margins=margins))

    out.append(_baseline_plot(t, manifest))

    fid, title = "fig-outlier-path", "Outlier regularisation path"
    if outliers is None or outliers.empty or "entry_time" not in outliers:
        method = (manifest.get("spec") or {}).get("ranking", {}).get("outliers", "none")
        out.append(
            Plot(
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
                    ax.axvline(float(t_stop), color=GREY, ls="--", lw=1)
                ax.set_xlabel("path time t")
                ax.set_ylabel("γ (outlier magnitude)")
                style(ax)
            ax = axes[1]
            ax.scatter(et[entered & ~flagged], o["gamma"].to_numpy()[entered & ~flagged], s=8, color=BLUE, label="kept")
            ax.scatter(et[entered & flagged], o["gamma"].to_numpy()[entered & flagged], s=8, color=RED, label="outlier")
            if t_stop is not None:
                ax.axvline(float(t_stop), color=GREY, ls="--", lw=1)
            ax.set_xlabel("entry time")
            ax.set_ylabel("final γ")
            ax.legend(frameon=False, fontsize=8)
            style(ax)

        out.append(Plot(fid, title, caption, draw_7, data, size=(7.2, 3.4)))

    fid, title = "fig-annotator-outliers", "Outlier rate per annotator"
    ann = t.get("annotators")
    if ann is None or ann.empty:
        out.append(Plot(fid, title, "No per-annotator outlier counts in this run.", note="nothing to plot"))
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
            ax.barh(a["annotator"].astype(str)[::-1], a["outlier_rate"][::-1], color=ORANGE)
            ax.axvline(overall, color=GREY, ls="--", lw=1)
            ax.set_xlabel("outlier rate")
            ax.tick_params(axis="y", labelsize=7)
            ax.spines[["top", "right"]].set_visible(False)

        width = max([len(str(x)) for x in a["annotator"]] or [4])
        out.append(
            Plot(
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
