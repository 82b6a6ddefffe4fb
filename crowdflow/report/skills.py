"""Figures of a skills run: skill distribution, labels per worker, components, identifiability, consensus confidence."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from crowdflow.report.figure import BLUE, GREY, ORANGE, STATUS_COLOURS, Plot, style


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
                ax.fill_between(x, np.where(m, n, 0.0), step="mid", color=STATUS_COLOURS.get(st, GREY), label=st, lw=0)
            if n.max() > 50 * max(n.min(), 1):
                ax.set_yscale("log")
            ax.set_xlabel("worker (sorted by label count)")
            ax.set_ylabel("labels")
            ax.set_xlim(0.5, len(n) + 0.5)
            if len(set(status)) > 1:
                ax.legend(frameon=False, fontsize=8)
            style(ax)

        out.append(Plot(fid, title, caption, draw_2, data))

    # worker-graph components
    fid, title = "fig-worker-components", "Worker-graph components"
    if comps is None or comps.empty:
        out.append(Plot(fid, title, "No component table in this run.", note="nothing to plot"))
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

        out.append(Plot(fid, title, caption, draw_3, data))

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

        def draw_4(fig: Any, vc: pd.Series = vc) -> None:
            ax = fig.add_subplot()
            ax.barh(vc.index[::-1], vc.to_numpy()[::-1], color=[STATUS_COLOURS.get(s, GREY) for s in vc.index[::-1]])
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
    return out
