"""Quality metrics of consensus labels against gold labels."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import pandas as pd


@dataclass(frozen=True)
class GoldMetrics:
    """Accuracy of consensus labels on gold tasks.

    Attributes
    ----------
    accuracy : float
        (1/|G|) Σ_{t∈G} 1{ĝ_t = g_t} over gold tasks G that received at least one label.
    error : float
        1 − accuracy (the prediction error PE of docs/methods/skills.md §5).
    n_gold : int
        |G|: gold tasks that have a consensus label.
    n_gold_unlabelled : int
        Gold tasks nobody labelled (excluded from the metric).
    n_gold_label_unknown : int
        Gold tasks whose gold label is none of the fitted classes: they can never be right, which usually
        means the gold is spelled differently from the labels (a warning, not an error).
    """

    accuracy: float
    error: float
    n_gold: int
    n_gold_unlabelled: int
    n_gold_label_unknown: int = 0

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def gold_metrics(consensus: pd.DataFrame, truth: pd.DataFrame, classes: Sequence[str] | None = None) -> GoldMetrics:
    """Compare ``consensus`` (task, label) with ``truth`` (task, label); ids compared as strings.

    ``classes`` (the fitted label set) counts gold tasks whose gold label is outside it
    (``n_gold_label_unknown``); default: the labels the consensus uses.
    """
    pred = consensus[["task", "label"]].astype({"task": "string", "label": "string"})
    gold = truth[["task", "label"]].astype({"task": "string", "label": "string"})
    merged = gold.merge(pred, on="task", how="left", suffixes=("_true", "_pred"))
    has = merged["label_pred"].notna()
    n = int(has.sum())
    known = set(pred["label"].dropna()) if classes is None else {str(c) for c in classes}
    unknown = int((has & ~merged["label_true"].isin(known)).sum())
    if n == 0:
        return GoldMetrics(accuracy=float("nan"), error=float("nan"), n_gold=0, n_gold_unlabelled=len(gold))
    correct = (merged.loc[has, "label_true"] == merged.loc[has, "label_pred"]).sum()
    acc = float(correct) / n
    return GoldMetrics(
        accuracy=acc, error=1.0 - acc, n_gold=n, n_gold_unlabelled=int((~has).sum()), n_gold_label_unknown=unknown
    )


def majority_vote_expected_error(labels: pd.DataFrame, truth: pd.DataFrame) -> float:
    """Expected prediction error of majority vote when ties are broken by a fair coin (exact, no draw).

    E[PE] = (1/|G|) Σ_{t∈G} (1 − 1{g_t ∈ A_t} / |A_t|), with A_t the most frequent labels of task t and
    G the gold tasks that have labels (the denominator of :func:`gold_metrics`). This is how the
    literature reports majority vote (docs/methods/skills.md §5.5: the paper's MV column equals it on
    Snow et al. RTE, 82.5/800, and Temp, 29.5/462), while ``majority_vote`` gives one seeded draw.

    Parameters
    ----------
    labels : pandas.DataFrame
        task, worker, label (one answer per (task, worker)).
    truth : pandas.DataFrame
        task, label; ids and labels compared as strings, the first row of a repeated task kept.
    """
    gold = truth.drop_duplicates("task").astype({"task": str, "label": str}).set_index("task")["label"]
    counts = labels.astype({"task": str, "label": str}).groupby(["task", "label"]).size().rename("n").reset_index()
    counts = counts[counts["task"].isin(gold.index)]
    if counts.empty:
        return float("nan")
    tied = counts[counts["n"] == counts.groupby("task")["n"].transform("max")]
    size = tied.groupby("task")["label"].transform("size").to_numpy()
    hit = tied["label"].to_numpy() == gold.reindex(tied["task"]).to_numpy()
    p_right = pd.Series(hit / size).groupby(tied["task"].to_numpy()).sum()
    return float(1.0 - p_right.mean())
