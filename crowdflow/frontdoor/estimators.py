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

Same arguments, same numbers: with Crowd-Kit's arguments and defaults, :class:`MajorityVote`, :class:`DawidSkene`
and :class:`OneCoinDawidSkene` give Crowd-Kit 1.4.2's labels, probabilities and fitted attributes to 1e-6
(``tests/test_estimators_parity.py``: generated families and the bundled sets; Crowd-Kit's own tests pass with only
the import changed). The Dawid–Skene estimators run Crowd-Kit's EM schedule (:mod:`crowdflow.skills.classic_em`):
gold answers ``fit(data, true_labels)`` pinned, ``initial_error`` / ``initial_error_strategy``, ``n_iter`` and
``tol`` (0 included) with Crowd-Kit's meaning, empty input → empty results, the first tied label in ``probas_``
column order, every repeated answer counted. A missing column raises
:class:`~crowdflow.contracts.errors.MissingColumn` (a ``KeyError``), a bad value
:class:`~crowdflow.contracts.errors.BadValue` (a ``ValueError``); both are ``InputError`` (CLI exit 2).

crowdflow's additions are keyword options whose defaults leave Crowd-Kit's answers unchanged: ``smoothing`` and
``prior`` (0), ``tie_break`` (``"first"``; ``"random"`` is the pipeline's seeded draw, ``"smallest"`` sorted order),
``duplicates`` (``"keep_all"``; ``"error"``, ``"keep_first"``, ``"keep_last"``), gold for one-coin too.

Where ``cf.DawidSkene()`` and ``cf.skills(df, method="ds")`` differ, and why (accuracy on public sets, A → D one
difference at a time, ``python -m benchmarks.skills_frontdoor_gap``):

=================  ==========================================  ==========================================
setting            estimator (Crowd-Kit's fit)                 ``cf.skills(method="ds")`` (the pipeline)
=================  ==========================================  ==========================================
stopping           bound per answer rises < ``tol`` = 1e-5,    no parameter moves by ``ds_tol`` = 1e-6
                   also stops on its first decrease            (SQUAREM-accelerated passes, at most 100)
prior, smoothing   0 and 0 (probabilities clipped at 1e-10)    ``ds_prior`` 1 virtual right answer per
                                                               worker and class, ``ds_smoothing`` 0.01
ties               first tied label in column order            seeded draw among tied labels
repeated answers   every row counts                            refused (``duplicates: error``)
gold               ``fit(data, true_labels)``, pinned          ``gold_in_fit``, pinned, cross-fitted score
=================  ==========================================  ==========================================

Measured (accuracy; A: ``DawidSkene()``, B: A run long, ``n_iter=1000, tol=-inf``, C: B with ``prior=1,
smoothing=0.01``, D: ``cf.skills(method="ds")``): bluebirds A 0.8889 (Crowd-Kit's bound decreases at iteration 2, it
stops there) → B 0.8981 = C = D: the stopping rule; snow_rte A = B 0.9275 → C 0.9263 = D: the prior;
gal_barzan_mozafari A 0.709 → B 0.712 (stopping) → C 0.707 = D (prior);
gal_trec2011_vuurens A = B 0.8127 → C 0.8101 = D: the prior. C and D fit the
same model to convergence and agree. ``DawidSkene(n_iter=1000, tol=-inf, prior=1, smoothing=0.01)`` gives the
pipeline's labels; ``cf.skills(..., ds_prior=0, ds_smoothing=0)`` the classic model's.

:class:`RankOneSkills` (the pipeline's ``method: pgd``, rank-one PGD; docs/methods/skills.md) has no Crowd-Kit
counterpart; it has the same attributes plus ``workers_``, the pipeline's per-worker ``skills`` table.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal, Self, cast

import numpy as np
import pandas as pd

from crowdflow.contracts.errors import BadValue, InputError, MissingColumn
from crowdflow.frontdoor.factorize import factorize_appearance, first_seen_order, no_missing
from crowdflow.labels import DuplicatePolicy, LabelMatrix
from crowdflow.skills import (
    SkillsOptions,
    canonical_label_matrix,
    fit_skills,
    weighted_consensus,
    weighted_vote,
)
from crowdflow.skills.classic_em import ClassicEMResult, classic_em
from crowdflow.skills.ties import pick_winners
from crowdflow.skills.types import TieBreak

log = logging.getLogger(__name__)

__all__ = ["DawidSkene", "MajorityVote", "OneCoinDawidSkene", "RankOneSkills"]

_SOURCE = "labels DataFrame"
_COLUMNS = ("task", "worker", "label")

#: An estimator's rule for a repeated (task, worker) pair: count every answer (Crowd-Kit's), refuse, keep one.
EstimatorDuplicates = Literal["keep_all", "error", "keep_first", "keep_last"]

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

    ``ids="sorted"``: tasks and workers are coded in sorted order, labels in sorted order or in order of first
    appearance when a Crowd-Kit tie-break needs that order, and ``lm`` is the label matrix of the library's methods.
    ``ids="appearance"`` (the Dawid–Skene estimators): tasks, workers and labels all in order of first appearance,
    the codes of every row kept in ``codes`` and no label matrix built (:func:`_encode`).
    """

    data: pd.DataFrame  # task, worker, label as given (after the duplicate policy), RangeIndex
    tasks: pd.Index  # position = task code
    workers: pd.Index
    classes: pd.Index
    codes: tuple[np.ndarray, np.ndarray, np.ndarray]  # task, worker, label code of each row of data
    appearance: bool  # tasks and workers coded in order of first appearance

    @cached_property
    def lm(self) -> LabelMatrix:
        """The canonical label matrix (text ids) of the library's fits."""
        t_idx, w_idx, c_idx = self.codes
        lm = LabelMatrix(
            workers=_text_ids(self.workers),
            tasks=_text_ids(self.tasks),
            classes=_text_ids(self.classes),
            worker_idx=w_idx,
            task_idx=t_idx,
            class_idx=c_idx,
        )
        return canonical_label_matrix(lm)

    def _order(self, index: pd.Index, column: str, order: Order) -> np.ndarray:
        if order == "sorted":
            return np.argsort(_rank(index), kind="stable")
        if self.appearance and column != "label":  # coded in order of first appearance already
            return np.arange(len(index), dtype=np.int64)
        return first_seen_order(self.codes[_COLUMNS.index(column)], len(index))

    def task_index(self, order: Order) -> tuple[np.ndarray, pd.Index]:
        """Task codes in ``order`` and the matching ``task`` index."""
        codes = self._order(self.tasks, "task", order)
        if self.appearance and order == "appearance":
            return codes, self.tasks.rename("task")
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
    codes, uniques = factorize_appearance(values)
    if order == "sorted":
        rank = _rank(uniques)
        codes, uniques = rank[codes], uniques.take(np.argsort(rank))
    return codes, uniques


def _text_ids(values: pd.Index) -> np.ndarray:
    """Ids for the label matrix: the values as text, or their positions when two values read the same."""
    raw = np.asarray(values)
    if raw.dtype.kind in "iub":  # integers and booleans: numpy writes the same text as str(), without a Python loop
        text = raw.astype(str).astype(object)
    else:
        text = np.asarray([str(v) for v in values], dtype=object)
    if not pd.Index(text).is_unique:
        text = np.asarray([str(i) for i in range(text.size)], dtype=object)
    return text


def _require(data: Any, columns: tuple[str, ...] = _COLUMNS, argument: str = "data") -> pd.DataFrame:
    """``data`` as a DataFrame with ``columns``; a missing one is a :class:`MissingColumn` (a ``KeyError``)."""
    if not isinstance(data, pd.DataFrame):
        raise InputError(f"{argument}: expected a pandas DataFrame with columns {', '.join(columns)}, got "
                         f"{type(data).__name__}")  # fmt: skip
    missing = [c for c in columns if c not in data.columns]
    if missing:
        raise MissingColumn(
            "missing required column" + ("s " if len(missing) > 1 else " ")
            + ", ".join(f"'{m}'" for m in missing) + f"; it has columns {list(data.columns)} (rename yours, e.g. "
            f"{argument}.rename(columns={{'item_id': '{missing[0]}'}}))",
            path=argument,
            column=missing[0],
        )  # fmt: skip
    return data


def _encode(
    data: pd.DataFrame,
    duplicates: EstimatorDuplicates,
    class_order: Order = "sorted",
    *,
    empty_ok: bool = False,
    ids: Order = "sorted",
) -> _Encoded | None:
    """Check and encode Crowd-Kit's input: ``task, worker, label`` columns, no missing value; ``duplicates``:
    whether a repeated pair counts twice (``keep_all``, Crowd-Kit's), is refused or kept once. ``None`` for a frame
    without rows when ``empty_ok`` (Crowd-Kit's estimators then return empty results). ``ids``: task and worker
    codes in sorted order (with the label matrix) or in order of first appearance (see :class:`_Encoded`)."""
    df = _require(data).loc[:, list(_COLUMNS)].reset_index(drop=True)
    if df.empty:
        if empty_ok:
            return None
        raise InputError("no rows in the labels DataFrame", path=_SOURCE)
    for col in _COLUMNS:
        null = no_missing(df[col])
        if null is not None:
            raise InputError(
                f"{int(null.sum())} missing values; drop those rows", path=_SOURCE, column=col, rows=_rows(null)
            )
    if duplicates not in ("keep_all", "error", "keep_first", "keep_last"):
        raise ValueError(
            f"unknown duplicates policy {duplicates!r}; use 'keep_all', 'error', 'keep_first' or 'keep_last'"
        )
    if duplicates != "keep_all":  # keep_all counts every row: nothing to look for
        dup = df.duplicated(["task", "worker"], keep=False).to_numpy(dtype=bool)
        if dup.any() and duplicates == "error":
            raise InputError(
                f"{int(dup.sum())} rows repeat a (task, worker) pair; keep one answer per pair "
                "(duplicates='keep_first' or 'keep_last')",
                path=_SOURCE,
                column="task,worker",
                rows=_rows(dup),
            )
        if dup.any():
            keep: Literal["first", "last"] = "first" if duplicates == "keep_first" else "last"
            df = df[~df.duplicated(["task", "worker"], keep=keep)].reset_index(drop=True)
    t_idx, tasks = _factorize(df["task"], ids)
    w_idx, workers = _factorize(df["worker"], ids)
    c_idx, classes = _factorize(df["label"], class_order)
    return _Encoded(df, tasks, workers, classes, (t_idx, w_idx, c_idx), ids == "appearance")


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
    """Crowd-Kit's majority-vote skill: the share of a worker's answers equal to the aggregated label (sorted);
    an answer repeated with the same label counts once there."""
    agg = np.full(len(enc.tasks), -1, dtype=np.int64)
    agg[_codes(enc.tasks, labels.index)] = _codes(enc.classes, labels.to_numpy())
    data = enc.data.drop_duplicates()
    task_codes = _codes(enc.tasks, data["task"])
    hit = (_codes(enc.classes, data["label"]) == agg[task_codes]).astype(np.float64)
    workers = _codes(enc.workers, data["worker"])
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
        ``first`` (default, Crowd-Kit's rule): the first tied label in ``probas_`` column order; ``random`` (the
        pipeline's rule): a seeded draw among the tied labels; ``smallest``: the first in sorted order.
    seed : int
        Seed of the random tie-break.
    duplicates : {"keep_all", "error", "keep_first", "keep_last"}
        A repeated (task, worker) pair: every answer counted (default, Crowd-Kit's), refused, or one answer kept.

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
        tie_break: EstimatorTieBreak = "first",
        seed: int = 0,
        duplicates: EstimatorDuplicates = "keep_all",
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
        data = _require(data)
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
                raise BadValue(
                    f"skills: {len(lost)} tasks have no worker with a known skill, e.g. {sorted(map(str, lost))[:5]}"
                    " (on_missing_skill='ignore' dropped all their answers)",
                    column="worker",
                )
            return kept, skills
        names = [str(w) for w in pd.unique(data.loc[unknown, "worker"])[:5]]
        raise BadValue(
            f"skills: no skill for {int(unknown.sum())} answers (workers {names}); give every worker a skill or set "
            "on_missing_skill='ignore' or 'value'",
            path="data",
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
        enc = _encode(data, self.duplicates, order if self.tie_break == "first" else "sorted", empty_ok=True)
        if enc is None:  # Crowd-Kit: empty results
            self.labels_ = pd.Series(dtype=object, name="agg_label")
            self.probas_ = pd.DataFrame()
            self.skills_ = pd.Series(dtype=np.float64, name="skill")
            return self
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


def _choose(
    post: np.ndarray, rank: np.ndarray, tie_break: EstimatorTieBreak, seed: int, enc: _Encoded | None = None
) -> np.ndarray:
    """Label code per task: the largest posterior; ties (equal to 1e-12) to the first code (``first``), the first in
    sorted order (``smallest``, ``rank`` = sort position of each code) or a seeded draw (``random``: the library's one
    rule, :func:`crowdflow.skills.ties.pick_winners`, by the text of ``enc``'s task ids and labels)."""
    if tie_break == "first":
        return np.asarray(post.argmax(axis=1), dtype=np.int64)
    top = np.isclose(post, post.max(axis=1, keepdims=True), rtol=1e-12, atol=1e-12)
    if tie_break == "smallest":
        return np.asarray(np.where(top, -rank[None, :], np.iinfo(np.int64).min).argmax(axis=1), dtype=np.int64)
    _library_tie_break(tie_break)
    if enc is None:
        raise ValueError("a random tie-break draws by the task ids: pass the encoded data")
    return pick_winners(post, _text_ids(enc.tasks), _text_ids(enc.classes), "random", seed)[0]


def _gold_codes(enc: _Encoded, true_labels: pd.Series | None) -> np.ndarray | None:
    """Label code per task code from ``true_labels`` (a Series indexed by task; tasks not in the data and missing
    values are ignored, as in Crowd-Kit), ``None`` without gold."""
    if true_labels is None:
        return None
    if not isinstance(true_labels, pd.Series):
        raise InputError(f"true_labels: expected a pandas Series indexed by task, got {type(true_labels).__name__}")
    known = true_labels[true_labels.notna()]
    tasks = _codes(enc.tasks, known.index)
    labels = _codes(enc.classes, known.to_numpy())
    bad = (tasks >= 0) & (labels < 0)
    if bad.any():
        raise BadValue(
            f"true_labels: {int(bad.sum())} gold labels are not among the labels of data "
            f"{enc.classes.tolist()}, e.g. {known.iloc[np.flatnonzero(bad)[:3]].to_dict()}",
            column="label",
        )
    gold = np.full(len(enc.tasks), -1, dtype=np.int64)
    gold[tasks[tasks >= 0]] = labels[tasks >= 0]
    return gold


def _initial_table(
    enc: _Encoded, initial_error: pd.DataFrame, strategy: str, pairs: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Crowd-Kit's ``initial_error`` (rows (worker, observed label), a column per true label) as a dense W×M×M table,
    the rows it lists (W×M) and their codes w·M + m in its order; checked as Crowd-Kit checks it (``ValueError``)."""
    if strategy not in ("assign", "addition"):
        raise BadValue(f"initial_error_strategy: {strategy!r} is not 'assign' or 'addition'")
    if not isinstance(initial_error, pd.DataFrame) or list(initial_error.index.names) != ["worker", "label"]:
        names = getattr(getattr(initial_error, "index", None), "names", None)
        raise BadValue(f"initial_error: the index must be (worker, label), got {names}")
    w = _codes(enc.workers, initial_error.index.get_level_values("worker"))
    m = _codes(enc.classes, initial_error.index.get_level_values("label"))
    cols = _codes(enc.classes, initial_error.columns)
    keep, kc = (w >= 0) & (m >= 0), cols >= 0
    n = len(enc.classes)
    table = np.zeros((len(enc.workers), n, n))
    values = initial_error.to_numpy(dtype=np.float64)
    table[w[keep][:, None], m[keep][:, None], cols[kc][None, :]] = values[keep][:, kc]
    listed = np.zeros_like(pairs)
    listed[w[keep], m[keep]] = True
    if strategy == "assign":
        absent = pairs & ~listed
        if absent.any():
            raise BadValue(
                "initial_error: All the workers in data should be in initial_error (initial_error_strategy="
                f"'assign'): {int(absent.any(axis=1).sum())} workers' error rows are missing, e.g. "
                f"{enc.workers.take(np.flatnonzero(absent.any(axis=1))[:3]).tolist()}"
            )
        sums = initial_error.groupby(level="worker", sort=False).sum()
        if (values <= 1.0).all() and not np.allclose(sums.to_numpy(dtype=np.float64), 1.0):
            raise BadValue(
                "initial_error: The sum of each worker's error matrix in initial_error should be 1.0 (probabilities "
                "of the observed labels given each true label)"
            )
    order = pd.unique(w[keep] * n + m[keep])
    return table, listed, np.asarray(order, dtype=np.int64)


class DawidSkene(_Aggregator):
    """Dawid–Skene: one confusion matrix per worker, fitted by EM (Dawid and Skene, JRSS C, 1979).

    P(worker i answers m | true label l) = π_i[l, m], class prior q_l. With Crowd-Kit's arguments and defaults
    this is Crowd-Kit 1.4.2's ``DawidSkene`` number for number (its schedule, :mod:`crowdflow.skills.classic_em`):
    the same start (majority-vote shares), ``n_iter`` iterations at most, each an E-step and an M-step, stopping
    once the evidence lower bound per answer rises by less than ``tol``; gold answers (``true_labels``) pin
    their tasks' posteriors; ``initial_error`` enters the first M-step (``"assign"``: replaces it, ``"addition"``:
    added to the counts). Fitted: ``labels_``, ``probas_`` (posteriors), ``priors_`` (q), ``errors_`` (π: rows
    (worker, observed label), one column per true label), ``loss_history_`` (the bound per answer at each
    iteration), ``skills_`` (accuracy Σ_l q_l π_i[l, l], sorted by worker; not in Crowd-Kit's ``DawidSkene``),
    ``n_iter_`` and ``converged_``. docs/methods/skills.md §7.2; docs/how-to/notebook.md.

    Parameters
    ----------
    n_iter : int
        Most EM iterations (0: the majority-vote start and its M-step, as Crowd-Kit).
    tol : float
        Stop once the bound per answer rises by less than ``tol`` (0: until it stops rising).
    initial_error_strategy : {None, "assign", "addition"}
        How ``initial_error`` of :meth:`fit` enters the first M-step.
    smoothing : float
        crowdflow's: pseudo-count added to every confusion count (default 0, Crowd-Kit's model).
    prior : float
        crowdflow's: pseudo-count on each confusion matrix's diagonal (the pipeline's ``ds_prior``; default 0).
    tie_break : {"first", "random", "smallest"}
        ``first`` (default, Crowd-Kit's): the first tied label in ``probas_`` column order.
    seed : int
    duplicates : {"keep_all", "error", "keep_first", "keep_last"}

    Examples
    --------
    >>> import pandas as pd
    >>> from crowdflow import DawidSkene
    >>> df = pd.DataFrame({"task": [1, 1, 1, 2, 2, 2], "worker": list("abcabc"), "label": [0, 0, 1, 1, 1, 1]})
    >>> DawidSkene(n_iter=50).fit_predict(df).to_dict()
    {1: 0, 2: 1}
    """

    _params = ("n_iter", "tol", "initial_error_strategy", "smoothing", "prior", "tie_break", "seed", "duplicates")
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
        initial_error_strategy: Literal["assign", "addition"] | None = None,
        *,
        smoothing: float = 0.0,
        prior: float = 0.0,
        tie_break: EstimatorTieBreak = "first",
        seed: int = 0,
        duplicates: EstimatorDuplicates = "keep_all",
    ) -> None:
        self.n_iter = n_iter
        self.tol = tol
        self.initial_error_strategy = initial_error_strategy
        self.smoothing = smoothing
        self.prior = prior
        self.tie_break = tie_break
        self.seed = seed
        self.duplicates = duplicates

    def _check_params(self) -> None:
        if not isinstance(self.n_iter, int | np.integer) or self.n_iter < 0:
            raise ValueError(f"n_iter must be an integer >= 0, got {self.n_iter!r}")
        if not np.isfinite(self.tol) and self.tol != -np.inf:
            raise ValueError(f"tol must be a number, got {self.tol!r}")
        for name in ("smoothing", "prior"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self._one_coin and self.prior:
            raise ValueError("prior is a pseudo-count of the full confusion matrices; OneCoinDawidSkene has none")

    def _empty(self) -> Self:
        self.labels_ = pd.Series(dtype=np.float64, name="agg_label")
        self.probas_ = pd.DataFrame()
        self.priors_ = pd.Series(dtype=np.float64, name="prior")
        self.errors_ = pd.DataFrame()
        self.skills_ = pd.Series(dtype=np.float64, name="skill")
        self.loss_history_ = []
        self.n_iter_, self.converged_ = 0, True
        return self

    def fit(
        self,
        data: pd.DataFrame,
        true_labels: pd.Series | None = None,
        initial_error: pd.DataFrame | None = None,
    ) -> Self:
        """Fit the model to ``data`` (``task, worker, label``) by EM.

        Parameters
        ----------
        data : pandas.DataFrame
        true_labels : pandas.Series, optional
            Gold answers indexed by task: those tasks' posteriors are pinned to their answer at every step.
        initial_error : pandas.DataFrame, optional
            Error counts (or, with ``"assign"``, probabilities) indexed by (worker, label), a column per true label;
            used when ``initial_error_strategy`` is set.

        Returns
        -------
        DawidSkene
            ``self``, fitted.
        """
        self._check_params()
        enc = _encode(data, self.duplicates, "appearance", empty_ok=True, ids="appearance")
        if enc is None:
            return self._empty()
        task, worker, label = enc.codes
        shape = (len(enc.tasks), len(enc.workers), len(enc.classes))
        if self._one_coin and len(enc.classes) < 2:
            raise BadValue(f"data: one-coin Dawid-Skene needs at least 2 labels, the data have {len(enc.classes)}")
        initial = listed = given_order = None
        strategy = self.initial_error_strategy if initial_error is not None else None
        if strategy is not None and not self._one_coin:
            pairs = np.zeros(shape[1:], dtype=bool)
            pairs[worker, label] = True
            initial, listed, given_order = _initial_table(enc, cast(pd.DataFrame, initial_error), strategy, pairs)
        res = classic_em(
            task, worker, label, *shape,
            one_coin=self._one_coin, n_iter=int(self.n_iter), tol=float(self.tol),
            gold=_gold_codes(enc, true_labels), initial=initial, initial_pairs=listed, strategy=strategy,
            smoothing=float(self.smoothing), prior=float(self.prior),
        )  # fmt: skip
        # tasks, workers and labels are coded in order of first appearance: Crowd-Kit's row and column order
        tasks, labels = enc.tasks.rename("task"), enc.classes.rename("label")
        # the seeded draw is by task id and label, as for every estimator and every pipeline path
        winner = _choose(res.post, _rank(enc.classes), self.tie_break, self.seed, enc)
        self.labels_ = pd.Series(enc.classes.take(winner), index=tasks, name="agg_label")
        self.probas_ = pd.DataFrame(res.post, index=tasks, columns=labels)
        self.priors_ = pd.Series(res.q, index=labels, name="prior")
        # no iteration after an assigned table: Crowd-Kit's errors_ is that table, in its row order
        assigned = given_order if strategy == "assign" and not res.loss_history else None
        self.errors_ = self._errors(enc, res, labels, assigned)
        self.skills_ = self._skills(enc, res)
        self.loss_history_ = list(res.loss_history)
        self.n_iter_ = len(res.loss_history)
        self.converged_ = self.n_iter_ < self.n_iter or (
            self.n_iter_ >= 2 and res.loss_history[-1] - res.loss_history[-2] < self.tol
        )
        return self

    def fit_predict(
        self, data: pd.DataFrame, true_labels: pd.Series | None = None, initial_error: pd.DataFrame | None = None
    ) -> pd.Series:
        """Fit (gold and initial errors as in :meth:`fit`) and return ``labels_``."""
        return self.fit(data, true_labels, initial_error).labels_

    def fit_predict_proba(
        self, data: pd.DataFrame, true_labels: pd.Series | None = None, initial_error: pd.DataFrame | None = None
    ) -> pd.DataFrame:
        """Fit (gold and initial errors as in :meth:`fit`) and return ``probas_``."""
        return self.fit(data, true_labels, initial_error).probas_

    @staticmethod
    def _errors(enc: _Encoded, res: ClassicEMResult, labels: pd.Index, order: np.ndarray | None = None) -> pd.DataFrame:
        """π as Crowd-Kit lays it out: a row per (worker, observed label) pair of the data in order of appearance
        (then the pairs only an initial table listed), or in ``order`` (codes w·M + m), a column per true label."""
        m = len(enc.classes)
        _, worker, label = enc.codes
        seen = order if order is not None else first_seen_order(worker * m + label, len(enc.workers) * m)
        extra = np.setdiff1d(np.flatnonzero(res.pairs.ravel()), seen)
        pairs = np.concatenate([np.asarray(seen, dtype=np.int64), extra])
        pw, pm = pairs // m, pairs % m
        index = pd.MultiIndex.from_arrays([enc.workers.take(pw), enc.classes.take(pm)], names=["worker", "label"])
        # Crowd-Kit's columns: text labels keep their string dtype, other labels become an object index
        columns = (
            labels.rename(None)
            if isinstance(labels.dtype, pd.StringDtype)
            else pd.Index(labels, dtype=object).rename(None)
        )
        return pd.DataFrame(res.errors[pw, pm], index=index, columns=columns)

    def _skills(self, enc: _Encoded, res: ClassicEMResult) -> pd.Series:
        m = len(enc.classes)
        diag = res.errors[:, np.arange(m), np.arange(m)]  # P(answer l | true l), W×M
        codes, index = enc.worker_index("sorted")
        return pd.Series((diag @ res.q)[codes], index=index, name="skill")


class OneCoinDawidSkene(DawidSkene):
    """One-coin Dawid–Skene: one accuracy p_i per worker, wrong answers uniform over the other labels (EM).

    π_i[l, l] = p_i and π_i[l, m] = (1 − p_i)/(M − 1) (Zhang, Chen, Zhou and Jordan, JMLR 2016); Crowd-Kit
    1.4.2's ``OneCoinDawidSkene`` number for number with its arguments. ``skills_`` is p_i, in the order workers
    first appear in the data (Crowd-Kit's). Same parameters and attributes as :class:`DawidSkene`; ``true_labels``
    (gold, pinned) is crowdflow's addition, ``initial_error`` does not apply (one accuracy per worker).
    """

    _one_coin = True

    def _skills(self, enc: _Encoded, res: ClassicEMResult) -> pd.Series:
        codes, index = enc.worker_index("appearance")
        return pd.Series(res.skills[codes], index=index, name="skill")


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
        assert enc is not None  # without empty_ok an empty frame raises
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
        assert enc is not None  # without empty_ok an empty frame raises
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
        # Crowd-Kit's layout: a row per (worker, observed label), a column per true label, P(observed | true),
        # each worker's answer table mixed over the subtypes
        conf = res.confusion[:, cols][:, :, cols]  # W × true × observed, classes in order of appearance
        w = conf.shape[0]
        self.errors_ = pd.DataFrame(
            conf.transpose(0, 2, 1).reshape(w * len(cols), len(cols)),
            index=pd.MultiIndex.from_product([pd.Index(enc.lm.workers), pd.Index(labels)], names=["worker", "label"]),
            columns=labels,
        )
        codes, index = enc.worker_index("sorted")
        self.skills_ = pd.Series(res.workers["accuracy"].to_numpy(dtype=np.float64)[codes], index=index, name="skill")
        self.loss_history_ = (res.elbo / enc.lm.n_labels).tolist()
        self.n_iter_ = int(res.iterations)
        self.converged_ = bool(res.converged)
        return self


__all__ += ["EBCC"]
