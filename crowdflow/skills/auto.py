"""``method: auto``: the aggregation model chosen by the data, by held-out predictive log-likelihood.

docs/methods/skills.md §7.4. No gold is needed to compare aggregation models on one data set: each candidate
is fitted on the labels with a share of them held out, and scored on how probable it finds the held-out labels.

Split (stratified per task, seeded): the labels of every task with at least two labels are shuffled and dealt
round-robin, from a random offset, into ``K`` folds (``auto_folds``, default 5); a task with ``n_t`` labels has
at most ⌈n_t/K⌉ of them in one fold, so with ``n_t ≥ 2`` it always keeps a label in the training part, and a
task with one label is never held out (its held-out label could only be scored by the class prior, which says
nothing about how labels are combined). Per task rather than per worker because the score is the posterior of
the task's class from its *remaining* labels; a worker whose every label falls in one fold is scored by the
parameters its model gives a worker it has not seen (the prior of its table).

Score of a held-out label y of worker j on task i, from the candidate fitted on the other folds:

    p(y) = Σ_k P(z_i = k | training labels) · P(label = y | z_i = k, worker j's parameters),

averaged in log over every held-out label of every fold (each label with n_t ≥ 2 is held out exactly once);
reported with its standard error and the paired difference to the chosen candidate with its standard error
(the scores of two candidates are over the same labels, so their difference is paired). Both standard errors
are clustered by task (:func:`clustered_std_error`): the held-out labels of one task share its posterior, so
they are not independent, and the i.i.d. std/√n would understate the error.

Choice: the highest mean score among the candidates whose every fold converged; a candidate that stopped at its
iteration cap is chosen only when none converged, and when a non-converged candidate scored higher than the
pick, the choice's ``note`` says so. The chosen candidate is then refitted on ALL labels by
:func:`crowdflow.skills.fit_skills` with its options: no fold's fit, split or score enters the refit.

Candidates are a registry (:data:`CANDIDATES`): a name → the options of its refit and the function that fits
it on a training part and returns its predictive law (posteriors of the tasks, confusion of the workers), given a
progress callback for that fit (the Dawid–Skene fits report through it). Adding a method is one entry.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from crowdflow.labels import LabelMatrix
from crowdflow.progress import ProgressFn, Span
from crowdflow.skills.dawid_skene import dawid_skene, one_coin_dawid_skene
from crowdflow.skills.options import SkillsOptions

log = logging.getLogger(__name__)

#: floor of a predicted probability, so one impossible held-out label costs log(1e-12), not −∞
_FLOOR = 1e-12


@dataclass(frozen=True)
class Predictive:
    """The predictive law of a candidate fitted on a training part of the labels.

    Attributes
    ----------
    posteriors : numpy.ndarray
        T×M: P(z_t = k | the training labels of task t), every task of the full label matrix.
    confusion : numpy.ndarray
        W×M×M: P(worker i answers m | z = l), every worker of the full label matrix.
    converged : bool
        Whether the fit stopped by its tolerance (not by its iteration cap).
    iterations : int
    """

    posteriors: np.ndarray
    confusion: np.ndarray
    converged: bool = True
    iterations: int = 0


#: fit a candidate on a training LabelMatrix (same workers, tasks, classes as the full one) with these options;
#: the third argument is a progress callback for the fit (None: no reports; a fit may ignore it)
PredictiveFit = Callable[[LabelMatrix, SkillsOptions, ProgressFn | None], Predictive]


@dataclass(frozen=True)
class Candidate:
    """One candidate of ``method: auto``: the options of its refit and its predictive fit."""

    options: Mapping[str, Any]
    fit: PredictiveFit


def _ds(lm: LabelMatrix, o: SkillsOptions, prior: float, progress: ProgressFn | None) -> Predictive:
    smoothing = max(o.ds_smoothing, 1e-3)
    r = dawid_skene(lm, o.ds_tol, o.ds_max_iter, smoothing, tie_break="smallest", prior=prior, progress=progress)
    return Predictive(r.posteriors, r.confusion, r.converged, r.iterations)


def _ds_prior(lm: LabelMatrix, o: SkillsOptions, progress: ProgressFn | None = None) -> Predictive:
    return _ds(lm, o, o.ds_prior if o.ds_prior > 0 else 1.0, progress)


def _ds_classic(lm: LabelMatrix, o: SkillsOptions, progress: ProgressFn | None = None) -> Predictive:
    return _ds(lm, o, 0.0, progress)


def _one_coin(lm: LabelMatrix, o: SkillsOptions, progress: ProgressFn | None = None) -> Predictive:
    r = one_coin_dawid_skene(
        lm, o.ds_tol, o.ds_max_iter, max(o.ds_smoothing, 1e-3), tie_break="smallest", progress=progress
    )
    return Predictive(r.posteriors, r.confusion, r.converged, r.iterations)


def _shared_coin(p: float, n_workers: int, m: int) -> np.ndarray:
    off = (1.0 - p) / (m - 1)
    table = np.full((m, m), off) + np.eye(m) * (p - off)
    return np.broadcast_to(table, (n_workers, m, m)).copy()


def _majority(lm: LabelMatrix, o: SkillsOptions, progress: ProgressFn | None = None) -> Predictive:
    """Majority vote's own model: every worker right with ONE shared probability p, wrong answers uniform over the
    other M − 1 classes, a uniform class prior. Its exact posterior is

        P(z_t = k | labels) ∝ ρ^{n_tk},   ρ = p (M − 1) / (1 − p),

    (n_tk: task t's labels of class k), whose most probable class is the majority label whenever p > 1/M: the
    Bayes decision of this model IS majority vote, so the refit (``method: mv``) is its MAP. p is fitted by EM
    on the one parameter (start: the rate at which labels agree with their task's majority; M-step p = expected
    share of labels equal to the truth, with one virtual right and one virtual wrong label), kept in
    (1/M, 1 − 10⁻¹²) so the decision stays majority vote. Stops when p moves by less than ``ds_tol``.
    """
    m = lm.n_classes
    counts = lm.task_class_counts().toarray()
    n = max(lm.n_labels, 1)
    lo, hi = 1.0 / m + 1e-9, 1.0 - _FLOOR
    agree = float((counts.argmax(axis=1)[lm.task_idx] == lm.class_idx).mean()) if lm.n_labels else 0.5
    p = min(max(agree, lo), hi)
    post = np.full(counts.shape, 1.0 / m)
    converged, it = False, 0
    for it in range(1, max(int(o.ds_max_iter), 1) + 1):
        log_rho = math.log(p * (m - 1) / (1.0 - p))
        z = counts * log_rho
        z -= z.max(axis=1, keepdims=True)
        post = np.exp(z)
        post /= post.sum(axis=1, keepdims=True)
        new = min(max((float((post * counts).sum()) + 1.0) / (n + 2.0), lo), hi)
        done = abs(new - p) < o.ds_tol
        p = new
        if done:
            converged = True
            break
    return Predictive(post, _shared_coin(p, lm.n_workers, m), converged, it)


def _ebcc(lm: LabelMatrix, o: SkillsOptions, progress: ProgressFn | None = None) -> Predictive:
    """EBCC's predictive law: its class posteriors and each worker's answer table mixed over the subtypes
    (Σ_m E[π_km] E[v_jkm·]); one seeded start per fold (the refit on all labels keeps ``ebcc_restarts``)."""
    import warnings

    from crowdflow.skills.ebcc import ebcc

    with warnings.catch_warnings():  # a cap hit is reported through ``converged``, as for the other candidates
        warnings.simplefilter("ignore", RuntimeWarning)
        r = ebcc(
            lm,
            n_subtypes=o.ebcc_subtypes,
            subtype_prior=o.ebcc_subtype_prior,
            class_prior=o.ebcc_class_prior,
            diag_prior=o.ebcc_diag_prior,
            off_diag_prior=o.ebcc_off_diag_prior,
            tol=o.ebcc_tol,
            max_iter=o.ebcc_max_iter,
            restarts=1,
            tie_break="smallest",
            seed=o.seed,
        )
    return Predictive(r.posteriors, r.confusion, r.converged, r.iterations)


#: the candidates of ``method: auto`` (name → refit options, predictive fit); the names are the ``auto_candidates``
#: choices (``crowdflow.skills.types.AutoCandidate`` spells the same names for the options). Adding a method is one
#: line here and its name there.
CANDIDATES: dict[str, Candidate] = {
    "ds": Candidate({"method": "ds"}, _ds_prior),
    "ds_classic": Candidate({"method": "ds", "ds_prior": 0.0}, _ds_classic),
    "onecoin_ds": Candidate({"method": "onecoin_ds"}, _one_coin),
    "mv": Candidate({"method": "mv"}, _majority),
    "ebcc": Candidate({"method": "ebcc"}, _ebcc),
}

#: the candidates compared when ``auto_candidates`` is empty. EBCC is registered but opt-in
#: (``auto_candidates: [ds, ds_classic, onecoin_ds, mv, ebcc]``): it costs K seeded VI fits on top of the others
#: (about 20 s per fit at 2·10^4 labels) and was not better than ``ds`` on the public gold sets but one
#: (benchmarks/results/ebcc.md; docs/methods/skills.md §7.5).
DEFAULT_CANDIDATES: tuple[str, ...] = ("ds", "ds_classic", "onecoin_ds", "mv")


def n_fits(options: SkillsOptions) -> int:
    """Fits :func:`choose` makes with ``options`` (every candidate on every fold), for a job's share of progress."""
    return int(options.auto_folds) * len(options.auto_candidates or DEFAULT_CANDIDATES)


def fold_ids(lm: LabelMatrix, n_folds: int, seed: int) -> np.ndarray:
    """Fold of every label (−1: never held out), stratified per task (see the module docstring).

    Labels of a task with n_t ≥ 2 labels are shuffled and dealt round-robin from a random offset, so every fold
    holds out at most ⌈n_t/K⌉ of them and the task keeps at least one label in each training part.
    """
    if n_folds < 2:
        raise ValueError(f"auto needs at least 2 folds, got {n_folds}")
    rng = np.random.default_rng(seed)
    n = lm.n_labels
    counts = np.bincount(lm.task_idx, minlength=lm.n_tasks)
    # a random rank of each label within its task: sort by (task, random key)
    order = np.lexsort((rng.random(n), lm.task_idx))
    start = np.concatenate(([0], np.cumsum(counts)))[lm.task_idx[order]]
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - start
    offset = rng.integers(0, n_folds, size=lm.n_tasks)
    folds = (rank + offset[lm.task_idx]) % n_folds
    folds[counts[lm.task_idx] < 2] = -1
    out: np.ndarray = folds.astype(np.int64)
    return out


def _subset(lm: LabelMatrix, keep: np.ndarray) -> LabelMatrix:
    """The labels where ``keep`` (same ids; order kept, so task-major stays task-major)."""
    return LabelMatrix(
        workers=lm.workers,
        tasks=lm.tasks,
        classes=lm.classes,
        worker_idx=np.ascontiguousarray(lm.worker_idx[keep]),
        task_idx=np.ascontiguousarray(lm.task_idx[keep]),
        class_idx=np.ascontiguousarray(lm.class_idx[keep]),
    )


def clustered_std_error(values: np.ndarray, groups: np.ndarray) -> float:
    """Standard error of ``values.mean()`` when the values are independent between groups but not within one.

    The held-out labels of one task are scored with the same posterior of that task, so their scores are
    correlated and the i.i.d. formula std/√n understates the error. With n values in groups g,

        SE² = Σ_g (Σ_{i∈g} (v_i − v̄))² / n² · G/(G − 1),

    the cluster-robust (sandwich) variance of a mean with the small-sample factor G/(G − 1) over G groups;
    with one value per group it is the i.i.d. std(ddof=1)/√n. NaN with fewer than two groups.
    """
    n = values.size
    _, inv = np.unique(groups, return_inverse=True)
    g = int(inv.max()) + 1 if n else 0
    if g < 2:
        return float("nan")
    sums = np.bincount(inv, weights=values - values.mean(), minlength=g)
    return float(math.sqrt(float((sums**2).sum()) * g / (g - 1)) / n)


def heldout_log_lik(pred: Predictive, task: np.ndarray, worker: np.ndarray, label: np.ndarray) -> np.ndarray:
    """log Σ_k P(z_task = k | training) · P(label | z = k, worker): one value per held-out label."""
    p = np.einsum("nk,nk->n", pred.posteriors[task], pred.confusion[worker, :, label])
    out: np.ndarray = np.log(np.clip(p, _FLOOR, None))
    return out


@dataclass(frozen=True)
class AutoChoice:
    """The outcome of the held-out comparison.

    Attributes
    ----------
    choice : str
        The chosen candidate (a key of :data:`CANDIDATES`).
    scores : pandas.DataFrame
        One row per candidate, best score first: candidate, mean_log_lik, std_error, diff_vs_choice,
        diff_std_error, n_heldout, converged (every fold), max_iterations, chosen.
    note : str
        Empty, or why the choice is not the top score (a higher-scoring candidate did not converge).
    n_folds, seed : int
    """

    choice: str
    scores: pd.DataFrame
    note: str = ""
    n_folds: int = 5
    seed: int = 0
    per_label: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def record(self) -> dict[str, Any]:
        """The manifest entry: choice, note, folds, seed and every candidate's score (JSON-ready)."""
        rows = [
            {k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}
            for r in self.scores.to_dict(orient="records")
        ]
        return {"choice": self.choice, "note": self.note, "folds": self.n_folds, "seed": self.seed, "candidates": rows}


def choose(
    lm: LabelMatrix,
    options: SkillsOptions,
    candidates: Mapping[str, Candidate] | None = None,
    n_folds: int | None = None,
    seed: int | None = None,
    progress: ProgressFn | None = None,
) -> AutoChoice:
    """Score every candidate by K-fold held-out predictive log-likelihood and choose one (module docstring).

    Parameters
    ----------
    lm : LabelMatrix
        Canonically ordered labels (:func:`crowdflow.skills.prepare_labels`).
    options : SkillsOptions
        Tolerances, caps, smoothing and prior of the candidates' fits; ``auto_folds``, ``auto_candidates`` and
        ``seed`` when not given here.
    candidates : mapping, optional
        Name → :class:`Candidate`; default :data:`CANDIDATES` restricted to ``options.auto_candidates``.
    n_folds, seed : int, optional
    progress : callable, optional
        ``progress(fraction)`` over the comparison: each of the K × C fits (fold, candidate) a share 1/(K C) of it, in
        the order they run (the Dawid–Skene fits report within theirs, :func:`crowdflow.skills.dawid_skene`; the
        others when done), 1.0 at the end; to a callback with ``note``, the fits' pass lines prefixed with the fold
        and the candidate (:class:`crowdflow.progress.Span`).

    Returns
    -------
    AutoChoice
    """
    k = int(n_folds if n_folds is not None else options.auto_folds)
    s = int(seed if seed is not None else options.seed)
    if candidates is None:
        names: list[str] = list(options.auto_candidates or DEFAULT_CANDIDATES)
        candidates = {n: CANDIDATES[n] for n in names}
    folds = fold_ids(lm, k, s)
    held = folds >= 0
    job = Span(progress) if progress is not None else None
    if not held.any():
        if job is not None:
            job(1.0)
        # no task has two labels: nothing to score; every candidate is the vote of one label
        first = next(iter(candidates))
        scores = pd.DataFrame(
            {"candidate": list(candidates), "n_heldout": 0, "chosen": [n == first for n in candidates]}
        )
        return AutoChoice(first, scores, "no task has two labels: nothing to hold out", k, s)
    per_label = {name: np.empty(int(held.sum())) for name in candidates}
    converged = dict.fromkeys(candidates, True)
    iters = dict.fromkeys(candidates, 0)
    slot = np.full(lm.n_labels, -1, dtype=np.int64)
    slot[held] = np.arange(int(held.sum()))
    for f in range(k):
        out = folds == f
        if not out.any():
            continue
        train = _subset(lm, ~out)
        for c, (name, cand) in enumerate(candidates.items()):
            j, share = f * len(candidates) + c, None
            if job is not None:
                share = job.part(
                    j / (k * len(candidates)), (j + 1) / (k * len(candidates)), f"auto fold {f + 1} of {k}, {name}: "
                )
            with warnings.catch_warnings():  # a fold's cap is recorded in `converged` and the note, not warned 5x
                warnings.simplefilter("ignore", RuntimeWarning)
                pred = cand.fit(train, options, share)
            if share is not None:
                share(1.0)
            per_label[name][slot[out]] = heldout_log_lik(pred, lm.task_idx[out], lm.worker_idx[out], lm.class_idx[out])
            converged[name] &= bool(pred.converged)
            iters[name] = max(iters[name], int(pred.iterations))
    if job is not None:
        job(1.0)
    n = int(held.sum())
    held_task = np.empty(n, dtype=np.int64)
    held_task[slot[held]] = lm.task_idx[held]
    means = {nm: float(v.mean()) for nm, v in per_label.items()}
    pool = [nm for nm in candidates if converged[nm]] or list(candidates)
    choice = max(pool, key=lambda nm: means[nm])
    top = max(candidates, key=lambda nm: means[nm])
    note = ""
    if top != choice:
        note = (
            f"{top} scored higher ({means[top]:.4f} vs {means[choice]:.4f}) but stopped at its iteration cap in "
            f"a fold; the converged {choice} is chosen (raise ds_max_iter to compare them converged)"
        )
    elif not converged[choice]:
        note = (
            f"no candidate converged in every fold (each stopped at its iteration cap in a fold); {choice} has the "
            "highest score (raise ds_max_iter to compare them converged)"
        )
    rows = []
    for nm, v in per_label.items():
        d = v - per_label[choice]
        rows.append(
            {
                "candidate": nm,
                "mean_log_lik": means[nm],
                "std_error": clustered_std_error(v, held_task),
                "diff_vs_choice": float(d.mean()),
                "diff_std_error": clustered_std_error(d, held_task),
                "n_heldout": n,
                "converged": converged[nm],
                "max_iterations": iters[nm],
                "chosen": nm == choice,
            }
        )
    scores = pd.DataFrame(rows).sort_values("mean_log_lik", ascending=False, kind="stable").reset_index(drop=True)
    log.info("auto: chose %s by held-out log-likelihood over %d labels in %d folds", choice, n, k)
    return AutoChoice(choice, scores, note, k, s, per_label)
