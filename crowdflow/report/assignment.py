"""Figures of an assignment or next-batch run: worker and task loads, candidate scores."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from crowdflow.report.figure import BLUE, ORANGE, RED, Plot, style


def assignment_header(t: Mapping[str, pd.DataFrame], manifest: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The header's "objective vs random picks" entry when the run wrote its candidates (next_batch): the baseline
    is the expected total score of as many candidates drawn uniformly at random (caps ignored)."""
    cand, asg = t.get("candidates"), t.get("assignment")
    metrics = manifest.get("metrics") or {}
    if cand is None or cand.empty or asg is None or "score" not in asg or "score" not in cand:
        return []
    n = len(asg)
    got = float(pd.to_numeric(asg["score"], errors="coerce").sum())
    rand = n * float(pd.to_numeric(cand["score"], errors="coerce").mean())
    name = "objective" if "objective" in metrics else "total score"
    return [
        (
            f"{name} vs random picks",
            f"total score {got:.4g} of the {n} picks vs {rand:.4g} expected from {n} candidates drawn at random "
            f"({got / rand:.2f}×)"
            if rand > 0
            else f"total score {got:.4g} vs {rand:.4g} at random",
        )
    ]


def assignment_figures(t: Mapping[str, pd.DataFrame], manifest: Mapping[str, Any]) -> list[Plot]:
    out: list[Plot] = []
    wl, tl = t.get("worker_load"), t.get("task_load")
    metrics = manifest.get("metrics") or {}

    fid, title = "fig-worker-load", "Per-worker load"
    if wl is None or wl.empty:
        out.append(Plot(fid, title, "No worker loads in this run.", note="nothing to plot"))
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
            ax.bar(x, shown["n_assigned"], color=BLUE, label="assigned")
            if cap is not None and np.isfinite(cap.to_numpy(dtype=float)).any():
                ax.scatter(x, cap, marker="_", s=120, color=RED, label="capacity", zorder=3)
            ax.set_xticks(x)
            ax.set_xticklabels([str(s)[:12] for s in shown["worker"]], rotation=90, fontsize=7)
            ax.set_ylabel("tasks")
            ax.legend(frameon=False, fontsize=8)
            style(ax)

        out.append(Plot(fid, title, caption, draw_12, data))

    fid, title = "fig-task-load", "Per-task load"
    if tl is None or tl.empty:
        out.append(Plot(fid, title, "No task loads in this run.", note="nothing to plot"))
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
            ax.bar(vc.index.astype(int), vc.to_numpy(), color=BLUE, width=0.8)
            if caps.notna().any() and caps.nunique() == 1:
                ax.axvline(float(caps.max()), color=RED, ls="--", lw=1)
            ax.set_xlabel("workers assigned to the task")
            ax.set_ylabel("tasks")
            ax.xaxis.get_major_locator().set_params(integer=True)
            style(ax)

        out.append(Plot(fid, title, caption, draw_13, data, size=(6.4, 3.0)))

    if manifest.get("job") == "next_batch":
        fid, title = "fig-candidate-scores", "Candidate scores"
        cand, asg = t.get("candidates"), t.get("assignment")
        if cand is None or cand.empty:
            out.append(Plot(fid, title, "No candidates in this run.", note="nothing to plot"))
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
                    color=[BLUE, ORANGE],
                    label=["not selected", "selected"],
                )
                ax.set_xlabel("candidate score (predicted gain)")
                ax.set_ylabel("candidates")
                ax.legend(frameon=False)
                style(ax)

            out.append(Plot(fid, title, caption, draw_14, data))
    return out
