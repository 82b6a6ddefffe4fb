"""Figures of the personal jobs.

personal_rankings: the per-user score heat map and the spread of item scores across users;
personal_models: the residual histogram and the convergence trace.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from crowdflow.report.figure import BLUE, ORANGE, RED, Plot, style


def personal_vs_global(pr: pd.DataFrame) -> tuple[float, float, int] | None:
    """The personal rankings beside one global ranking (each item's mean personal score): the baseline.

    Returns the mean over users of Spearman's ρ between the user's scores and the global scores (items the user
    has a score for), the share of users whose best item is not the global best, and the number of users; None
    with fewer than two items.
    """
    X = pr.pivot_table(index="user", columns="item", values="score", aggfunc="mean")
    if X.shape[1] < 2:
        return None
    glob = X.mean(axis=0)
    R = X.rank(axis=1)
    g = pd.DataFrame(np.broadcast_to(glob.to_numpy(), X.shape), index=X.index, columns=X.columns)
    g = g.where(X.notna()).rank(axis=1)  # the global scores ranked among each user's own items
    rc = R.sub(R.mean(axis=1), axis=0)
    gc = g.sub(g.mean(axis=1), axis=0)
    den = ((rc**2).sum(axis=1) * (gc**2).sum(axis=1)) ** 0.5
    rho = (rc * gc).sum(axis=1) / den.where(den > 0)
    best = X.idxmax(axis=1)
    return float(rho.mean()), float((best != glob.idxmax()).mean()), int(X.shape[0])


def personal_rankings_header(t: Mapping[str, pd.DataFrame], manifest: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The header's "personal vs global ranking" entry (the global mean-score ranking is the baseline)."""
    pr = t.get("personal_rankings")
    cmp = personal_vs_global(pr) if pr is not None and not pr.empty else None
    if cmp is None:
        return []
    rho, differ, n = cmp
    return [
        (
            "personal vs global ranking",
            f"mean Spearman ρ {rho:.3f} between each user's ranking and the global one (mean score); "
            f"{differ:.0%} of {n} users have another best item",
        )
    ]


def personal_rankings_figures(t: Mapping[str, pd.DataFrame], manifest: Mapping[str, Any]) -> list[Plot]:
    pr = t.get("personal_rankings")
    out: list[Plot] = []
    fid, title = "fig-personal-heatmap", "Per-user item scores"
    if pr is None or pr.empty:
        out.append(Plot(fid, title, "No personal rankings in this run.", note="nothing to plot"))
        out.append(
            Plot("fig-item-score-spread", "Item scores across users", "No personal rankings.", note="nothing to plot")
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

    out.append(Plot(fid, title, caption, draw_9, data, size=(6.4, 4.2), margins={"left": 0.06, "bottom": 0.2}))

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
        style(ax)

    out.append(Plot(fid, title, caption, draw2, data, margins={"bottom": 0.27}))
    return out


def personal_models_figures(t: Mapping[str, pd.DataFrame], manifest: Mapping[str, Any]) -> list[Plot]:
    pm = t.get("personal_models")
    conv = t.get("convergence")
    out: list[Plot] = []
    fid, title = "fig-residual-histogram", "Per-agent residuals"
    if pm is None or pm.empty or "residual" not in pm:
        out.append(Plot(fid, title, "No per-agent residuals in this run.", note="nothing to plot"))
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
            ax.hist(r, bins=30, color=BLUE, edgecolor="white")
            ax.set_xlabel("residual norm")
            ax.set_ylabel("agents")
            style(ax)

        out.append(
            Plot(fid, title, caption, draw_10 if len(r) else None, data, note=None if len(r) else "nothing to plot")
        )

    fid, title = "fig-convergence", "Convergence trace"
    if conv is None or conv.empty or "round" not in conv:
        out.append(
            Plot(fid, title, "No convergence trace in this run (a direct solve has none).", note="nothing to plot")
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
            for c, colour in zip(cols, (BLUE, ORANGE, RED), strict=False):
                v = conv[c].to_numpy(dtype=float)
                ok = np.isfinite(v) & (v > 0)
                ax.plot(conv["round"].to_numpy()[ok], v[ok], color=colour, label=c, lw=1.5)
            ax.set_yscale("log")
            ax.set_xlabel("round (edge activations)")
            ax.legend(frameon=False)
            style(ax)

        out.append(Plot(fid, title, caption, draw_11, data))
    return out
