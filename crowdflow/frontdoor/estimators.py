"""Crowd-Kit–style estimators over crowdflow's aggregation methods: change one import, keep your code.

``from crowdkit.aggregation import DawidSkene`` → ``from crowdflow import DawidSkene``: the same constructor
arguments where they mean the same thing (``n_iter``, ``tol``; ``default_skill`` and ``on_missing_skill`` of
majority vote), the same methods (``fit(data) -> self``, ``fit_predict(data) -> Series``,
``fit_predict_proba(data) -> DataFrame``) on the same input (a DataFrame with ``task, worker, label``
columns), and fitted attributes laid out as Crowd-Kit 1.4.2 lays them out (names, shapes, index names and
order, column order, dtypes):

- ``labels_``: Series indexed by ``task``, named ``agg_label``, values of the label column's dtype;
- ``probas_``: DataFrame, tasks × labels (index ``task``, columns ``label``), each row a distribution;
- ``skills_``: Series indexed by ``worker``, named ``skill``: each worker's accuracy (probability of a right
  answer; majority vote: agreement with the aggregated labels);
- ``priors_`` (named ``prior``, indexed by ``label``) and ``errors_`` (Dawid–Skene): the confusion probabilities
  P(observed label | true label), one row per (``worker``, observed ``label``) pair of the data, one column per
  true label.

Ids and labels keep their dtype (integer tasks stay integers). The order is Crowd-Kit's (with the pinned
pandas 3): tasks and labels in the order they first appear in the data (weighted majority vote: sorted, as
Crowd-Kit groups them), ``skills_`` sorted by worker except for :class:`OneCoinDawidSkene` (first appearance).

Where they differ from Crowd-Kit (``tests/test_estimators.py`` runs the same DataFrames through both):

- **Ties.** Crowd-Kit's label is the first tied label in its ``probas_`` column order (``idxmax``): the tied
  label seen first in the data (weighted vote: the smallest). ``tie_break="first"`` is that rule, and then
  :class:`MajorityVote` equals Crowd-Kit's on every task. The default, ``tie_break="random"``, breaks ties like
  the pipeline's majority vote: a draw among the tied labels from a generator seeded by ``seed``, indexed by
  (task, label) in sorted order, so the labels are the same on every rerun and under any row order, and a tie
  does not favour the label that happens to come first. ``"smallest"`` takes the first tied label in sorted
  order. Only tied tasks are affected; ``probas_`` never is.
- **Dawid–Skene stopping and smoothing.** ``tol`` bounds the largest change of any estimated probability from
  one EM iteration to the next (Crowd-Kit: the change of its evidence lower bound per answer, which it may stop
  on early, even on a decrease), and ``smoothing`` adds a pseudo-count to every count (default 0.01, the
  pipeline's; Crowd-Kit clips probabilities at 1e-10). Both run the same EM from the same start (majority-vote
  shares), so with ``smoothing=0`` and a small ``tol`` (and Crowd-Kit run for all ``n_iter``, ``tol=-inf``)
  labels are equal and probabilities agree to 1e-4 on every test set with 3 or more answers per task. With 2
  answers per task EM reaches degenerate maxima (posteriors exactly 0 or 1) where the two clip differently and
  end apart; a confusion row for a true label none of a worker's tasks has is 0/0 (Crowd-Kit fills it, we
  give 0). ``prior`` (default 0, the classic model) is the pipeline's ``ds_prior``.
- **Duplicates and missing values.** A repeated (task, worker) pair is refused (``duplicates="error"``, the
  pipeline's default; ``keep_first``/``keep_last`` keep one answer), a missing id or label is refused, naming
  the rows: :class:`~crowdflow.contracts.errors.InputError`. Crowd-Kit counts every row.
- **Not supported**: the gold-label correction and the initial error matrices of Crowd-Kit's ``DawidSkene.fit``.

:class:`RankOneSkills` (the pipeline's ``method: pgd``, rank-one PGD; docs/methods/skills.md) has no Crowd-Kit
counterpart; it has the same attributes plus ``workers_``, the pipeline's per-worker ``skills`` table.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal, Self, cast

import numpy as np
import pandas as pd

from crowdflow.contracts.errors import InputError
from crowdflow.labels import DuplicatePolicy, LabelMatrix
from crowdflow.skills import (
    SkillsOptions,
    canonical_label_matrix,
    dawid_skene,
    fit_skills,
    one_coin_dawid_skene,
    weighted_consensus,
    weighted_vote,
)
from crowdflow.skills.dawid_skene import DawidSkeneResult
from crowdflow.skills.types import TieBreak

log = logging.getLogger(__name__)

__all__ = ["DawidSkene", "MajorityVote", "OneCoinDawidSkene", "RankOneSkills"]

_SOURCE = "labels DataFrame"
_COLUMNS = ("task", "worker", "label")

#: How an estimator breaks a tie: a seeded draw, the first in sorted order, or the first in Crowd-Kit's order.
EstimatorTieBreak = Literal["random", "smallest", "first"]
Order = Literal["sorted", "appearance"]


def _codes(index: pd.Index, values: Any) -> np.ndarray:
    """Position of each value in ``index`` (−1 when absent)."""
    return np.asarray(index.get_indexer(pd.Index(values)), dtype=np.int64)


def _rows(mask: np.ndarray) -> list[int]:
    return (np.flatnonzero(mask) + 1).tolist()


@dataclass(frozen=True)
class _Encoded:
    """A labels DataFrame as dense codes, with the original values (and dtypes) of every id and label.

    Tasks and workers are coded in sorted order; labels in sorted order, or in order of first appearance when
    a Crowd-Kit tie-break needs that order (:func:`_encode`).
    """

    lm: LabelMatrix
    data: pd.DataFrame  # task, worker, label as given (after the duplicate policy), RangeIndex
    tasks: pd.Index  # position = task code
    workers: pd.Index
    classes: pd.Index

    def _order(self, index: pd.Index, column: str, order: Order) -> np.ndarray:
        if order == "sorted":
            return np.argsort(_rank(index), kind="stable")
        return np.asarray(pd.unique(_codes(index, self.data[column])), dtype=np.int64)

    def task_index(self, order: Order) -> tuple[np.ndarray, pd.Index]:
        """Task codes in ``order`` and the matching ``task`` index."""
        codes = self._order(self.tasks, "task", order)
        return codes, pd.Index(self.tasks.take(codes), name="task")

    def class_index(self, order: Order) -> tuple[np.ndarray, pd.Index]:
        """Label codes in ``order`` and the matching ``label`` index."""
        codes = self._order(self.classes, "label", order)
        return codes, pd.Index(self.classes.take(codes), name="label")

    def worker_index(self, order: Order) -> tuple[np.ndarray, pd.Index]:
        """Worker codes in ``order`` and the matching ``worker`` index."""
        codes = self._order(self.workers, "worker", order)
        return codes, pd.Index(self.workers.take(codes), name="worker")


def _rank(index: pd.Index) -> np.ndarray:
    """Sort keys of values that may not compare with each other (mixed types): sorted when possible, else by text."""
    try:
        return np.asarray(index.argsort(), dtype=np.int64).argsort()
    except TypeError:
        return np.argsort(np.asarray([str(v) for v in index]), kind="stable").argsort()


def _factorize(values: pd.Series, order: Order) -> tuple[np.ndarray, pd.Index]:
    """Dense codes in sorted value order (text order for values that cannot be compared) or first appearance."""
    codes, uniques = pd.factorize(values, sort=False)
    uniques = pd.Index(uniques)
    if order == "sorted":
        rank = _rank(uniques)
        codes, uniques = rank[codes], uniques.take(np.argsort(rank))
    return np.asarray(codes, dtype=np.int64), uniques


def _text_ids(values: pd.Index) -> np.ndarray:
    """Ids for the label matrix: the values as text, or their positions when two values read the same."""
    text = np.asarray([str(v) for v in values], dtype=object)
    if len(set(text.tolist())) < text.size:
        text = np.asarray([str(i) for i in range(text.size)], dtype=object)
    return text


def _encode(data: pd.DataFrame, duplicates: DuplicatePolicy, class_order: Order = "sorted") -> _Encoded:
    """Check and encode Crowd-Kit's input: ``task, worker, label`` columns, no missing value, one answer per pair."""
    if not isinstance(data, pd.DataFrame):
        raise InputError(f"expected a pandas DataFrame with columns task, worker, label, got {type(data).__name__}")
    missing = [c for c in _COLUMNS if c not in data.columns]
    if missing:
        raise InputError(
            "missing required column" + ("s " if len(missing) > 1 else " ") + ", ".join(f"'{m}'" for m in missing)
            + f"; the DataFrame has columns {list(data.columns)} (the estimators read task, worker, label)",
            path=_SOURCE,
            column=missing[0],
        )  # fmt: skip
    df = data.loc[:, list(_COLUMNS)].reset_index(drop=True)
    if df.empty:
        raise InputError("no rows in the labels DataFrame", path=_SOURCE)
    for col in _COLUMNS:
        null = df[col].isna().to_numpy(dtype=bool)
        if null.any():
            raise InputError(
                f"{int(null.sum())} missing values; drop those rows", path=_SOURCE, column=col, rows=_rows(null)
            )
    if duplicates not in ("error", "keep_first", "keep_last"):
        raise ValueError(f"unknown duplicates policy {duplicates!r}; use 'error', 'keep_first' or 'keep_last'")
    dup = df.duplicated(["task", "worker"], keep=False).to_numpy(dtype=bool)
    if dup.any():
        if duplicates == "error":
            raise InputError(
                f"{int(dup.sum())} rows repeat a (task, worker) pair; keep one answer per pair "
                "(duplicates='keep_first' or 'keep_last')",
                path=_SOURCE,
                column="task,worker",
                rows=_rows(dup),
            )
        keep: Literal["first", "last"] = "first" if duplicates == "keep_first" else "last"
        df = df[~df.duplicated(["task", "worker"], keep=keep)].reset_index(drop=True)
    t_idx, tasks = _factorize(df["task"], "sorted")
    w_idx, workers = _factorize(df["worker"], "sorted")
    c_idx, classes = _factorize(df["label"], class_order)
    lm = LabelMatrix(
        workers=_text_ids(workers),
        tasks=_text_ids(tasks),
        classes=_text_ids(classes),
        worker_idx=w_idx,
        task_idx=t_idx,
        class_idx=c_idx,
    )
    return _Encoded(canonical_label_matrix(lm), df, tasks, workers, classes)


def _library_tie_break(tie_break: str) -> TieBreak:
    """The vote's rule for an estimator's ``tie_break`` (``first``: ``smallest`` over labels in Crowd-Kit's order)."""
    if tie_break == "first":
        return "smallest"
    if tie_break not in ("random", "smallest"):
        raise ValueError(f"unknown tie_break {tie_break!r}; use 'random', 'smallest' or 'first'")
    return cast(TieBreak, tie_break)


def _labels(enc: _Encoded, winner: np.ndarray, order: Order) -> pd.Series:
    """``labels_``: one label per task (``winner`` = label code per task code)."""
    rows, index = enc.task_index(order)
    return pd.Series(enc.classes.take(winner[rows]), index=index, name="agg_label")


def _probas(enc: _Encoded, post: np.ndarray, order: Order) -> pd.DataFrame:
    """``probas_``: tasks × labels (``post`` = task code × label code)."""
    rows, index = enc.task_index(order)
    cols, columns = enc.class_index(order)
    return pd.DataFrame(post[np.ix_(rows, cols)], index=index, columns=columns)


def _winner_codes(enc: _Encoded, labels: pd.Series) -> np.ndarray:
    """Label codes of the library's consensus ``label`` column (the label matrix's text ids)."""
    return _codes(pd.Index(enc.lm.classes), labels.to_numpy())


class _Aggregator:
    """The Crowd-Kit classification-aggregator interface: ``fit``, ``fit_predict``, ``fit_predict_proba``."""

    labels_: pd.Series
    probas_: pd.DataFrame
    skills_: pd.Series
    _params: tuple[str, ...] = ()
    tie_break: EstimatorTieBreak = "random"

    def fit(self, data: pd.DataFrame) -> Self:
        raise NotImplementedError

    def fit_predict(self, data: pd.DataFrame) -> pd.Series:
        """Fit on ``data`` (``task, worker, label``) and return ``labels_``: the label of each task."""
        return self.fit(data).labels_

    def fit_predict_proba(self, data: pd.DataFrame) -> pd.DataFrame:
        """Fit on ``data`` and return ``probas_``: tasks × labels, each row a probability distribution."""
        return self.fit(data).probas_

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor arguments (scikit-learn's convention, so ``sklearn.base.clone`` works)."""
        return {name: getattr(self, name) for name in self._params}

    def set_params(self, **params: Any) -> Self:
        """Change constructor arguments (scikit-learn's convention)."""
        for name, value in params.items():
            if name not in self._params:
                raise ValueError(f"unknown parameter {name!r} of {type(self).__name__}; use {list(self._params)}")
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"


def _accuracy(enc: _Encoded, labels: pd.Series) -> pd.Series:
    """Crowd-Kit's majority-vote skill: the share of a worker's answers equal to the aggregated label (sorted)."""
    agg = np.full(len(enc.tasks), -1, dtype=np.int64)
    agg[_codes(enc.tasks, labels.index)] = _codes(enc.classes, labels.to_numpy())
    task_codes = _codes(enc.tasks, enc.data["task"])
    hit = (_codes(enc.classes, enc.data["label"]) == agg[task_codes]).astype(np.float64)
    workers = _codes(enc.workers, enc.data["worker"])
    num = np.bincount(workers, weights=hit, minlength=len(enc.workers))
    den = np.bincount(workers, minlength=len(enc.workers)).astype(np.float64)
    codes, index = enc.worker_index("sorted")
    return pd.Series((num / den)[codes], index=index, name="skill")


class MajorityVote(_Aggregator):
    """Majority vote: each task gets its most frequent label (with ``skills``: the largest sum of worker weights).

    ``probas_`` holds each task's vote shares; ``skills_`` each worker's agreement with the aggregated labels.
    docs/methods/skills.md §7.1.

    Parameters
    ----------
    default_skill : float, optional
        With ``on_missing_skill="value"``: the weight of a worker the ``skills`` of :meth:`fit` do not list.
    on_missing_skill : {"error", "ignore", "value"}
        Weighted vote, a worker without a skill: refuse (``InputError``), drop that worker's answers, or use
        ``default_skill`` (Crowd-Kit's arguments).
    tie_break : {"random", "smallest", "first"}
        ``random`` (default, the pipeline's rule): a seeded draw among the tied labels; ``smallest``: the first in
        sorted order; ``first``: Crowd-Kit's rule (the first in ``probas_`` column order).
    seed : int
        Seed of the random tie-break.
    duplicates : {"error", "keep_first", "keep_last"}
        A repeated (task, worker) pair: refused, or one answer kept.

    Examples
    --------
    >>> import pandas as pd
    >>> from crowdflow import MajorityVote
    >>> df = pd.DataFrame({"task": [1, 1, 1, 2, 2], "worker": ["a", "b", "c", "a", "b"], "label": [0, 0, 1, 1, 1]})
    >>> MajorityVote().fit_predict(df).to_dict()
    {1: 0, 2: 1}
    """

    _params = ("default_skill", "on_missing_skill", "tie_break", "seed", "duplicates")

    def __init__(
        self,
        default_skill: float | None = None,
        on_missing_skill: Literal["error", "ignore", "value"] = "error",
        *,
        tie_break: EstimatorTieBreak = "random",
        seed: int = 0,
        duplicates: DuplicatePolicy = "error",
    ) -> None:
        self.default_skill = default_skill
        self.on_missing_skill = on_missing_skill
        self.tie_break = tie_break
        self.seed = seed
        self.duplicates = duplicates

    def _kept(self, data: pd.DataFrame, skills: pd.Series) -> tuple[pd.DataFrame, pd.Series]:
        """The answers to count and each worker's weight, after Crowd-Kit's ``on_missing_skill`` rule."""
        if self.on_missing_skill not in ("error", "ignore", "value"):
            raise ValueError(f"unknown on_missing_skill {self.on_missing_skill!r}; use 'error', 'ignore' or 'value'")
        if self.on_missing_skill != "value" and self.default_skill is not None:
            raise ValueError("default_skill is used only with on_missing_skill='value'")
        if not isinstance(data, pd.DataFrame) or "worker" not in data.columns:
            return data, skills  # _encode names what is wrong
        weight = data["worker"].map(skills)
        unknown = weight.isna().to_numpy(dtype=bool)
        if not unknown.any():
            return data, skills
        if self.on_missing_skill == "value":
            if self.default_skill is None:
                raise ValueError("on_missing_skill='value' needs a default_skill")
            extra = pd.Series(float(self.default_skill), index=pd.unique(data.loc[unknown, "worker"]))
            return data, pd.concat([skills, extra])
        if self.on_missing_skill == "ignore":
            kept = data[~unknown]
            lost = set(data["task"]) - set(kept["task"])
            if lost:
                raise InputError(
                    f"{len(lost)} tasks have no worker with a known skill, e.g. {sorted(map(str, lost))[:5]}",
                    path=_SOURCE,
                    column="worker",
                )
            return kept, skills
        names = [str(w) for w in pd.unique(data.loc[unknown, "worker"])[:5]]
        raise InputError(
            f"no skill for {int(unknown.sum())} answers (workers {names}); give every worker a skill or set "
            "on_missing_skill='ignore' or 'value'",
            path=_SOURCE,
            column="worker",
            rows=_rows(unknown),
        )

    def fit(self, data: pd.DataFrame, skills: pd.Series | None = None) -> Self:
        """Aggregate ``data`` (``task, worker, label``); ``skills`` (a Series indexed by worker) weights the votes.

        Returns
        -------
        MajorityVote
            ``self``, with ``labels_``, ``probas_`` and ``skills_``.
        """
        # Crowd-Kit counts the votes in order of first appearance, a weighted vote in sorted order
        order: Order = "appearance" if skills is None else "sorted"
        weights = None
        if skills is not None:
            data, skills = self._kept(data, skills)
        enc = _encode(data, self.duplicates, order if self.tie_break == "first" else "sorted")
        if skills is not None:
            weights = enc.workers.map(cast(Any, skills)).to_numpy(dtype=np.float64)
        winner, scores, _ = weighted_vote(enc.lm, weights, _library_tie_break(self.tie_break), self.seed)
        with np.errstate(invalid="ignore", divide="ignore"):
            post = scores / scores.sum(axis=1, keepdims=True)
        self.labels_ = _labels(enc, winner, order)
        self.probas_ = _probas(enc, post, order)
        self.skills_ = _accuracy(enc, self.labels_)
        return self

    def fit_predict(self, data: pd.DataFrame, skills: pd.Series | None = None) -> pd.Series:
        """Fit on ``data`` (optionally weighted by ``skills``) and return ``labels_``."""
        return self.fit(data, skills).labels_

    def fit_predict_proba(self, data: pd.DataFrame, skills: pd.Series | None = None) -> pd.DataFrame:
        """Fit on ``data`` (optionally weighted by ``skills``) and return ``probas_``."""
        return self.fit(data, skills).probas_


class DawidSkene(_Aggregator):
    """Dawid–Skene: one confusion matrix per worker, fitted by EM (Dawid and Skene, JRSS C, 1979).

    P(worker i answers m | true label l) = π_i[l, m], class prior q_l; EM from the majority-vote shares
    (docs/methods/skills.md §7.2; the EM loop is compiled and its steps extrapolated by SQUAREM, the same fixed
    point in fewer steps). Fitted: ``labels_``, ``probas_`` (the posteriors),
    ``priors_`` (q), ``errors_`` (π: rows (worker, observed label), one column per true label), ``skills_``
    (accuracy Σ_l q_l π_i[l, l], sorted by worker; Crowd-Kit's ``DawidSkene`` has none), ``loss_history_``
    (observed-data log-likelihood per answer at each E-step of a kept point), ``n_iter_`` (EM steps taken) and
    ``converged_``.

    Parameters
    ----------
    n_iter : int
        Most EM steps, each one pass over the answers, extrapolation's steps included (Crowd-Kit's argument).
    tol : float
        Stop once no estimated probability changes by more than ``tol`` (Crowd-Kit: the change of the evidence
        lower bound per answer).
    smoothing : float
        Pseudo-count added to every count (keeps probabilities away from 0 and 1).
    prior : float
        Extra pseudo-count on each confusion matrix's diagonal (the pipeline's ``ds_prior``, 1 in its default
        ``method: ds``). Default 0: the classic model, as Crowd-Kit's ``DawidSkene`` (``OneCoinDawidSkene``: 0 only).
    tie_break : {"random", "smallest", "first"}
        How a task whose top posteriors tie is decided (``first``: Crowd-Kit's rule).
    seed : int
    duplicates : {"error", "keep_first", "keep_last"}

    Examples
    --------
    >>> import pandas as pd
    >>> from crowdflow import DawidSkene
    >>> df = pd.DataFrame({"task": [1, 1, 1, 2, 2, 2], "worker": list("abcabc"), "label": [0, 0, 1, 1, 1, 1]})
    >>> DawidSkene(n_iter=50).fit_predict(df).to_dict()
    {1: 0, 2: 1}
    """

    _params = ("n_iter", "tol", "smoothing", "prior", "tie_break", "seed", "duplicates")
    _one_coin = False

    priors_: pd.Series
    errors_: pd.DataFrame
    loss_history_: list[float]
    n_iter_: int
    converged_: bool

    def __init__(
        self,
        n_iter: int = 100,
        tol: float = 1e-5,
        *,
        smoothing: float = 0.01,
        prior: float = 0.0,
        tie_break: EstimatorTieBreak = "random",
        seed: int = 0,
        duplicates: DuplicatePolicy = "error",
    ) -> None:
        self.n_iter = n_iter
        self.tol = tol
        self.smoothing = smoothing
        self.prior = prior
        self.tie_break = tie_break
        self.seed = seed
        self.duplicates = duplicates

    def fit(self, data: pd.DataFrame) -> Self:
        """Fit the model to ``data`` (``task, worker, label``) by EM.

        Returns
        -------
        DawidSkene
            ``self``, fitted.
        """
        enc = _encode(data, self.duplicates, "appearance" if self.tie_break == "first" else "sorted")
        if enc.lm.n_classes < 2:
            raise InputError(
                f"Dawid-Skene needs at least 2 label classes, the data have {enc.lm.n_classes}", path=_SOURCE
            )
        common: dict[str, Any] = {
            "tol": self.tol,
            "max_iter": self.n_iter,
            "smoothing": self.smoothing,
            "tie_break": _library_tie_break(self.tie_break),
            "seed": self.seed,
        }
        if self._one_coin:
            if self.prior:
                raise ValueError("prior is a pseudo-count of the full confusion matrices; OneCoinDawidSkene has none")
            res = one_coin_dawid_skene(enc.lm, **common)
        else:
            res = dawid_skene(enc.lm, prior=self.prior, **common)
        cols, labels = enc.class_index("appearance")
        self.labels_ = _labels(enc, _winner_codes(enc, res.consensus["label"]), "appearance")
        self.probas_ = _probas(enc, res.posteriors, "appearance")
        self.priors_ = pd.Series(res.class_prior[cols], index=labels, name="prior")
        self.errors_ = self._errors(enc, res, cols, labels)
        self.skills_ = self._skills(enc, res)
        self.loss_history_ = (res.log_likelihood / enc.lm.n_labels).tolist()
        self.n_iter_ = int(res.iterations)
        self.converged_ = bool(res.converged)
        return self

    @staticmethod
    def _errors(enc: _Encoded, res: DawidSkeneResult, cols: np.ndarray, labels: pd.Index) -> pd.DataFrame:
        """π as Crowd-Kit lays it out: a row per (worker, observed label) pair of the data, in order of appearance."""
        m = enc.lm.n_classes
        pairs = pd.unique(_codes(enc.workers, enc.data["worker"]) * m + _codes(enc.classes, enc.data["label"]))
        pw, pm = pairs // m, pairs % m
        index = pd.MultiIndex.from_arrays([enc.workers.take(pw), enc.classes.take(pm)], names=["worker", "label"])
        values = res.confusion[pw, :, pm][:, cols]  # (pair, true label)
        # Crowd-Kit's columns: text labels keep their string dtype, other labels become an object index
        columns = (
            labels.rename(None)
            if isinstance(labels.dtype, pd.StringDtype)
            else pd.Index(labels, dtype=object).rename(None)
        )
        return pd.DataFrame(values, index=index, columns=columns)

    def _skills(self, enc: _Encoded, res: DawidSkeneResult) -> pd.Series:
        codes, index = enc.worker_index("sorted")
        return pd.Series(res.workers["accuracy"].to_numpy(dtype=np.float64)[codes], index=index, name="skill")


class OneCoinDawidSkene(DawidSkene):
    """One-coin Dawid–Skene: one accuracy p_i per worker, wrong answers uniform over the other labels (EM).

    π_i[l, l] = p_i and π_i[l, m] = (1 − p_i)/(M − 1); the model of the rank-one method
    (docs/methods/skills.md §7.2; Zhang, Chen, Zhou and Jordan, JMLR 2016). ``skills_`` is p_i, in the order
    workers first appear in the data (Crowd-Kit's). Same parameters and attributes as :class:`DawidSkene`.
    """

    _one_coin = True

    def _skills(self, enc: _Encoded, res: DawidSkeneResult) -> pd.Series:
        codes, index = enc.worker_index("appearance")
        return pd.Series(res.workers["accuracy"].to_numpy(dtype=np.float64)[codes], index=index, name="skill")


class RankOneSkills(_Aggregator):
    """Worker skills by rank-one matrix completion and the weighted vote they imply (the pipeline's ``method: pgd``).

    Ma, Olshevsky, Saligrama and Szepesvari (JMLR): skills s_i with E[C_ij] = s_i s_j fitted to the workers'
    agreement rates by projected gradient descent, then a MAP vote weighted by log((1 + (M − 1) s_i)/(1 − s_i))
    (docs/methods/skills.md §2). ``skills_`` is the accuracy ((M − 1) s_i + 1)/M, sorted by worker (NaN for a
    worker whose skill is not identifiable: alone, or in a bipartite component of the worker graph; logged);
    ``workers_`` the pipeline's ``skills`` table indexed by worker (skill, vote weight, status, …);
    ``probas_`` the posterior of the weighted vote (majority-vote shares for a task no identified worker labelled);
    ``labels_`` and ``probas_`` are laid out as :class:`MajorityVote`'s.

    Parameters
    ----------
    n_iter : int
        Most iterations of the fit (the options' ``max_iter``).
    tol : float
        Stop once no skill changes by more than ``tol``.
    tie_break : {"random", "smallest", "first"}
    seed : int
    duplicates : {"error", "keep_first", "keep_last"}
    **options
        Other fields of :class:`~crowdflow.skills.SkillsOptions` (``tau``, ``solver``, ``weighting``,
        ``fallback``, …), validated when fitting.

    Examples
    --------
    >>> import pandas as pd
    >>> from crowdflow import RankOneSkills
    >>> df = pd.DataFrame({"task": [1, 1, 1, 2, 2, 2], "worker": list("abcabc"), "label": [0, 0, 1, 1, 1, 1]})
    >>> RankOneSkills().fit_predict(df).to_dict()
    {1: 0, 2: 1}
    """

    _params = ("n_iter", "tol", "tie_break", "seed", "duplicates")

    workers_: pd.DataFrame

    def __init__(
        self,
        n_iter: int = 5000,
        tol: float = 1e-7,
        *,
        tie_break: EstimatorTieBreak = "random",
        seed: int = 0,
        duplicates: DuplicatePolicy = "error",
        **options: Any,
    ) -> None:
        self.n_iter = n_iter
        self.tol = tol
        self.tie_break = tie_break
        self.seed = seed
        self.duplicates = duplicates
        self.options = dict(options)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {**super().get_params(deep), **self.options}

    def set_params(self, **params: Any) -> Self:
        for name, value in params.items():
            if name in self._params:
                setattr(self, name, value)
            else:
                self.options[name] = value
        return self

    def fit(self, data: pd.DataFrame) -> Self:
        """Fit skills and labels to ``data`` (``task, worker, label``).

        Raises
        ------
        pydantic.ValidationError
            An option outside its range.
        """
        opts = SkillsOptions(
            method="pgd",
            max_iter=self.n_iter,
            tol=self.tol,
            tie_break=_library_tie_break(self.tie_break),
            seed=self.seed,
            **self.options,
        )
        enc = _encode(data, self.duplicates, "appearance" if self.tie_break == "first" else "sorted")
        table = fit_skills(enc.lm, opts).skills
        ident = table["identifiable"].to_numpy(dtype=bool)
        if not ident.all():
            log.warning(
                "%d of %d workers have no identifiable skill (alone or in a bipartite component of the worker graph)",
                int((~ident).sum()),
                len(table),
            )
        weights = table["vote_weight"].fillna(0.0).to_numpy(dtype=np.float64)
        cons = weighted_consensus(enc.lm, weights, ident, opts.fallback, opts.tie_break, opts.seed)
        post = cons.posterior.copy()
        fallback = cons.consensus["fallback"].to_numpy(dtype=bool)
        if fallback.any() and opts.fallback == "mv":  # the label is the majority vote: so are its probabilities
            _, votes, _ = weighted_vote(enc.lm, None, opts.tie_break, opts.seed)
            post[fallback] = (votes / votes.sum(axis=1, keepdims=True))[fallback]
        self.labels_ = _labels(enc, _winner_codes(enc, cons.consensus["label"]), "appearance")
        self.probas_ = _probas(enc, post, "appearance")
        codes, workers = enc.worker_index("sorted")
        self.skills_ = pd.Series(table["accuracy"].to_numpy(dtype=np.float64)[codes], index=workers, name="skill")
        self.workers_ = table.iloc[codes].drop(columns="worker").set_axis(workers, axis=0)
        return self


class EBCC(_Aggregator):
    """Enhanced Bayesian classifier combination (Li, Rubinstein and Cohn, ICML 2019), the pipeline's ``method: ebcc``.

    Each class's tasks fall into M subtypes; worker j answers l on a task of class k and subtype m with probability
    v_jkm[l], so workers who err together on a subtype are correlated. τ ~ Dir(α), π_k ~ Dir(a_π/M), v_jkm ~ Dir(β_k)
    with β_kk = a_v and β_kl = b_v, fitted by mean-field variational inference from ``restarts`` random starts, the
    largest evidence lower bound kept (:func:`crowdflow.skills.ebcc.ebcc`; docs/methods/skills.md §7.5). Crowd-Kit
    has no EBCC; the interface is its classification aggregators'. Fitted: ``labels_``, ``probas_`` (q(z)),
    ``priors_`` (E[τ]), ``errors_`` (Σ_m E[π_km] E[v_jkm], laid out as :class:`DawidSkene`'s), ``skills_`` (accuracy
    Σ_k E[τ_k] errors, sorted by worker), ``loss_history_`` (ELBO per answer after each sweep), ``n_iter_`` and
    ``converged_``.

    Parameters
    ----------
    n_subtypes : int
        M (authors: 10; 1 is Bayesian Dawid–Skene).
    n_iter : int
        Most sweeps per restart (authors: 500).
    tol : float
        Stop once the ELBO changes by at most ``tol`` times its magnitude.
    restarts : int
        Random starts; the largest final ELBO is kept (authors: 40).
    subtype_prior, class_prior, diag_prior, off_diag_prior : float
        a_π, α (``None``: the majority-vote class counts), a_v, b_v (authors: 0.1, None, 4, 1).
    tie_break : {"random", "smallest", "first"}
    seed : int
        Seeds the random starts and the random tie-break.
    duplicates : {"error", "keep_first", "keep_last"}

    Examples
    --------
    >>> import pandas as pd
    >>> from crowdflow import EBCC
    >>> df = pd.DataFrame({"task": [1, 1, 1, 2, 2, 2, 3, 3, 3], "worker": list("abcabcabc"),
    ...                    "label": [0, 0, 1, 1, 1, 1, 0, 0, 0]})
    >>> EBCC().fit_predict(df).to_dict()
    {1: 0, 2: 1, 3: 0}
    """

    _params = (
        "n_subtypes",
        "n_iter",
        "tol",
        "restarts",
        "subtype_prior",
        "class_prior",
        "diag_prior",
        "off_diag_prior",
        "tie_break",
        "seed",
        "duplicates",
    )

    priors_: pd.Series
    errors_: pd.DataFrame
    loss_history_: list[float]
    n_iter_: int
    converged_: bool

    def __init__(
        self,
        n_subtypes: int = 10,
        n_iter: int = 500,
        tol: float = 1e-6,
        restarts: int = 5,
        *,
        subtype_prior: float = 0.1,
        class_prior: float | None = None,
        diag_prior: float = 4.0,
        off_diag_prior: float = 1.0,
        tie_break: EstimatorTieBreak = "random",
        seed: int = 0,
        duplicates: DuplicatePolicy = "error",
    ) -> None:
        self.n_subtypes = n_subtypes
        self.n_iter = n_iter
        self.tol = tol
        self.restarts = restarts
        self.subtype_prior = subtype_prior
        self.class_prior = class_prior
        self.diag_prior = diag_prior
        self.off_diag_prior = off_diag_prior
        self.tie_break = tie_break
        self.seed = seed
        self.duplicates = duplicates

    def fit(self, data: pd.DataFrame) -> Self:
        """Fit EBCC to ``data`` (``task, worker, label``).

        Returns
        -------
        EBCC
            ``self``, fitted.
        """
        from crowdflow.skills.ebcc import ebcc

        enc = _encode(data, self.duplicates, "appearance" if self.tie_break == "first" else "sorted")
        if enc.lm.n_classes < 2:
            raise InputError(f"EBCC needs at least 2 label classes, the data have {enc.lm.n_classes}", path=_SOURCE)
        res = ebcc(
            enc.lm,
            n_subtypes=self.n_subtypes,
            subtype_prior=self.subtype_prior,
            class_prior=self.class_prior,
            diag_prior=self.diag_prior,
            off_diag_prior=self.off_diag_prior,
            tol=self.tol,
            max_iter=self.n_iter,
            restarts=self.restarts,
            tie_break=_library_tie_break(self.tie_break),
            seed=self.seed,
        )
        cols, labels = enc.class_index("appearance")
        self.labels_ = _labels(enc, _winner_codes(enc, res.consensus["label"]), "appearance")
        self.probas_ = _probas(enc, res.posteriors, "appearance")
        self.priors_ = pd.Series(res.class_prior[cols], index=labels, name="prior")
        self.errors_ = DawidSkene._errors(enc, cast(DawidSkeneResult, res), cols, labels)
        codes, index = enc.worker_index("sorted")
        self.skills_ = pd.Series(res.workers["accuracy"].to_numpy(dtype=np.float64)[codes], index=index, name="skill")
        self.loss_history_ = (res.elbo / enc.lm.n_labels).tolist()
        self.n_iter_ = int(res.iterations)
        self.converged_ = bool(res.converged)
        return self


__all__ += ["EBCC"]
