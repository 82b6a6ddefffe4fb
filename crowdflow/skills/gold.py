"""Known answers in the skills fit, scored honestly by K-fold cross-fitting over the gold tasks.

With ``gold_in_fit`` (methods ``ds``, ``onecoin_ds`` and ``auto``), the run's tables come from one fit that sees every
gold answer (the gold tasks' posteriors pinned, :func:`crowdflow.skills.dawid_skene`). Its gold tasks are then right by
construction, so its accuracy on them says nothing. The reported accuracy is cross-fitted instead:

1. the gold tasks present in the labels are split into K folds by a permutation seeded by ``seed``
   (sizes differ by at most one);
2. for each fold k, the same method is fitted with the gold of every fold but k (fold k's tasks are unknown to
   it) and its labels of fold k's tasks are kept;
3. the accuracy is that of those kept labels against the gold (:func:`crowdflow.metrics.gold_metrics`), so every
   gold task is scored by a fit that never saw its answer.

K + 1 fits in all. The estimate is that of a fit with (K − 1)/K of the gold, slightly pessimistic for the full fit.

``method: auto`` (docs/methods/skills.md §7.4, "With gold answers"): each fold's "fit" is the whole procedure —
the gold rule (:mod:`crowdflow.skills.gold_pick`) shown only the other folds' gold, then the chosen candidate's
refit with that gold — so the accuracy scores the selection too. Its gold-free part (the held-out likelihood
choice, every candidate fitted without gold: :func:`crowdflow.skills.fit.prepare_auto`) takes no gold argument and
is computed once for all K + 1 runs. ``metadata["gold_fold_choices"]`` lists each fold's choice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from crowdflow.labels import LabelMatrix
from crowdflow.progress import Span
from crowdflow.skills.fit import AutoParts, SkillsResult, fit_skills, prepare_auto
from crowdflow.skills.gold_pick import gold_codes
from crowdflow.skills.options import SkillsOptions

__all__ = ["SCORING", "SCORING_AUTO", "cross_fit", "fold_ids", "gold_codes"]

#: how the manifest and the report name the scoring of a run with gold in the fit
SCORING = "cross-fitted: {k} folds of the gold tasks, each scored by a fit that did not see its gold"
#: the same for ``method: auto``, whose model choice is inside each fold's run
SCORING_AUTO = (
    "cross-fitted: {k} folds of the gold tasks, each scored by a model choice and a fit that did not see its gold"
)

#: fit(lm, options, gold) -> SkillsResult: the fit each fold runs (an argument so tests can watch what it gets)
FitFn = Callable[[LabelMatrix, SkillsOptions, np.ndarray], SkillsResult]


def fold_ids(has: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Fold (0..k−1) of each gold task, −1 elsewhere: a seeded permutation dealt round-robin."""
    folds = np.full(has.size, -1, dtype=np.int64)
    tasks = np.flatnonzero(has)
    order = np.random.default_rng(seed).permutation(tasks.size)
    folds[tasks[order]] = np.arange(tasks.size) % k
    return folds


def _default_fit(parts: AutoParts | None = None, **kwargs: Any) -> FitFn:
    def fit(lm: LabelMatrix, options: SkillsOptions, gold: np.ndarray) -> SkillsResult:
        return fit_skills(lm, options, gold=gold, auto_parts=parts, **kwargs)

    return fit


def cross_fit(
    lm: LabelMatrix, options: SkillsOptions, truth: pd.DataFrame, fit: FitFn | None = None, **fit_kwargs: Any
) -> SkillsResult:
    """The fit with every gold answer, carrying the cross-fitted labels of the gold tasks (module docstring).

    Parameters
    ----------
    lm : LabelMatrix
    options : SkillsOptions
        ``method`` ``ds``, ``onecoin_ds`` or ``auto``; ``gold_folds`` = K; ``seed`` seeds the folds.
    truth : pandas.DataFrame
        ``task, label``.
    fit : callable, optional
        ``fit(lm, options, gold)``; default :func:`~crowdflow.skills.fit_skills` with ``fit_kwargs``.
    **fit_kwargs
        Arguments of the default fit. Its ``progress`` is the whole job's: each of the K + 1 fits a share of it, in
        the order they run, 1.0 once at the end (:class:`crowdflow.progress.Span`), pass lines prefixed with the fit.

    Returns
    -------
    SkillsResult
        The all-gold fit; ``gold_scored`` holds ``task, label, fold`` of the gold tasks (each label from the fit
        without its fold's gold) and ``metadata`` records ``gold_in_fit``, ``gold_folds``, ``n_gold_in_fit``,
        ``accuracy_scoring``.
    """
    progress = fit_kwargs.pop("progress", None) if fit is None else None
    job = Span(progress) if progress is not None else None
    codes, has = gold_codes(lm, truth)
    k = int(min(options.gold_folds, max(int(has.sum()), 1)))
    folds = fold_ids(has, k, options.seed)
    parts, start = None, 0.0
    if fit is None and options.method == "auto":  # gold-free: once for every run (module docstring)
        start = 0.8
        parts = prepare_auto(lm, options, True, job.part(0.0, start, "auto, no gold: ") if job is not None else None)

    def run(i: int, name: str) -> FitFn:
        if fit is not None:
            return fit
        lo, hi = start + (1 - start) * i / (k + 1), start + (1 - start) * (i + 1) / (k + 1)
        share = job.part(lo, hi, f"gold {name}: ") if job is not None else None
        return _default_fit(parts, **fit_kwargs, progress=share)

    full = run(0, "full fit")(lm, options, codes)
    kept, choices = [], []
    for f in range(k):
        held = folds == f
        if not held.any():
            continue
        seen = np.where(held, -1, codes)
        res = run(f + 1, f"fold {f + 1} of {k}")(lm, options, seen)
        kept.append(res.consensus.loc[held, ["task", "label"]].assign(fold=f))
        choices.append(res.metadata.get("auto_choice"))
    if job is not None:
        job(1.0)
    scored = (
        pd.concat(kept, ignore_index=True)
        if kept
        else pd.DataFrame({"task": pd.Series(dtype=object), "label": pd.Series(dtype=object), "fold": []})
    )
    meta = dict(full.metadata)
    meta.update(
        {
            "gold_in_fit": True,
            "gold_folds": k,
            "n_gold_in_fit": int((codes >= 0).sum()),
            "accuracy_scoring": (SCORING_AUTO if options.method == "auto" else SCORING).format(k=k),
        }
    )
    if options.method == "auto":
        meta["gold_fold_choices"] = choices
    return replace(full, metadata=meta, gold_scored=scored)
