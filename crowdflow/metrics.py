"""Quality metrics of consensus labels against gold labels."""

from __future__ import annotations

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
        1 − accuracy (the prediction error PE of spec skills-rank-one.md §5).
    n_gold : int
        |G|: gold tasks that have a consensus label.
    n_gold_unlabelled : int
        Gold tasks nobody labelled (excluded from the metric).
    """

    accuracy: float
    error: float
    n_gold: int
    n_gold_unlabelled: int

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def gold_metrics(consensus: pd.DataFrame, truth: pd.DataFrame) -> GoldMetrics:
    """Compare ``consensus`` (task, label) with ``truth`` (task, label); ids compared as strings."""
    pred = consensus[["task", "label"]].astype({"task": "string", "label": "string"})
    gold = truth[["task", "label"]].astype({"task": "string", "label": "string"})
    merged = gold.merge(pred, on="task", how="left", suffixes=("_true", "_pred"))
    has = merged["label_pred"].notna()
    n = int(has.sum())
    if n == 0:
        return GoldMetrics(accuracy=float("nan"), error=float("nan"), n_gold=0, n_gold_unlabelled=len(gold))
    correct = (merged.loc[has, "label_true"] == merged.loc[has, "label_pred"]).sum()
    acc = float(correct) / n
    return GoldMetrics(accuracy=acc, error=1.0 - acc, n_gold=n, n_gold_unlabelled=int((~has).sum()))
