"""Quality metrics of consensus labels against gold labels."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from crowdflow.labels import LabelMatrix


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


def _as_text(df: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """``columns`` of ``df`` without missing values, as text (ids and labels compare as strings, as in gold_metrics)."""
    return df[columns].dropna().astype(str)


def _arrow_text(values: pd.Series) -> Any:
    """A text column (no missing value) as an Arrow ``string`` array: an Arrow-backed column as it is."""
    import pyarrow as pa

    got = pa.array(values.array) if isinstance(values.dtype, pd.StringDtype) else None
    if got is None:
        got = pa.array(values.to_numpy(dtype=object), pa.string())
    got = got.combine_chunks() if isinstance(got, pa.ChunkedArray) else got
    return got.cast(pa.string())


def _text_in(values: pd.Series, among: pd.Series) -> np.ndarray:
    """``values.isin(among)`` for text columns without missing values, by one Arrow hash look-up (pandas' ``isin``
    of an Arrow string column makes a Python scalar of every value of ``among``: 0.4 s of a 3·10⁵-task bucket's
    review, where ``among`` is the bucket's reviewed tasks)."""
    import pyarrow.compute as pc

    found = pc.is_in(_arrow_text(values), value_set=_arrow_text(among))
    return np.asarray(found.to_numpy(zero_copy_only=False), dtype=bool)


def gold_by_worker(labels: pd.DataFrame, truth: pd.DataFrame) -> pd.DataFrame:
    """Each worker's accuracy measured on the gold tasks it labelled.

    Parameters
    ----------
    labels : pandas.DataFrame
        task, worker, label.
    truth : pandas.DataFrame
        task, label (the first row of a repeated task kept).

    Returns
    -------
    pandas.DataFrame
        ``worker``, ``n_gold_labels`` (its labels on gold tasks), ``n_gold_correct``, ``gold_accuracy``
        (= correct / gold labels), one row per worker with at least one gold label, most gold labels first.
    """
    gold = _as_text(truth, ["task", "label"]).drop_duplicates("task")
    # the rows of gold tasks first, then their text: the text of every label was an O(labels) transient (~75 MB at
    # 10^6 labels, the inline flow's peak) for the few rows the merge keeps
    task = labels["task"]
    on_gold = task.notna() & task.astype(str).isin(gold["task"])
    lab = _as_text(labels.loc[on_gold], ["task", "worker", "label"]).merge(gold, on="task", suffixes=("", "_gold"))
    lab["correct"] = lab["label"] == lab["label_gold"]
    out = lab.groupby("worker", sort=True).agg(n_gold_labels=("correct", "size"), n_gold_correct=("correct", "sum"))
    out = out.reset_index().astype({"n_gold_labels": "int64", "n_gold_correct": "int64"})
    out["gold_accuracy"] = out["n_gold_correct"] / out["n_gold_labels"]
    return out.sort_values(["n_gold_labels", "worker"], ascending=[False, True], kind="stable").reset_index(drop=True)


def confusion_matrix(consensus: pd.DataFrame, truth: pd.DataFrame) -> pd.DataFrame:
    """Gold label × consensus label counts over the gold tasks that have a consensus label (long format).

    Returns
    -------
    pandas.DataFrame
        ``true_label``, ``predicted_label``, ``n_tasks``: every pair of the labels seen (zero counts included),
        sorted by both labels; the diagonal sums to accuracy × n_gold of :func:`gold_metrics`.
    """
    gold = _as_text(truth, ["task", "label"]).drop_duplicates("task").rename(columns={"label": "true_label"})
    pred = _as_text(consensus, ["task", "label"]).rename(columns={"label": "predicted_label"})
    both = gold.merge(pred, on="task")
    classes = sorted(set(both["true_label"]) | set(both["predicted_label"]))
    counts = both.groupby(["true_label", "predicted_label"]).size()
    grid = pd.MultiIndex.from_product([classes, classes], names=["true_label", "predicted_label"])
    return counts.reindex(grid, fill_value=0).rename("n_tasks").astype("int64").reset_index()


def majority_changes(labels: pd.DataFrame, consensus: pd.DataFrame, coded: LabelMatrix | None = None) -> pd.DataFrame:
    """The tasks whose consensus label is not a majority-vote label (what the model changed against the vote).

    A task's majority labels are its most frequent labels (all of them when tied), so a tie broken either way
    is no change: majority vote itself changes nothing.

    Parameters
    ----------
    labels : pandas.DataFrame
        task, label (rows with a missing label are not votes).
    consensus : pandas.DataFrame
        task, label: one row per task.
    coded : LabelMatrix, optional
        The same answered labels as integer codes, when the caller has them (a fit does): the vote counts are
        then one ``bincount`` of task·M + class instead of a factorisation of the text columns (0.3 s of a
        10^6-label run); the result is the same table.

    Returns
    -------
    pandas.DataFrame
        ``task``, ``label`` (the consensus), ``majority_labels`` (``|``-joined), ``majority_share`` (votes of the
        majority label / labels of the task), ``n_labels``; one row per changed task, the clearest majorities first.
    """
    if coded is not None:
        return _changes_from_codes(coded, consensus)
    lab = _as_text(labels, ["task", "label"])
    # integer codes, one sort of task·L + label: O(n log n) on integers, no group-by over text (a 10^7-label run spent
    # 55 s in the text version); the text of the few changed tasks is assembled at the end
    t_codes, t_ids = pd.factorize(lab["task"].to_numpy(dtype=object))
    l_codes, l_ids = pd.factorize(lab["label"].to_numpy(dtype=object))
    n_lab = max(len(l_ids), 1)
    keys, counts = np.unique(t_codes.astype(np.int64) * n_lab + l_codes, return_counts=True)
    key_task = keys // n_lab
    total = np.bincount(t_codes, minlength=len(t_ids))
    top = np.zeros(len(t_ids), dtype=np.int64)
    np.maximum.at(top, key_task, counts)
    top_keys = keys[counts == top[key_task]]  # sorted: the (task, label) pairs that are a majority label
    pred = _as_text(consensus, ["task", "label"])
    pt = pd.Index(t_ids).get_indexer(pred["task"].to_numpy(dtype=object))
    pl = pd.Index(l_ids).get_indexer(pred["label"].to_numpy(dtype=object))
    asked = pt.astype(np.int64) * n_lab + pl
    pos = np.minimum(np.searchsorted(top_keys, asked), max(top_keys.size - 1, 0))
    in_majority = (pl >= 0) & (top_keys.size > 0) & (top_keys[pos] == asked if top_keys.size else False)
    changed_rows = np.flatnonzero((pt >= 0) & ~in_majority)
    tasks = pt[changed_rows]
    chosen = np.isin(key_task, tasks) & (counts == top[key_task])
    majority = (
        pd.DataFrame({"t": key_task[chosen], "label": l_ids[keys[chosen] % n_lab]})
        .groupby("t")["label"]
        .agg(lambda s: "|".join(sorted(s)))
    )
    out = pd.DataFrame(
        {
            "task": pred["task"].to_numpy(dtype=object)[changed_rows],
            "label": pred["label"].to_numpy(dtype=object)[changed_rows],
            "majority_labels": majority.reindex(tasks).to_numpy(dtype=object),
            "majority_share": top[tasks] / total[tasks],
            "n_labels": total[tasks].astype("int64"),
        }
    )
    return out.sort_values(
        ["majority_share", "n_labels", "task"], ascending=[False, False, True], kind="stable"
    ).reset_index(drop=True)


def _changes_from_codes(lm: LabelMatrix, consensus: pd.DataFrame) -> pd.DataFrame:
    """:func:`majority_changes` from ``lm``'s codes: votes n_tl = #{labels of t with class l}, top_t = max_l n_tl; a
    task changed when its consensus class c has n_tc < top_t (a class it never got, or no class, included)."""
    m = max(lm.n_classes, 1)
    votes = np.bincount(lm.task_idx.astype(np.int64) * m + lm.class_idx, minlength=lm.n_tasks * m).reshape(
        lm.n_tasks, m
    )
    total, top = votes.sum(axis=1), votes.max(axis=1)
    pred = _as_text(consensus, ["task", "label"])
    task_text, label_text = pred["task"].to_numpy(dtype=object), pred["label"].to_numpy(dtype=object)
    pt = pd.Index(lm.tasks.astype(str)).get_indexer(task_text)
    class_text = lm.classes.astype(str)
    pl = pd.Index(class_text).get_indexer(label_text)
    known = pt >= 0
    got = np.where(known & (pl >= 0), votes[np.maximum(pt, 0), np.maximum(pl, 0)], -1)
    changed_rows = np.flatnonzero(known & (got < top[np.maximum(pt, 0)]))
    tasks = pt[changed_rows]
    # the majority classes of each changed task as one bit pattern; each distinct pattern joined once, classes in
    # text order (the text version's sorted join)
    order = np.argsort(class_text, kind="stable")
    is_top = votes[tasks][:, order] == top[tasks][:, None]
    bits = is_top @ (1 << np.arange(m, dtype=np.int64)) if tasks.size else np.zeros(0, np.int64)
    patterns, inverse = np.unique(bits, return_inverse=True)
    names = class_text[order]
    joined = np.array(["|".join(names[(p >> np.arange(m)) & 1 == 1]) for p in patterns], dtype=object)
    out = pd.DataFrame(
        {
            "task": task_text[changed_rows],
            "label": label_text[changed_rows],
            "majority_labels": joined[inverse.reshape(-1)] if tasks.size else np.empty(0, dtype=object),
            "majority_share": top[tasks] / total[tasks],
            "n_labels": total[tasks].astype("int64"),
        }
    )
    return out.sort_values(
        ["majority_share", "n_labels", "task"], ascending=[False, False, True], kind="stable"
    ).reset_index(drop=True)


@dataclass(frozen=True)
class SkillsReview:
    """What a skills run adds for the people who act on it (the report's "What to act on", the warehouse).

    Attributes
    ----------
    tables : dict
        Output tables: ``gold_workers`` (:func:`gold_by_worker`) and ``gold_confusion`` (:func:`confusion_matrix`)
        when gold labels were given.
    metrics : dict
        ``n_changed_vs_majority``: tasks whose consensus is not a majority-vote label.
    record : dict
        The manifest's ``review``: the count, the tasks labelled, and up to ``examples`` changed tasks.
    """

    tables: dict[str, pd.DataFrame]
    metrics: dict[str, int]
    record: dict[str, object]


def review_skills(
    labels: pd.DataFrame,
    consensus: pd.DataFrame,
    truth: pd.DataFrame | None = None,
    examples: int = 10,
    coded: LabelMatrix | None = None,
) -> SkillsReview:
    """Gold-measured worker accuracy and confusion matrix (with ``truth``), and the changes against majority vote
    (``coded``: the labels' codes, see :func:`majority_changes`)."""
    changed = majority_changes(labels, consensus, coded)
    tables = {}
    if truth is not None:
        tables = {"gold_workers": gold_by_worker(labels, truth), "gold_confusion": confusion_matrix(consensus, truth)}
    record: dict[str, object] = {
        "n_changed_vs_majority": len(changed),
        "n_tasks": int(consensus["task"].nunique()),
        "changed_vs_majority": changed.head(examples).to_dict("records"),
    }
    return SkillsReview(tables, {"n_changed_vs_majority": len(changed)}, record)


@dataclass(frozen=True)
class ReviewPart:
    """:func:`review_skills` and :func:`gold_metrics` of one part of the tasks (a bucket of a partitioned run).

    Every quantity is a sum over tasks, so the parts of disjoint task sets add up (:func:`merge_review_parts`).
    """

    n_tasks: int
    n_gold: int
    n_correct: int
    n_gold_label_unknown: int
    gold_workers: pd.DataFrame | None
    gold_confusion: pd.DataFrame | None
    n_changed: int
    changed: pd.DataFrame


def review_part(
    labels: pd.DataFrame,
    consensus: pd.DataFrame,
    truth: pd.DataFrame | None,
    classes: Sequence[str],
    examples: int = 10,
    coded: LabelMatrix | None = None,
) -> ReviewPart:
    """The review of the tasks of ``consensus`` (all of their labels are in ``labels``); ``truth`` may hold others
    (``coded``: the labels' codes, see :func:`majority_changes`)."""
    gold = None
    if truth is not None:
        tasks = _as_text(consensus, ["task"])["task"]
        text = _as_text(truth, ["task", "label"]).drop_duplicates("task")
        gold = text[_text_in(text["task"], tasks)]
    gold = gold if gold is not None and len(gold) else None
    changed = majority_changes(labels, consensus, coded)
    g = gold_metrics(consensus, gold, classes) if gold is not None else None
    return ReviewPart(
        n_tasks=int(consensus["task"].nunique()),
        n_gold=g.n_gold if g else 0,
        n_correct=round(g.accuracy * g.n_gold) if g else 0,
        n_gold_label_unknown=g.n_gold_label_unknown if g else 0,
        gold_workers=gold_by_worker(labels, gold) if gold is not None else None,
        gold_confusion=confusion_matrix(consensus, gold) if gold is not None else None,
        n_changed=len(changed),
        changed=changed.head(examples),
    )


def merge_review_parts(
    parts: Sequence[ReviewPart], truth: pd.DataFrame | None, examples: int = 10
) -> tuple[SkillsReview, dict[str, float | int]]:
    """The review and the gold metrics of all the tasks from those of disjoint parts (:func:`review_part`).

    Equal to :func:`review_skills` and :func:`gold_metrics` on the whole: counts are summed, accuracies recomputed
    from the sums, the examples of changed tasks are the first ``examples`` of the parts' first ones.
    """
    changed = pd.concat([p.changed for p in parts], ignore_index=True) if parts else pd.DataFrame()
    if len(changed):
        changed = changed.sort_values(
            ["majority_share", "n_labels", "task"], ascending=[False, False, True], kind="stable"
        ).reset_index(drop=True)
    n_changed = sum(p.n_changed for p in parts)
    record: dict[str, object] = {
        "n_changed_vs_majority": n_changed,
        "n_tasks": sum(p.n_tasks for p in parts),
        "changed_vs_majority": changed.head(examples).to_dict("records"),
    }
    tables: dict[str, pd.DataFrame] = {}
    metrics: dict[str, float | int] = {}
    if truth is not None:
        workers = [p.gold_workers for p in parts if p.gold_workers is not None]
        if workers:
            gw = pd.concat(workers).groupby("worker", sort=True)[["n_gold_labels", "n_gold_correct"]].sum()
            gw = gw.reset_index().astype({"n_gold_labels": "int64", "n_gold_correct": "int64"})
            gw["gold_accuracy"] = gw["n_gold_correct"] / gw["n_gold_labels"]
            tables["gold_workers"] = gw.sort_values(
                ["n_gold_labels", "worker"], ascending=[False, True], kind="stable"
            ).reset_index(drop=True)
        conf = [p.gold_confusion for p in parts if p.gold_confusion is not None]
        if conf:
            counts = pd.concat(conf).groupby(["true_label", "predicted_label"])["n_tasks"].sum()
            classes = sorted(set(counts.index.get_level_values(0)) | set(counts.index.get_level_values(1)))
            grid = pd.MultiIndex.from_product([classes, classes], names=["true_label", "predicted_label"])
            tables["gold_confusion"] = counts.reindex(grid, fill_value=0).astype("int64").reset_index()
        n_gold = sum(p.n_gold for p in parts)
        n_truth = int(_as_text(truth, ["task"])["task"].nunique())
        acc = sum(p.n_correct for p in parts) / n_gold if n_gold else float("nan")
        metrics = GoldMetrics(
            accuracy=acc,
            error=1.0 - acc if n_gold else float("nan"),
            n_gold=n_gold,
            n_gold_unlabelled=n_truth - n_gold,
            n_gold_label_unknown=sum(p.n_gold_label_unknown for p in parts),
        ).as_dict()
    return SkillsReview(tables, {"n_changed_vs_majority": n_changed}, record), metrics
