"""Crowd-Kit's classification aggregators inside the skills job, without re-implementing them.

``method: crowdkit:GLAD`` (any name of :data:`AGGREGATORS`) hands the validated, de-duplicated labels to the
installed Crowd-Kit class (``crowdkit.aggregation.<Name>(**crowdkit_params).fit_predict(frame)``; the frame holds
the input's rows in the order of every skills fit, sorted by task and worker, so the answer does not depend on
the file's row order, as Crowd-Kit's own MACE initialisation and tie rules do) and turns its
answer into the job's own tables: the consensus label of every task is Crowd-Kit's ``labels_`` (its own tie
rule: the first label column of ``idxmax``), ``confidence`` is its probability of that label (``probas_``;
MMSR: its weighted vote share ``scores_``), and the skills table carries the aggregator's per-worker numbers on
the job's scales (:class:`Aggregator` says which attribute and how). Everything around the fit (reading,
contracts, the worker-graph checks, atomic Parquet, the report, deployments) is the pipeline's.

Crowd-Kit is an optional extra (``pip install 'crowdflow[crowdkit]'``): this module imports it only when a fit
runs, so the library imports without it; :func:`missing_extra` is the one check the options model calls, so a
spec naming a Crowd-Kit method fails at validation (exit 2, naming the extra) on a machine without it.

The parameters each aggregator takes are declared once here, as a frozen options model per aggregator with
Crowd-Kit's defaults and the range each parameter can run with (:data:`AGGREGATORS`); ``crowdkit_params`` of
the skills options is validated against it. Parameters that need a pandas object (GLAD's priors, Dawid–Skene's
``initial_error``) are not offered: a spec holds scalars. ``GoldMajorityVote`` (fitted on gold answers) is not
offered either: the run's ``truth`` scores the consensus, and scoring on the answers the fit saw would flatter it.
docs/methods/skills.md §7.7 lists the methods, their parameters and what each skills column means for each.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Literal, get_args

import numpy as np
import pandas as pd
from pydantic import Field, ValidationError

from crowdflow.contracts.errors import InputError, SpecError
from crowdflow.contracts.options import Options
from crowdflow.labels import LabelMatrix
from crowdflow.skills.types import CrowdkitMethod

log = logging.getLogger(__name__)

__all__ = [
    "AGGREGATORS",
    "CROWDKIT_PREFIX",
    "EXTRA_HINT",
    "Aggregator",
    "CrowdkitFit",
    "crowdkit_version",
    "fit_crowdkit",
    "is_crowdkit",
    "labels_frame",
    "missing_extra",
    "validate_params",
]

CROWDKIT_PREFIX = "crowdkit:"
EXTRA_HINT = "pip install 'crowdflow[crowdkit]'"
_MAX_ITER = 10_000_000  # the skills options' cap (crowdflow.skills.options.MAX_ITERATIONS)
_MAX_SEED = 2**32 - 1  # numpy's legacy seeding (KOS: np.random.seed) takes 0 .. 2^32 - 1


# --- the parameters of each aggregator: Crowd-Kit's defaults, the ranges they run with ------------------------------


class NoParams(Options):
    """An aggregator without parameters (MajorityVote, Wawa)."""


class DawidSkeneParams(Options):
    """crowdkit.aggregation.DawidSkene / OneCoinDawidSkene."""

    n_iter: int = Field(100, ge=0, le=_MAX_ITER, description="Most EM iterations (0: the majority-vote start).")
    tol: float = Field(1e-5, ge=0.0, le=1.0, description="Stop once the loss changes by less than this.")


class GLADParams(Options):
    """crowdkit.aggregation.GLAD."""

    n_iter: int = Field(100, ge=0, le=_MAX_ITER, description="Most EM iterations.")
    tol: float = Field(1e-5, ge=0.0, le=1.0, description="Stop once the expected log-likelihood changes by less.")
    m_step_max_iter: int = Field(25, ge=1, le=100_000, description="Most gradient steps of each M-step.")
    m_step_tol: float = Field(1e-2, gt=0.0, le=1.0, description="Tolerance of the M-step's optimiser.")


class KOSParams(Options):
    """crowdkit.aggregation.KOS (two classes only)."""

    n_iter: int = Field(100, ge=1, le=_MAX_ITER, description="Message-passing iterations.")
    random_state: int = Field(0, ge=0, le=_MAX_SEED, description="Seed of the random initial reliabilities.")


class MACEParams(Options):
    """crowdkit.aggregation.MACE."""

    n_restarts: int = Field(10, ge=1, le=10_000, description="Random restarts; the best likelihood is kept.")
    n_iter: int = Field(50, ge=1, le=_MAX_ITER, description="EM iterations of each restart.")
    method: Literal["vb", "em"] = Field("vb", description="vb: variational Bayes with priors; em: plain EM.")
    smoothing: float = Field(0.1, ge=0.0, le=1000.0, description="Added to the expected counts (method em).")
    default_noise: float = Field(0.5, ge=0.0, le=100.0, description="Spread of the random initial parameters.")
    alpha: float = Field(0.5, gt=0.0, le=1000.0, description="Beta prior on spamming (method vb).")
    beta: float = Field(0.5, gt=0.0, le=1000.0, description="Beta prior on knowing (method vb).")
    random_state: int = Field(0, ge=0, le=_MAX_SEED, description="Seed of the restarts.")


class MMSRParams(Options):
    """crowdkit.aggregation.MMSR."""

    n_iter: int = Field(10_000, ge=1, le=_MAX_ITER, description="Most iterations of the matrix completion.")
    tol: float = Field(1e-10, ge=0.0, le=1.0, description="Stop once the rank-one estimate moves by less.")
    random_state: int = Field(0, ge=0, le=_MAX_SEED, description="Seed of the random start.")


class ZeroBasedSkillParams(Options):
    """crowdkit.aggregation.ZeroBasedSkill."""

    n_iter: int = Field(100, ge=1, le=_MAX_ITER, description="Skill updates (each refits a weighted vote).")
    lr_init: float = Field(1.0, gt=0.0, le=10.0, description="Initial learning rate.")
    lr_steps_to_reduce: int = Field(20, ge=1, le=_MAX_ITER, description="Iterations between learning-rate cuts.")
    lr_reduce_factor: float = Field(0.5, gt=0.0, le=1.0, description="Factor of each learning-rate cut.")
    eps: float = Field(1e-5, gt=0.0, lt=1.0, description="Added to the initial skill 1/M.")


# --- how each aggregator's answer becomes the skills table -------------------------------------------------------


@dataclass(frozen=True)
class WorkerNumbers:
    """Per-worker numbers of one aggregator, aligned to the label matrix's workers (NaN where it gave none)."""

    skill: np.ndarray
    accuracy: np.ndarray
    vote_weight: np.ndarray
    #: column → why that column is undefined for this aggregator (the workers where it is NaN)
    undefined: dict[str, str] = field(default_factory=dict)
    #: the workers the aggregator returned a number for (None: it returns none for anyone)
    present: np.ndarray | None = None


def _series(values: Any, workers: np.ndarray) -> np.ndarray:
    s = pd.Series(values)
    s.index = s.index.astype(str)
    return s.reindex(workers).to_numpy(dtype=np.float64)


def _one_coin_skill(accuracy: np.ndarray, m: int) -> np.ndarray:
    return (m * accuracy - 1.0) / (m - 1.0)


def _accuracy_skills(
    weight: Literal["one", "skill", "log_odds"],
) -> Callable[[Any, pd.DataFrame, np.ndarray, int], WorkerNumbers]:
    """``skills_`` is each worker's probability of a right answer (MajorityVote, Wawa, ZeroBasedSkill, one-coin
    Dawid–Skene): skill = (M·p − 1)/(M − 1), the one-coin skill of the native methods; the vote weight is what the
    aggregator's vote gives the worker (1, p itself, or the one-coin log-odds log((M − 1)p/(1 − p)))."""

    def read(agg: Any, frame: pd.DataFrame, workers: np.ndarray, m: int) -> WorkerNumbers:
        p = _series(agg.skills_, workers)
        undefined = {}
        if weight == "one":
            v = np.where(np.isnan(p), np.nan, 1.0)
        elif weight == "skill":
            v = p
        else:
            with np.errstate(divide="ignore"):
                v = np.log((m - 1) * p / (1.0 - p))
            v[~np.isfinite(v)] = np.nan
            undefined["vote_weight"] = "the log-odds weight of an estimated accuracy of 0 or 1 is infinite"
        return WorkerNumbers(_one_coin_skill(p, m), p, v, undefined, ~np.isnan(p))

    return read


def _dawid_skene_numbers(agg: Any, frame: pd.DataFrame, workers: np.ndarray, m: int) -> WorkerNumbers:
    """errors_ (worker × observed label rows, true label columns) and priors_: accuracy = Σ_k prior_k e_w(k | k)."""
    errors, priors = agg.errors_, agg.priors_
    acc = pd.Series(0.0, index=errors.index.get_level_values(0).unique())
    for k in errors.columns:
        diag = errors[k].xs(k, level=1, drop_level=True) if k in errors.index.get_level_values(1) else None
        if diag is not None:
            acc = acc.add(float(priors[k]) * diag, fill_value=0.0)
    p = _series(acc, workers)
    why = "full Dawid-Skene votes with the confusion matrix (no scalar weight)"
    return WorkerNumbers(_one_coin_skill(p, m), p, np.full(workers.size, np.nan), {"vote_weight": why}, ~np.isnan(p))


def _glad_numbers(agg: Any, frame: pd.DataFrame, workers: np.ndarray, m: int) -> WorkerNumbers:
    """GLAD's expertise alpha_w: P(right) = σ(alpha_w · beta_t) depends on each task's difficulty, so the
    skill column holds alpha (the aggregator's own scale) and there is no task-free accuracy or weight."""
    nan = np.full(workers.size, np.nan)
    why = "GLAD's probability of a right answer depends on each task's difficulty (skill holds its alpha)"
    alpha = _series(agg.alphas_, workers)
    return WorkerNumbers(alpha, nan, nan.copy(), {"accuracy": why, "vote_weight": why}, ~np.isnan(alpha))


def _mace_numbers(agg: Any, frame: pd.DataFrame, workers: np.ndarray, m: int) -> WorkerNumbers:
    """MACE's competence: the posterior probability that the worker knows the answer (spamming_[:, 1], rows in
    ``pd.factorize`` order of the worker column); with a uniform spamming strategy it is the one-coin skill."""
    order = pd.unique(frame["worker"])
    competence = pd.Series(np.asarray(agg.spamming_)[:, 1], index=order)
    nan = np.full(workers.size, np.nan)
    why = "MACE's probability of a right answer depends on the label (its spamming strategy thetas)"
    c = _series(competence, workers)
    return WorkerNumbers(c, nan, nan.copy(), {"accuracy": why, "vote_weight": why}, ~np.isnan(c))


def _mmsr_numbers(agg: Any, frame: pd.DataFrame, workers: np.ndarray, m: int) -> WorkerNumbers:
    """MMSR's skills_ are vote weights w = log((M − 1) p/(1 − p)) of its rank-one skills: p = e^w/(M − 1 + e^w)."""
    w = _series(agg.skills_, workers)
    p = np.exp(w) / (m - 1 + np.exp(w))
    return WorkerNumbers(_one_coin_skill(p, m), p, w, {}, ~np.isnan(w))


def _no_numbers(agg: Any, frame: pd.DataFrame, workers: np.ndarray, m: int) -> WorkerNumbers:
    nan = np.full(workers.size, np.nan)
    why = "crowd-kit's KOS estimates no per-worker skill"
    return WorkerNumbers(nan, nan.copy(), nan.copy(), {"skill": why, "accuracy": why, "vote_weight": why})


@dataclass(frozen=True)
class Aggregator:
    """One Crowd-Kit classification aggregator as the skills job runs it.

    Attributes
    ----------
    name : str
        The class name in ``crowdkit.aggregation``.
    params : type of Options
        Its parameters with Crowd-Kit's defaults and their ranges.
    workers : callable
        ``(fitted aggregator, its labels frame, worker ids, M) -> WorkerNumbers``.
    stopping : {"tol", "fixed", "closed_form"}
        Stops on ``tol`` (converged when it stopped before ``n_iter``), runs a fixed number of iterations, or
        has no iterations.
    two_classes : bool
        The aggregator refuses more than two classes (KOS).
    weighted_vote : bool
        Its labels are Crowd-Kit's ``MajorityVote().fit(data, skills=skills_)`` after ``fit`` (Wawa,
        ZeroBasedSkill), run as their ``predict`` does. Their ``predict`` itself first calls scikit-learn's
        ``check_is_fitted``, which scikit-learn >= 1.6 refuses for these classes (no ``__sklearn_tags__``), so
        ``Wawa().fit_predict(df)`` fails in an environment with a current scikit-learn; the vote is the same.
    """

    name: str
    params: type[Options]
    workers: Callable[[Any, pd.DataFrame, np.ndarray, int], WorkerNumbers]
    stopping: Literal["tol", "fixed", "closed_form"]
    two_classes: bool = False
    weighted_vote: bool = False


AGGREGATORS: dict[str, Aggregator] = {
    a.name: a
    for a in (
        Aggregator("DawidSkene", DawidSkeneParams, _dawid_skene_numbers, "tol"),
        Aggregator("OneCoinDawidSkene", DawidSkeneParams, _accuracy_skills("log_odds"), "tol"),
        Aggregator("GLAD", GLADParams, _glad_numbers, "tol"),
        Aggregator("KOS", KOSParams, _no_numbers, "fixed", two_classes=True),
        Aggregator("MACE", MACEParams, _mace_numbers, "fixed"),
        Aggregator("MajorityVote", NoParams, _accuracy_skills("one"), "closed_form"),
        Aggregator("MMSR", MMSRParams, _mmsr_numbers, "tol"),
        Aggregator("Wawa", NoParams, _accuracy_skills("skill"), "closed_form", weighted_vote=True),
        Aggregator("ZeroBasedSkill", ZeroBasedSkillParams, _accuracy_skills("skill"), "fixed", weighted_vote=True),
    )
}
"""The Crowd-Kit classification aggregators the skills job runs, by class name (``method: crowdkit:<name>``)."""

assert {f"{CROWDKIT_PREFIX}{n}" for n in AGGREGATORS} == set(get_args(CrowdkitMethod)), "one list of names"


def is_crowdkit(method: str) -> bool:
    """Whether ``method`` names a Crowd-Kit aggregator (``crowdkit:<Name>``)."""
    return method.startswith(CROWDKIT_PREFIX)


def _aggregator(method: str) -> Aggregator:
    return AGGREGATORS[method.removeprefix(CROWDKIT_PREFIX)]


def missing_extra(method: str) -> str | None:
    """The message for a Crowd-Kit ``method`` when crowd-kit cannot be imported here, else None.

    Checked without importing crowd-kit (``importlib.util.find_spec``; a module set to ``None`` in
    ``sys.modules`` counts as missing), so validating a spec stays fast.
    """
    try:
        found = importlib.util.find_spec("crowdkit") is not None
    except (ImportError, ValueError):
        found = False
    if found:
        return None
    return f"method {method} runs crowd-kit, which is not installed in this environment: {EXTRA_HINT}"


def crowdkit_version() -> str:
    """The installed crowd-kit's version (``missing`` without it): part of a Crowd-Kit fit's cache key."""
    try:
        return metadata.version("crowd-kit")
    except metadata.PackageNotFoundError:
        return "missing"


def validate_params(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` checked against the aggregator's parameter model; the values as validated (``"50"`` → 50).

    Raises
    ------
    ValueError
        Naming each bad parameter, its value and the accepted range or names, e.g.
        ``crowdkit:GLAD n_iter=-1: Input should be greater than or equal to 0``.
    """
    model = _aggregator(method).params
    try:
        checked = model.model_validate(params)
    except ValidationError as exc:
        parts = []
        for err in exc.errors():
            name = ".".join(str(x) for x in err["loc"])
            if err["type"] == "extra_forbidden":
                known = ", ".join(model.model_fields) or "none"
                parts.append(f"{name}: not a parameter of {method} (its parameters: {known})")
            else:
                parts.append(f"{name}={err.get('input')!r}: {err['msg']}")
        raise ValueError(f"{method} " + "; ".join(parts)) from None
    return checked.model_dump(exclude_unset=True)


# --- the fit ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CrowdkitFit:
    """A Crowd-Kit aggregator's answer on the job's terms.

    Attributes
    ----------
    consensus : pandas.DataFrame
        One row per task of the label matrix (its order): task, label (Crowd-Kit's ``labels_``), confidence
        (its probability of that label; NaN with ``confidence_reason`` when it gives none), n_labels.
    confidence_reason : str or None
        Why ``confidence`` is undefined (every task), if it is.
    workers : WorkerNumbers
    loss_trace : numpy.ndarray
        Crowd-Kit's ``loss_history_`` where it keeps one (DawidSkene, GLAD, MMSR), else empty.
    metadata : dict
        crowdkit_method, crowdkit_params, crowdkit_version, iterations, converged, final_loss, n_ties, fit_status.
    """

    consensus: pd.DataFrame
    confidence_reason: str | None
    workers: WorkerNumbers
    loss_trace: np.ndarray
    metadata: dict[str, Any]


def labels_frame(lm: LabelMatrix) -> pd.DataFrame:
    """The labels as Crowd-Kit reads them: ``task, worker, label`` text columns, in the input's row order."""
    return pd.DataFrame(
        {
            "task": lm.tasks[lm.task_idx],
            "worker": lm.workers[lm.worker_idx],
            "label": lm.classes[lm.class_idx],
        }
    )


def _aggregation_module() -> Any:
    try:
        return importlib.import_module("crowdkit.aggregation")
    except ImportError as exc:
        raise SpecError(f"a crowdkit: method needs crowd-kit, which cannot be imported ({exc}): {EXTRA_HINT}") from None


def fit_crowdkit(lm: LabelMatrix, method: str, params: dict[str, Any] | None = None) -> CrowdkitFit:
    """Run the Crowd-Kit aggregator ``method`` on the encoded labels.

    Parameters
    ----------
    lm : LabelMatrix
        The validated, de-duplicated labels (input row order: Crowd-Kit sees the frame the file holds).
    method : str
        ``crowdkit:<Name>`` with ``<Name>`` in :data:`AGGREGATORS`.
    params : dict, optional
        The aggregator's parameters (validated by :func:`validate_params`).

    Returns
    -------
    CrowdkitFit

    Raises
    ------
    SpecError
        crowd-kit cannot be imported (names the extra).
    InputError
        Labels the aggregator cannot take (KOS with more than two classes).
    """
    agg_spec = _aggregator(method)
    checked = validate_params(method, dict(params or {}))
    frame = labels_frame(lm)
    m = int(pd.unique(frame["label"]).size)
    if agg_spec.two_classes and m != 2:
        raise InputError(
            f"method {method} aggregates two classes only; the labels have {m} "
            f"({', '.join(map(str, lm.classes[:10]))}): choose another method",
            column="label",
        )
    module = _aggregation_module()
    agg = getattr(module, agg_spec.name)(**checked)
    if agg_spec.weighted_vote:
        vote = module.MajorityVote().fit(frame, skills=agg.fit(frame).skills_)
        labels, probas = vote.labels_, vote.probas_
    else:
        labels = agg.fit_predict(frame)
        probas = getattr(agg, "probas_", None)
        if probas is None:
            probas = getattr(agg, "scores_", None)
    labels.index = labels.index.astype(str)
    label = labels.reindex(lm.tasks)
    if label.isna().any():
        raise RuntimeError(f"crowd-kit's {agg_spec.name} returned no label for {int(label.isna().sum())} task(s)")
    confidence = np.full(lm.n_tasks, np.nan)
    reason: str | None = f"crowd-kit's {agg_spec.name} gives no label probabilities"
    n_ties = 0
    if isinstance(probas, pd.DataFrame) and not probas.empty:
        p = probas.copy()
        p.index = p.index.astype(str)
        p.columns = p.columns.astype(str)
        p = p.reindex(lm.tasks)
        values = p.to_numpy(dtype=np.float64)
        cols = p.columns.get_indexer(label.astype(str).to_numpy())
        confidence = np.where(cols >= 0, values[np.arange(lm.n_tasks), np.maximum(cols, 0)], np.nan)
        top = np.nanmax(values, axis=1, keepdims=True)
        n_ties = int((np.isclose(values, top, rtol=1e-12, atol=1e-15).sum(axis=1) > 1).sum())
        bad = ~np.isfinite(confidence) | (confidence < -1e-12) | (confidence > 1 + 1e-12)
        confidence[bad] = np.nan
        reason = f"crowd-kit's {agg_spec.name} gives this label no probability in [0, 1]" if bad.any() else None
    consensus = pd.DataFrame(
        {
            "task": lm.tasks,
            "label": label.astype(str).to_numpy(dtype=object),
            "confidence": np.clip(confidence, 0.0, 1.0),
            "n_labels": lm.labels_per_task().astype(np.int64),
        }
    )
    history = np.asarray(getattr(agg, "loss_history_", None) or [], dtype=np.float64)
    n_iter = int(getattr(agg, "n_iter", 0))
    if agg_spec.stopping == "tol":
        iterations, converged = int(history.size), bool(history.size < n_iter or n_iter == 0)
        status = "converged" if converged else "not_converged"
        if not converged:
            log.warning("crowd-kit's %s stopped at n_iter=%d without meeting its tol", agg_spec.name, n_iter)
    elif agg_spec.stopping == "fixed":
        iterations, converged, status = int(n_iter), True, "fixed_iterations"
    else:
        iterations, converged, status = 0, True, "closed_form"
    meta = {
        "crowdkit_method": agg_spec.name,
        "crowdkit_params": checked,
        "crowdkit_version": crowdkit_version(),
        "iterations": iterations,
        "converged": converged,
        "final_loss": float(history[-1]) if history.size else float("nan"),
        "n_ties": n_ties,
        "fit_status": status,
    }
    return CrowdkitFit(consensus, reason, agg_spec.workers(agg, frame, lm.workers, m), history, meta)
