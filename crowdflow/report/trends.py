"""Run over run: the report's trends figure from the pipeline's earlier runs, and the timings explained.

The history is the manifests of the pipeline's completed runs (:func:`crowdflow.storage.runs.run_history`: the same
facts the warehouse's ``runs`` table holds), oldest first, plus the run being reported. Plotted per run: gold
accuracy beside its baseline (skills: majority vote), the input rows, the flagged share (:func:`flagged_share`) and
who joined or left since the run before (skills: workers; ranking: annotators and items).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from crowdflow.report.figure import BLUE, GREY, ORANGE, RED, Plot, style
from crowdflow.storage.runs import MEMBERS

FLAGGED = {
    "skills": "tasks whose consensus differs from majority vote",
    "ranking": "comparisons flagged as outliers",
}


def flagged_share(job: str, tables: Mapping[str, pd.DataFrame], metrics: Mapping[str, Any]) -> float | None:
    """The share of a run's rows its method flags: one number per run for the trend (None when the job has none).

    Skills: tasks whose consensus label differs from the majority vote (``n_changed_vs_majority`` over the
    consensus rows). Ranking: comparisons flagged as outliers (``outliers.is_outlier``).
    """
    if job == "skills":
        n = len(tables.get("consensus", ()))
        changed = metrics.get("n_changed_vs_majority")
        return float(changed) / n if n and isinstance(changed, int | float) else None
    if job == "ranking":
        out = tables.get("outliers")
        if out is not None and len(out) and "is_outlier" in out:
            return float(out["is_outlier"].astype(bool).mean())
    return None


# (who, output table, column): the churn panels, one per kind of member a job's runs have (the history's keys)
CHURN = MEMBERS


def _rows(manifest: Mapping[str, Any]) -> int | None:
    rows = [r.get("rows") for r in manifest.get("inputs") or [] if isinstance(r.get("rows"), int)]
    return int(sum(rows)) if rows else None


def _num(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else float("nan")


def trend_table(
    history: Sequence[Mapping[str, Any]], manifest: Mapping[str, Any], tables: Mapping[str, pd.DataFrame]
) -> pd.DataFrame:
    """One row per run (the earlier runs, then this one): run id, accuracy, baseline, rows, flagged share, and the
    churn (``<who>_joined``, ``<who>_left`` against the run before) of workers, annotators and items."""
    runs = [*history, {**manifest, "_current": True}]
    members: dict[str, list[set[str] | None]] = {}
    for key, table, column in CHURN:
        current = tables.get(table)
        members[key] = [{str(w) for w in m[key]} if m.get(key) is not None else None for m in history] + [
            {str(w) for w in current[column]} if current is not None and column in current else None
        ]
    rows = []
    for i, m in enumerate(runs):
        metrics = m.get("metrics") or {}
        share = metrics.get("flagged_share")
        if m.get("_current") and share is None:
            share = flagged_share(str(m.get("job", "")), tables, metrics)
        row = {
            "run_id": str(m.get("run_id", "?")),
            "accuracy": _num(metrics.get("accuracy")),
            "baseline_accuracy": _num(metrics.get("baseline_accuracy")),
            "input_rows": _num(_rows(m)),
            "flagged_share": _num(share),
        }
        for key, _, _ in CHURN:
            before, now = (members[key][i - 1] if i else None), members[key][i]
            if now is not None and before is not None:
                row[f"{key}_joined"], row[f"{key}_left"] = float(len(now - before)), float(len(before - now))
            else:
                row[f"{key}_joined"] = row[f"{key}_left"] = float("nan")
        rows.append(row)
    return pd.DataFrame(rows)


def trends_plot(
    history: Sequence[Mapping[str, Any]], manifest: Mapping[str, Any], tables: Mapping[str, pd.DataFrame]
) -> Plot:
    """The trends figure (``fig-run-trends``): one panel per quantity this pipeline's runs have, run by run."""
    fid, title = "fig-run-trends", "This pipeline, run over run"
    data = trend_table(history, manifest, tables)
    job = str(manifest.get("job", ""))
    if len(data) < 2:
        return Plot(
            fid,
            title,
            "Accuracy, input rows, flagged share and churn (workers, annotators, items) per run, from the "
            "pipeline's completed runs.",
            sentence="This is the first completed run of this pipeline in its output folder: the trends start "
            "with the next run.",
            data=data,
            reading="No earlier run to compare with yet.",
        )
    panels = [
        ("accuracy", ["accuracy", "baseline_accuracy"], "gold accuracy"),
        ("input_rows", ["input_rows"], "input rows"),
        ("flagged_share", ["flagged_share"], "flagged share"),
        *((f"churn-{who}", [f"{who}_joined", f"{who}_left"], who) for who, _, _ in CHURN),
    ]
    panels = [p for p in panels if data[p[1]].notna().any().any()]
    names = {
        "accuracy": "this run's method",
        "baseline_accuracy": str((manifest.get("metrics") or {}).get("baseline") or "baseline"),
        "input_rows": "input rows",
        "flagged_share": FLAGGED.get(job, "flagged share"),
        **{f"{who}_joined": f"{who} new since the run before" for who, _, _ in CHURN},
        **{f"{who}_left": f"{who} gone since the run before" for who, _, _ in CHURN},
    }
    colours = {
        "accuracy": BLUE,
        "baseline_accuracy": GREY,
        "input_rows": BLUE,
        "flagged_share": ORANGE,
        **{f"{who}_joined": BLUE for who, _, _ in CHURN},
        **{f"{who}_left": RED for who, _, _ in CHURN},
    }
    last, prev = data.iloc[-1], data.iloc[-2]
    parts = []
    if not math.isnan(last["accuracy"]) and not math.isnan(prev["accuracy"]):
        parts.append(f"accuracy {prev['accuracy']:.4f} → {last['accuracy']:.4f}")
    if not math.isnan(last["input_rows"]) and not math.isnan(prev["input_rows"]):
        parts.append(f"input rows {prev['input_rows']:.0f} → {last['input_rows']:.0f}")
    if not math.isnan(last["flagged_share"]) and not math.isnan(prev["flagged_share"]):
        parts.append(f"flagged {prev['flagged_share']:.1%} → {last['flagged_share']:.1%}")
    for who, _, _ in CHURN:
        if not math.isnan(last[f"{who}_joined"]):
            parts.append(f"{last[f'{who}_joined']:.0f} {who} joined, {last[f'{who}_left']:.0f} left")
    reading = ("Since the run before: " + "; ".join(parts) + ".") if parts else "No quantity was recorded twice."
    caption = (
        f"The last {len(data)} completed runs of this pipeline, oldest left, this run right. Gold accuracy beside "
        f"its baseline ({names['baseline_accuracy']}), input rows, the flagged share ({names['flagged_share']}) "
        "and who joined or left since the run before (skills: workers; ranking: annotators and items)."
    )

    def draw(fig: Any, data: pd.DataFrame = data) -> None:
        x = np.arange(len(data))
        for k, (_, cols, ylabel) in enumerate(panels):
            ax = fig.add_subplot(1, len(panels), k + 1)
            for col in cols:
                y = data[col].to_numpy(dtype=float)
                ax.plot(x, y, marker="o", ms=4, color=colours[col], label=names[col])
            ax.set_ylabel(ylabel)
            ax.set_xlabel("run (oldest → this one)")
            ax.set_xticks(x if len(x) <= 8 else x[:: max(1, len(x) // 6)])
            ax.legend(frameon=False, fontsize=7, loc="best")
            style(ax)

    width = max(6.4, 3.2 * len(panels))
    return Plot(
        fid, title, caption, draw, data, size=(width, 3.2), margins={"wspace": 0.45, "bottom": 0.2}, reading=reading
    )


# What each timed step of a run does, by job; the page adds the rows it worked on.
_STEPS: dict[str, str] = {
    "ingest_validate": "read every input, mapped its columns and ran its table contract and Great Expectations suite",
    "check_graph": "built the interaction graph of the inputs and checked it (components, bipartite parts, "
    "isolated members); skills: one pass over every co-labelled worker pair, which on large or dense data "
    "costs more than a closed-form or few-iteration fit",
    "fit": "fitted the job's method (answered from the fit cache when the manifest's cache.hit says so)",
    "report": "drew the figures and wrote this page",
    "export": "wrote the output tables atomically",
    "warehouse": "loaded the output tables into the warehouse",
}


def explain_timings(manifest: Mapping[str, Any]) -> pd.DataFrame:
    """The timings table: step, seconds, share of the run, the rows it worked on and what it did."""
    timings = {k: float(v) for k, v in (manifest.get("timings") or {}).items() if isinstance(v, int | float)}
    total = sum(timings.values()) or 1.0
    rows = _rows(manifest)
    cache = manifest.get("cache") or {}
    out = []
    for step, seconds in timings.items():
        what = _STEPS.get(step, "a step of the run")
        if step == "fit" and cache.get("hit"):
            what = "answered from the fit cache (an identical earlier fit): no fitting"
        out.append(
            {
                "step": step,
                "seconds": round(seconds, 3),
                "share": f"{seconds / total:.0%}",
                "rows": rows if step in ("ingest_validate", "check_graph", "fit") else None,
                "what it did": what,
            }
        )
    return pd.DataFrame(out, columns=["step", "seconds", "share", "rows", "what it did"])
