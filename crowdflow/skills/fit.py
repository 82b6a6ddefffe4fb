"""``fit_skills``: the entry point of the skills job (Dawid–Skene EM, rank-one PGD or majority vote).

The default, ``method="auto"`` (docs/methods/skills.md §7.4), chooses among full Dawid–Skene EM with one
virtual correct answer per true class and worker (``ds_prior``, §7.3), classic Dawid–Skene, one-coin
Dawid–Skene and majority vote by held-out predictive log-likelihood (:mod:`crowdflow.skills.auto`) and
refits the pick on all labels.

``method="pgd"``: Ma, Olshevsky, Saligrama, Szepesvari, "Gradient Descent for Sparse Rank-One Matrix
Completion for Crowd-Sourced Aggregation of Sparsely Interacting Workers", JMLR. Model: one-coin
Dawid–Skene with M classes, worker i right with probability p_i and otherwise choosing one of the M − 1
wrong classes uniformly, skill s_i = (M p_i − 1)/(M − 1). The fit encodes the labels, builds the
moments C^ with E[C^_ij] = s_i s_j, checks identifiability, fits x xᵀ to C^ in a box by projected
gradient descent, fixes the signs, votes with log-odds weights and reports per-component diagnostics;
the other methods share the encoding and the graph. For inputs larger than memory see
:mod:`crowdflow.skills.partitioned` (every method, in passes over task buckets). The method step by
step: docs/methods/skills.md §2.8 (model §1, moments §2.1, solver §2.3 and §2.9, identifiability §3).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from crowdflow.contracts.errors import DegenerateInput
from crowdflow.contracts.missing import explain_missing
from crowdflow.executors import MapFn
from crowdflow.graphs import (
    Components,
    GraphStructure,
    ParityForest,
    WorkerGraphReport,
    distinct_partners,
    graph_structure,
    labels_by_task,
    pair_bound,
    worker_strength,
)
from crowdflow.labels import LabelMatrix, text_column
from crowdflow.progress import ProgressFn, Span
from crowdflow.skills.auto import CANDIDATES, DEFAULT_CANDIDATES, AutoChoice, choose, n_fits
from crowdflow.skills.consensus import vote_weights, weighted_consensus
from crowdflow.skills.crowdkit_adapter import fit_crowdkit, is_crowdkit
from crowdflow.skills.dawid_skene import dawid_skene, one_coin_dawid_skene
from crowdflow.skills.ebcc import ebcc, ebcc_metadata
from crowdflow.skills.gold_pick import gold_choose, gold_codes
from crowdflow.skills.identifiability import (
    active_workers,
    component_diagnostics,
    component_diagnostics_pairless,
    witness_cycles,
)
from crowdflow.skills.inputs import prepare_labels
from crowdflow.skills.majority import majority_vote
from crowdflow.skills.moments import (
    PGD_BYTES_PER_PAIR,
    LabelMoments,
    co_label_matrix,
    edge_weights,
    label_moments,
    prune_spammer_edges,
)
from crowdflow.skills.options import GOLD_METHODS, SkillsOptions, gold_refusal
from crowdflow.skills.partitions import partitioned_moments
from crowdflow.skills.rank_one import RankOneFit, fit_active
from crowdflow.skills.reasons import explain_missing_skills
from crowdflow.skills.types import Policy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SkillsResult:
    """Worker skills, consensus labels and diagnostics of one aggregation run.

    Attributes
    ----------
    skills : pandas.DataFrame
        One row per worker (sorted id order): worker, skill, accuracy, vote_weight, n_labels,
        n_partners, component, status, identifiable, strength, lower, upper, fit_component.
        ``skill`` = ŝ_i (NaN unless status ``ok`` for pgd; mv and DS: (M·accuracy − 1)/(M − 1)), ``accuracy`` =
        ((M−1) ŝ + 1)/M (mv: agreement rate with the MV label), ``vote_weight`` = v_i used in the
        vote, ``component`` = component of the interaction graph (as in
        ``crowdflow.graphs.worker_graph_report``), ``status`` ∈ ok | isolated |
        bipartite_component | too_few_labels, ``strength`` = Σ_j N_ij, ``lower/upper`` = PGD box,
        ``fit_component`` = component of the fitted (active) subgraph, −1 if not fitted.
    consensus : pandas.DataFrame
        task, label, confidence, n_labels, fallback.
    diagnostics : pandas.DataFrame
        Per-component table (:func:`component_diagnostics`).
    metadata : dict
        fit_status (``converged`` | ``not_converged`` (max_iter hit) | ``no_identifiable_worker`` (nothing
        to fit: every task falls back) | ``closed_form`` (mv)), undefined numbers are NaN (``eta`` of
        mv/DS, ``final_loss`` of mv),
        method, solver, iterations, converged, final_loss, eta, tau, weighting, x0, tol, max_iter,
        sign_mode, fallback, identifiability_policy, n_classes, classes, n_workers, n_tasks,
        n_labels, n_duplicates_dropped, n_ties, n_fallback_tasks, frac_workers_identified,
        frac_labels_identified, frac_tasks_identified.
    loss_trace : numpy.ndarray
        PGD: L(x^k) per iteration; DS: negative log-likelihood at each kept EM step (docs/methods/skills.md §7.2),
        then at the returned parameters; EBCC: negative ELBO after each sweep of the kept restart (§7.5); mv: empty.
    timings : dict
        Wall-clock seconds per step of :func:`fit_skills` (encode, moments, graph, fit, consensus,
        diagnostics); not part of the (deterministic) outputs.
    gold_scored : pandas.DataFrame, optional
        With gold answers in the fit (:func:`crowdflow.skills.gold.cross_fit`): the gold tasks' cross-fitted
        labels (``task, label, fold``), each from the fit without its fold's gold: what the accuracy scores.
    """

    skills: pd.DataFrame
    consensus: pd.DataFrame
    diagnostics: pd.DataFrame
    metadata: dict[str, Any]
    loss_trace: np.ndarray = field(default_factory=lambda: np.empty(0))
    timings: dict[str, float] = field(default_factory=dict)
    gold_scored: pd.DataFrame | None = None

    def metadata_frame(self) -> pd.DataFrame:
        """The metadata as a one-row DataFrame (lists are joined with ``,``)."""
        row = {
            k: (",".join(map(str, v)) if isinstance(v, list | tuple) else v)
            for k, v in self.metadata.items()
            if not isinstance(v, dict)  # nested records (metadata["auto"]) belong in the manifest, not a cell
        }
        return pd.DataFrame([row])


def fit_metadata(
    o: SkillsOptions,
    classes: np.ndarray,
    n_workers: int,
    n_tasks: int,
    n_labels: int,
    n_dropped: int,
    n_pruned: int,
    identifiability_policy: str,
) -> dict[str, Any]:
    """The metadata every skills fit starts from (the options it ran with and the sizes of its input)."""
    return {
        "method": o.method,
        "n_classes": int(classes.size),
        "classes": classes.astype(str).tolist(),
        "n_workers": n_workers,
        "n_tasks": n_tasks,
        "n_labels": n_labels,
        "n_duplicates_dropped": int(n_dropped),
        "weighting": o.weighting,
        "tau": float(o.tau),
        "x0": float(o.x0),
        "tol": float(o.tol),
        "max_iter": int(o.max_iter),
        "solver": o.solver,
        "sign_mode": o.sign_mode,
        "identifiability_policy": identifiability_policy,
        "fallback": o.fallback,
        "tie_break": o.tie_break,
        "seed": int(o.seed),
        "min_pair_count": int(o.min_pair_count),
        "prune_spammers": "" if o.prune_spammers is None else ",".join(map(str, o.prune_spammers)),
        "n_pairs_pruned": n_pruned,
    }


def worker_table(
    workers: Any,
    skill: np.ndarray,
    accuracy: np.ndarray,
    vote_weight: np.ndarray,
    n_labels: np.ndarray,
    row_stats: tuple[np.ndarray, np.ndarray],
    graph: Components,
    status: np.ndarray,
    identifiable: np.ndarray,
    box: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> pd.DataFrame:
    """The ``skills`` table (:class:`SkillsResult`): one row per worker; ``box`` = (lower, upper, fit_component) of
    a rank-one fit (NaN, NaN, −1 for the other methods); ``row_stats`` = (n_partners, strength), the row lengths
    and row sums of N (:func:`pair_row_stats` from N, or :func:`pairless_row_stats` without it; n_partners NaN
    where unknown).

    Built column by column (issue #36, docs/scale.md memory laws): each numeric column is one fresh array the table
    owns (no 2-D block assembled from copies of them), and the text columns go to Arrow strings straight from the
    ids and the statuses, never through a fixed-width numpy text array (``<U19``: 76 bytes a worker). The table's
    transient over its own ~90 bytes a worker is then one column.
    """
    partners, strength = row_stats
    w = len(workers)
    fresh = box is None  # the default box is made here: the table takes it as it is
    lower, upper, fit_comp = box if box is not None else (np.full(w, np.nan), np.full(w, np.nan), np.full(w, -1))

    def own(values: Any, dtype: Any, made_here: bool = False) -> np.ndarray:
        """A copy the table owns (the caller's arrays stay the caller's), or the array itself if made here."""
        if made_here and (dtype is None or values.dtype == dtype):
            return np.asarray(values)
        return np.array(values, dtype=dtype, copy=True)

    columns = {
        "worker": text_column(workers),
        "skill": own(skill, None),
        "accuracy": own(accuracy, None),
        "vote_weight": own(vote_weight, np.float64),
        "n_labels": own(n_labels, np.int64),
        "n_partners": own(partners, np.int64) if np.all(np.isfinite(partners)) else own(partners, None),
        "component": own(graph.labels, np.int64),
        "status": text_column(status),
        "identifiable": own(identifiable, None),
        "strength": own(strength, np.float64),
        "lower": own(lower, None, fresh),
        "upper": own(upper, None, fresh),
        "fit_component": own(fit_comp, np.int64, fresh),
    }
    return pd.DataFrame(columns, copy=False)


def pair_row_stats(n_mat: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    """(n_partners, strength) of the skills table from N: its row lengths and row sums."""
    return np.diff(n_mat.indptr).astype(np.int64), np.asarray(n_mat.sum(axis=1)).ravel().astype(np.float64)


def pairless_graph(
    lm: LabelMatrix, report: WorkerGraphReport | None
) -> tuple[Components, tuple[np.ndarray, np.ndarray]]:
    """The worker graph and (n_partners, strength) of ``lm`` without a worker pair (docs/scale.md, memory laws).

    The components of the caller's pre-fit report when it is about these labels, else one parity union-find pass
    (:class:`~crowdflow.graphs.ParityForest`); ``n_partners`` by a marker pass (exact, O(workers) scratch),
    ``strength`` = Σ_{t∋i} (k_t − 1) (:func:`~crowdflow.graphs.worker_strength`). Equal to the pair path's.
    """
    indptr, w, _ = labels_by_task(lm)
    if report is not None and report.graph.labels.size == lm.n_workers:
        graph = report.graph
        partners = report.workers["n_partners"].to_numpy()
        if not np.all(np.isfinite(partners)):
            partners = distinct_partners(indptr, w, lm.n_workers)
    else:
        graph = ParityForest.from_labels(indptr, w, lm.n_workers).components()
        partners = distinct_partners(indptr, w, lm.n_workers)
    return graph, (np.asarray(partners), worker_strength(indptr, w, lm.n_workers))


def fit_rank_one_options(
    active: np.ndarray,
    ag: Components,
    w_all: sp.csr_matrix,
    c_hat: sp.csr_matrix,
    lo: np.ndarray,
    hi: np.ndarray,
    o: SkillsOptions,
    progress: ProgressFn | None,
) -> tuple[np.ndarray, np.ndarray, RankOneFit | None]:
    """:func:`fit_active` with the solver settings of ``o`` (in memory and partitioned alike)."""
    return fit_active(
        active,
        ag,
        w_all,
        c_hat,
        lo,
        hi,
        x0=o.x0,
        eta=o.eta,
        tol=o.tol,
        max_iter=o.max_iter,
        solver=o.solver,
        sign_mode=o.sign_mode,
        progress=progress,
    )


def diagnostics_table(
    lm: LabelMatrix | None,
    n_mat: sp.csr_matrix | None,
    w_all: sp.csr_matrix | None,
    graph: Components,
    skill: np.ndarray,
    status: np.ndarray,
    o: SkillsOptions,
    witnesses: dict[int, np.ndarray] | None,
    per_component: tuple[np.ndarray, np.ndarray] | None = None,
    row_stats: tuple[np.ndarray, np.ndarray] | None = None,
) -> pd.DataFrame:
    """:func:`component_diagnostics` with the settings of ``o``; without N (``n_mat`` None) the pair-free table
    (:func:`component_diagnostics_pairless` from ``row_stats``)."""
    if n_mat is None or w_all is None:
        if row_stats is None:
            raise ValueError("the diagnostics need N or the workers' row statistics")
        return component_diagnostics_pairless(
            lm, graph, *row_stats, skill, status.astype(str), per_component=per_component
        )
    return component_diagnostics(
        lm,
        n_mat,
        w_all,
        graph,
        skill,
        status.astype(str),
        spectral=o.spectral_diagnostics,
        dense_max=o.dense_eig_max,
        witness=o.witness,
        spectral_max_nnz=o.spectral_max_nnz,
        witnesses=witnesses,
        per_component=per_component,
    )


def _refuse_over_budget(lm: LabelMatrix, o: SkillsOptions) -> None:
    """Say before fitting what the worker pairs will take; refuse a shape over ``pair_memory_budget`` (exit 2).

    The bound min(Σ_t k_t(k_t − 1), W(W − 1)) stored pairs × :data:`PGD_BYTES_PER_PAIR` comes from the labels
    per task alone (docs/scale.md, memory laws).
    """
    k = np.bincount(lm.task_idx, minlength=lm.n_tasks)
    pairs = pair_bound(k, lm.n_workers)
    need = pairs * PGD_BYTES_PER_PAIR
    log.info("pgd: at most %d worker pairs, %.3g bytes at peak for the pair statistics and the fit", pairs, need)
    if o.pair_memory_budget is not None and need > o.pair_memory_budget:
        raise DegenerateInput(
            f"method pgd would hold up to {pairs:,} worker pairs ({need / 1e9:.2f} GB at {PGD_BYTES_PER_PAIR} bytes "
            f"each at its peak, 16 of them stored: the sum over tasks of k(k-1), at most W(W-1) for "
            f"{lm.n_workers:,} workers), over pair_memory_budget = {o.pair_memory_budget:,} bytes. Raise "
            "skills.pair_memory_budget, or use method ds, onecoin_ds or mv (they form no worker pair: their memory "
            "grows with the workers, not with their pairs).",
            reason="pair_memory_budget",
        )


def needs_pairs(o: SkillsOptions) -> bool:
    """Whether a fit with options ``o`` forms worker pairs (docs/scale.md, memory laws): rank-one PGD (its moments),
    and any method asked for a pair statistic: ``spectral`` diagnostics, ``min_pair_count`` > 1, ``prune_spammers``.
    Every other fit, ``auto`` included (its candidates are never pgd), is pair-free."""
    return o.method == "pgd" or o.spectral_diagnostics or o.min_pair_count > 1 or o.prune_spammers is not None


def _base_component_status(graph: Components) -> np.ndarray:
    base = np.where(graph.bipartite, "bipartite_component", "ok").astype(object)
    base[graph.sizes == 1] = "isolated"
    return base


def _base_status(graph: Components) -> np.ndarray:
    """Worker status from the graph alone: ok, isolated or bipartite_component."""
    status: np.ndarray = _base_component_status(graph)[graph.labels].copy()
    return status


def _fit_status(converged: bool) -> str:
    return "converged" if converged else "not_converged"


def _failure_message(
    lm: LabelMatrix,
    labels_c: np.ndarray,
    comp_ids: np.ndarray,
    reasons: dict[int, str],
    colour: np.ndarray | None,
    where: str,
    max_listed: int = 20,
) -> list[str]:
    lines = []
    per_worker_labels = lm.labels_per_worker()
    for c in comp_ids:
        members = np.flatnonzero(labels_c == c)
        ids = lm.workers[members[:max_listed]].astype(str).tolist()
        more = f" (+{members.size - max_listed} more)" if members.size > max_listed else ""
        reason = reasons[int(c)]
        if reason == "bipartite_component" and colour is not None:
            c1 = int(colour[members].sum())
            reason += f", colour classes {members.size - c1}/{c1}"
        on = np.isin(lm.worker_idx, members)
        n_tasks = np.unique(lm.task_idx[on]).size
        lines.append(
            f"{where} component {int(c)}: {reason}, {members.size} workers, "
            f"{int(per_worker_labels[members].sum())} labels on {n_tasks} tasks: [{','.join(ids)}]{more}"
        )
    return lines


def fit_skills(
    labels: pd.DataFrame | LabelMatrix,
    options: SkillsOptions | None = None,
    *,
    graph_report: WorkerGraphReport | None = None,
    moments: LabelMoments | None = None,
    executor: MapFn | None = None,
    n_partitions: int = 4,
    scratch_dir: str | None = None,
    progress: ProgressFn | None = None,
    identifiability_policy: Policy = "flag",
    gold: np.ndarray | None = None,
    auto_parts: AutoParts | None = None,
    **overrides: Any,
) -> SkillsResult:
    """Estimate worker skills and consensus labels (docs/methods/skills.md §2.8, §3, §7).

    ``method="auto"`` (the default): :func:`crowdflow.skills.auto.choose`, then the pick refitted on all labels
    (``metadata["auto_choice"]``, ``metadata["auto"]``: every candidate's held-out score; §7.4).
    ``method="ds"`` and ``method="onecoin_ds"``: Dawid–Skene EM (``crowdflow.skills.dawid_skene``,
    docs/methods/skills.md §7.2), the full model with the diagonal prior ``ds_prior`` (§7.3); skills table
    from the EM accuracies (status informational, from the graph). ``method="mv"``: majority vote
    (:func:`crowdflow.skills.majority_vote`, docs/methods/skills.md §7.1); skill NaN, accuracy = agreement
    rate of the worker with the MV labels, vote_weight 1.

    ``method="pgd"`` (docs/methods/skills.md §2.8):
      1. dense ids, de-duplication, N and C^ by sparse products (:func:`label_moments`);
      2. components of the interaction graph (``crowdflow.graphs``); status per worker:
         ``isolated`` / ``bipartite_component`` from the graph, else ``too_few_labels`` if
         n_i ≤ τ² (empty box), else ``ok`` if the worker stays in a non-bipartite component of the
         active graph (workers with n_i ≤ τ² removed; recomputed until stable);
      3. the rank-one fit (:func:`fit_rank_one`) on the active subgraph with w = B(N), box
         ±(1 − τ/√n_i) (multiclass lower bound max(−1/(M−1), ·)), start x^0;
      4. signs per fitted component (:func:`resolve_signs`; S1 default; S2 = ``sign_mode="bfs"``
         fits |C^| on the box [1e-3, hi_i] and propagates signs by BFS);
      5. MAP weighted vote (:func:`weighted_consensus`), unidentified workers weight 0;
      6. diagnostics per component (:func:`component_diagnostics`).
    Steps 1–2 run once for every method: labels encoded by hash (``encode_canonical``), N and the
    agreements from one integer sparse product, components/bipartiteness/odd-cycle witnesses from
    one BFS (``crowdflow.graphs.graph_structure``). Wall time per step is in ``SkillsResult.timings``.
    For data that does not fit in memory see :func:`~crowdflow.skills.fit_skills_partitioned` (passes over task
    buckets of a Parquet dataset, docs/methods/skills.md §4.2).

    Parameters
    ----------
    labels : pandas.DataFrame or LabelMatrix
        Columns ``task, worker, label``.
    options : SkillsOptions, optional
        Everything that changes the fit (method, solver, box, tolerances, tie-break, diagnostics…),
        validated once; ``None`` means the defaults, which are the pipeline's (docs/methods/skills.md §8).
    graph_report : WorkerGraphReport, optional
        The interaction-graph report of these labels when the caller already has it (the pipeline's
        graph check), so N = B Bᵀ and the components are not computed twice.
    moments : LabelMoments, optional
        N, agreements and C^ of these labels computed elsewhere (e.g. summed over partitions by
        :func:`partition_pair_counts` / :func:`moments_from_partitions`), with workers in the order of
        the encoded labels and ``min_pair_count`` already applied; skips :func:`label_moments`.
    executor : callable, optional
        ``executor(fn, items) -> results`` (e.g. a Dask client's map): the co-label statistics are then
        computed over ``n_partitions`` whole-task Parquet partitions of the labels, one item per
        partition (:func:`crowdflow.skills.partitioned_moments`, docs/methods/skills.md §4.3); the same
        result.
        ``metadata["moments_partitions"]`` records the number of partitions.
    n_partitions : int
        Partitions of the labels when an ``executor`` is given.
    scratch_dir : str, optional
        Folder for the partition files (a temporary folder is made in it); it must be visible to the
        executor's workers.
    progress : callable, optional
        ``progress(fraction)`` with a fraction in [0, 1], called during the PGD iterations (see
        :func:`fit_rank_one`) and the Dawid–Skene EM of ``ds`` and ``onecoin_ds`` (:func:`dawid_skene`; a callback
        with ``note`` also gets a line a pass), with 1.0 at the end; ``auto``: one rise over its candidate fits and
        the refit (:func:`_fit_auto`). It changes no answer.
    identifiability_policy : {"flag", "raise"}
        What the caller wants when a worker cannot be identified (docs/methods/skills.md §3.3):
        ``"flag"`` fits the ok workers and marks the rest (skill NaN, weight 0); ``"raise"`` raises
        ``ValueError`` listing every failing component (id, reason, size, labels, tasks, worker ids).
        It changes no fitted number, so it is not an option: the pipeline decides blocking in its graph
        check (``checks.identifiability``; docs/methods/skills.md §8.3).
    gold : numpy.ndarray, optional
        Known answers in the fit (``ds``, ``onecoin_ds`` and ``auto``): a label code per task of the encoded labels,
        −1 where unknown; those tasks' posteriors are pinned (:func:`~crowdflow.skills.dawid_skene`); ``auto`` also
        chooses its candidate with them (:mod:`crowdflow.skills.gold_pick`, ``metadata["auto_gold"]``). The
        honest score of such a fit is :func:`crowdflow.skills.gold.cross_fit`.
    auto_parts : AutoParts, optional
        ``method="auto"`` with ``gold``: its gold-free part (:func:`prepare_auto`) computed once for these labels and
        options, so the gold cross-fit does not repeat it in every fold.
    **overrides
        Fields of :class:`SkillsOptions` that replace those of ``options``
        (``fit_skills(df, method="mv")``), validated the same way.

    Returns
    -------
    SkillsResult

    Raises
    ------
    pydantic.ValidationError
        An unknown option, a value outside its range or a combination the fit cannot run
        (a ``ValueError``).
    ValueError
        Bad labels, moments of other labels, or (with ``identifiability_policy="raise"``) workers
        that cannot be identified.
    """
    o = SkillsOptions.resolve(options, **overrides)
    if identifiability_policy not in ("raise", "flag"):
        raise ValueError(f"unknown identifiability_policy {identifiability_policy!r}; use 'raise' or 'flag'")
    if executor is not None and moments is not None:
        raise ValueError("give precomputed moments or an executor to compute them, not both")
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(step: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[step] = timings.get(step, 0.0) + now - clock
        clock = now

    lm, dropped = prepare_labels(labels, o.classes, o.duplicates)
    m = lm.n_classes
    lap("encode")
    if gold is not None and o.method not in GOLD_METHODS:
        raise ValueError(f"gold answers in the fit: {gold_refusal(o.method)}")
    if o.method == "auto":
        return _fit_auto(
            lm,
            o,
            dropped,
            timings,
            graph_report,
            moments,
            executor,
            n_partitions,
            scratch_dir,
            progress,
            identifiability_policy,
            gold,
            auto_parts,
        )
    n_parts = 0
    n_i = lm.labels_per_worker()
    if moments is None and not needs_pairs(o):
        # mv, the Dawid-Skene methods, EBCC and Crowd-Kit fit no pair statistic: the graph, n_partners and strength
        # without forming a worker pair (docs/scale.md, memory laws); no executor is needed for that
        graph, row_stats = pairless_graph(lm, graph_report)
        lap("graph")
        meta = fit_metadata(o, lm.classes, lm.n_workers, lm.n_tasks, lm.n_labels, dropped, 0, identifiability_policy)
        return _fit_baseline(
            lm, o, graph, None, None, _base_status(graph), n_i, meta, None, timings, gold, row_stats, progress
        )
    needs_moments = o.method == "pgd" or o.prune_spammers is not None
    if executor is not None and needs_moments:
        moments, n_parts = partitioned_moments(
            lm, executor, n_partitions, min_pair_count=o.min_pair_count, scratch_dir=scratch_dir
        )
    elif moments is None and needs_moments:
        _refuse_over_budget(lm, o)
        moments = label_moments(lm, min_pair_count=o.min_pair_count)
    elif moments is not None and (moments.co_labels.shape != (lm.n_workers, lm.n_workers) or moments.n_classes != m):
        raise ValueError(
            f"moments are for {moments.co_labels.shape[0]} workers / {moments.n_classes} classes, "
            f"the labels have {lm.n_workers} / {m}"
        )
    n_pruned = 0
    if moments is not None and o.prune_spammers is not None:
        moments, n_pruned = prune_spammer_edges(moments, *o.prune_spammers)
    if moments is not None:
        n_mat = moments.co_labels
    elif (
        graph_report is not None
        and graph_report.co_labels is not None
        and o.min_pair_count <= 1
        and graph_report.co_labels.shape == (lm.n_workers,) * 2
    ):
        n_mat = graph_report.co_labels  # N of these labels, already counted by the caller's graph check
    else:
        n_mat = co_label_matrix(lm, o.min_pair_count)
    lap("moments")
    structure: GraphStructure | None = None
    if graph_report is not None and o.min_pair_count <= 1 and o.prune_spammers is None:
        graph = graph_report.graph
    else:
        structure = graph_structure(n_mat, symmetric=True)
        graph = structure.graph
    w_all = edge_weights(n_mat, o.weighting)

    base = _base_component_status(graph)
    status = base[graph.labels].copy()

    meta = fit_metadata(o, lm.classes, lm.n_workers, lm.n_tasks, lm.n_labels, dropped, n_pruned, identifiability_policy)
    if n_parts:
        meta["moments_partitions"] = n_parts

    if o.method != "pgd":
        witnesses = witness_cycles(structure) if (o.witness and structure is not None) else None
        rows = pair_row_stats(n_mat)
        return _fit_baseline(lm, o, graph, n_mat, w_all, status, n_i, meta, witnesses, timings, gold, rows, progress)

    lap("graph")
    status, active, lo, hi, ag, drops = active_workers(graph, base, w_all, n_i, m, o.tau)
    failing = np.isin(status, ["isolated", "bipartite_component"])
    if identifiability_policy == "raise" and (failing.any() or not active.any()):
        fail_comps = np.unique(graph.labels[failing & (base[graph.labels] != "ok")])
        reasons = {int(c): str(base[c]) for c in fail_comps}
        lines = _failure_message(lm, graph.labels, fail_comps, reasons, graph.colour, "interaction-graph")
        for g_d, lost_d in drops:
            pc = np.unique(g_d.labels[lost_d])
            reasons2 = {int(c): ("isolated" if g_d.sizes[c] == 1 else "bipartite_component") for c in pc}
            lines += _failure_message(
                lm, g_d.labels, pc, reasons2, g_d.colour, "after dropping too_few_labels workers, active-graph"
            )
        if not active.any() and not lines:
            lines.append("no worker has more than tau^2 labels in a non-bipartite component")
        raise ValueError(
            "skills are not identifiable (docs/methods/skills.md §3): every component of the worker interaction graph "
            "must contain an odd cycle.\n" + "\n".join(lines)
        )

    lap("graph")
    assert moments is not None  # needs_moments
    skills, fit_comp, fit = fit_rank_one_options(active, ag, w_all, moments.c_hat, lo, hi, o, progress)
    if fit is None:
        log.warning("no identifiable worker: every task falls back to %s", o.fallback)

    lap("fit")
    v = vote_weights(skills, m, lo, hi)
    cons = weighted_consensus(lm, v, identified=active, fallback=o.fallback, tie_break=o.tie_break, seed=o.seed)
    lap("consensus")
    accuracy = ((m - 1) * skills + 1) / m
    rows = pair_row_stats(n_mat)
    table = worker_table(lm.workers, skills, accuracy, v, n_i, rows, graph, status, active, (lo, hi, fit_comp))
    if o.witness and structure is None:  # N is symmetric with a zero diagonal: one BFS, no symmetrised copy
        structure = graph_structure(n_mat, symmetric=True)
    witnesses = witness_cycles(structure) if (o.witness and structure is not None) else None
    diag = diagnostics_table(lm, n_mat, w_all, graph, skills, status, o, witnesses)
    lap("diagnostics")
    labels_ok = float(active[lm.worker_idx].mean())
    meta.update(
        {
            "iterations": fit.iterations if fit else 0,
            "converged": fit.converged if fit else True,
            "final_loss": fit.final_loss if fit else 0.0,
            "eta": fit.eta if fit else float("nan"),
            "last_step": fit.last_step if fit else 0.0,
            "n_ties": cons.n_ties,
            "n_fallback_tasks": cons.n_fallback,
            "frac_workers_identified": float(active.mean()),
            "frac_labels_identified": labels_ok,
            "frac_tasks_identified": float(1.0 - cons.n_fallback / lm.n_tasks),
            "n_fallback_steps": fit.n_fallback_steps if fit else 0,
            "fit_status": "no_identifiable_worker" if fit is None else _fit_status(fit.converged),
        }
    )
    if cons.n_ties:
        log.info("MAP vote: %d tied tasks (tie_break=%s)", cons.n_ties, o.tie_break)
    explain_missing_skills(table, diag, "pgd")
    return SkillsResult(
        skills=table,
        consensus=cons.consensus,
        diagnostics=diag,
        metadata=meta,
        loss_trace=fit.loss_trace if fit else np.empty(0),
        timings=timings,
    )


def _fit_baseline(
    lm: LabelMatrix,
    o: SkillsOptions,
    graph: Components,
    n_mat: sp.csr_matrix | None,
    w_all: sp.csr_matrix | None,
    status: np.ndarray,
    n_i: np.ndarray,
    meta: dict[str, Any],
    witnesses: dict[int, np.ndarray] | None,
    timings: dict[str, float],
    gold: np.ndarray | None,
    row_stats: tuple[np.ndarray, np.ndarray],
    progress: ProgressFn | None = None,
) -> SkillsResult:
    """Every method but PGD; ``progress`` reaches the Dawid–Skene EM (its fractions, 1.0 at its end, a line a pass)."""
    clock = time.perf_counter()
    trace = np.empty(0)
    undefined: dict[str, str] = {}
    present: np.ndarray | None = None
    if o.method == "mv":
        mv = majority_vote(lm, o.tie_break, o.seed)
        agree = (lm.class_idx == mv.winner[lm.task_idx]).astype(np.float64)
        accuracy = np.bincount(lm.worker_idx, weights=agree, minlength=lm.n_workers) / np.maximum(n_i, 1)
        m = lm.n_classes
        skill = (m * accuracy - 1.0) / (m - 1.0)  # the one-coin skill of that agreement rate, as for DS
        weight = np.ones(lm.n_workers)
        cons = mv.consensus.assign(fallback=np.zeros(lm.n_tasks, dtype=bool))
        meta.update(
            {
                "iterations": 0,
                "converged": True,
                "final_loss": float("nan"),
                "n_ties": mv.n_ties,
                "fit_status": "closed_form",
            }
        )
    elif is_crowdkit(o.method):
        ck = fit_crowdkit(lm, o.method, o.crowdkit_params)
        skill, accuracy, weight = ck.workers.skill, ck.workers.accuracy, ck.workers.vote_weight
        cons = ck.consensus.assign(fallback=False)
        if ck.confidence_reason is not None:
            explain_missing(cons, ["confidence"], ck.confidence_reason)
        trace, undefined, present = ck.loss_trace, ck.workers.undefined, ck.workers.present
        meta.update(ck.metadata)
    elif o.method == "ebcc":
        eb = ebcc(
            lm,
            n_subtypes=o.ebcc_subtypes,
            subtype_prior=o.ebcc_subtype_prior,
            class_prior=o.ebcc_class_prior,
            diag_prior=o.ebcc_diag_prior,
            off_diag_prior=o.ebcc_off_diag_prior,
            tol=o.ebcc_tol,
            max_iter=o.ebcc_max_iter,
            restarts=o.ebcc_restarts,
            tie_break=o.tie_break,
            seed=o.seed,
        )
        accuracy = eb.workers["accuracy"].to_numpy(dtype=np.float64)
        skill = eb.workers["skill"].to_numpy(dtype=np.float64)
        weight = eb.workers["vote_weight"].to_numpy(dtype=np.float64)
        cons = eb.consensus.assign(fallback=False)
        trace = -eb.elbo  # a loss: the negative ELBO per sweep of the kept restart
        meta.update(ebcc_metadata(o, eb))
    else:
        if o.method == "onecoin_ds":
            ds = one_coin_dawid_skene(
                lm,
                tol=o.ds_tol,
                max_iter=o.ds_max_iter,
                smoothing=o.ds_smoothing,
                tie_break=o.tie_break,
                seed=o.seed,
                gold=gold,
                progress=progress,
            )
        else:
            ds = dawid_skene(
                lm,
                tol=o.ds_tol,
                max_iter=o.ds_max_iter,
                smoothing=o.ds_smoothing,
                tie_break=o.tie_break,
                seed=o.seed,
                prior=o.ds_prior,
                gold=gold,
                progress=progress,
            )
        accuracy = ds.workers["accuracy"].to_numpy(dtype=np.float64)
        skill = ds.workers["skill"].to_numpy(dtype=np.float64)
        weight = ds.workers["vote_weight"].to_numpy(dtype=np.float64)
        cons = ds.consensus.assign(fallback=False)
        trace = -ds.log_likelihood
        meta.update(
            {
                "ds_tol": float(o.ds_tol),
                "ds_max_iter": int(o.ds_max_iter),
                "ds_smoothing": float(o.ds_smoothing),
                "ds_prior": float(o.ds_prior) if o.method == "ds" else 0.0,
                "iterations": ds.iterations,
                "converged": ds.converged,
                "final_loss": float(-ds.log_likelihood[-1]) if ds.log_likelihood.size else float("nan"),
                "n_ties": ds.n_ties,
                "fit_status": _fit_status(ds.converged),
            }
        )
    ok = status == "ok"
    table = worker_table(lm.workers, skill, accuracy, weight, n_i, row_stats, graph, status, ok)
    keep = ["task", "label", "confidence", "n_labels", "fallback"]
    cons = cons[[*keep, *(["missing_reason"] if "missing_reason" in cons.columns else [])]].reset_index(drop=True)
    if is_crowdkit(o.method):
        if present is not None:
            explain_missing(table, ["skill", "accuracy", "vote_weight"], f"{o.method} returned none", where=~present)
        for col, why in undefined.items():
            explain_missing(table, [col], why)
    now = time.perf_counter()
    timings["fit"] = now - clock
    clock = now
    diag = diagnostics_table(lm, n_mat, w_all, graph, skill, status, o, witnesses, row_stats=row_stats)
    timings["diagnostics"] = time.perf_counter() - clock
    meta.update(
        {
            "eta": float("nan"),
            "n_fallback_tasks": 0,
            "frac_workers_identified": float(ok.mean()),
            "frac_labels_identified": float(ok[lm.worker_idx].mean()),
            "frac_tasks_identified": float(
                np.count_nonzero(np.bincount(lm.task_idx[ok[lm.worker_idx]], minlength=lm.n_tasks)) / lm.n_tasks
            ),
        }
    )
    explain_missing_skills(table, diag, o.method, pairs=n_mat is not None)
    return SkillsResult(
        skills=table, consensus=cons, diagnostics=diag, metadata=meta, loss_trace=trace, timings=timings
    )


@dataclass(frozen=True)
class AutoParts:
    """What ``method="auto"`` computes before it looks at any gold answer (:func:`prepare_auto`): the held-out
    choice and, for the gold rule, every candidate fitted on all labels without gold."""

    picked: AutoChoice
    fits: dict[str, SkillsResult]


def _candidate_options(o: SkillsOptions, name: str) -> SkillsOptions:
    return SkillsOptions.resolve(o, gold_in_fit=False, **CANDIDATES[name].options)


def prepare_auto(
    lm: LabelMatrix, o: SkillsOptions, with_fits: bool = True, progress: ProgressFn | None = None
) -> AutoParts:
    """The gold-free part of ``method="auto"``: :func:`crowdflow.skills.auto.choose` and, with ``with_fits``, each
    candidate fitted on all of ``lm`` without gold. No argument carries a gold answer, so nothing here depends on one:
    the gold cross-fit computes it once and reuses it in every fold."""
    names = list(o.auto_candidates or DEFAULT_CANDIDATES) if with_fits else []
    job = Span(progress) if progress is not None else None
    cut = n_fits(o) / (n_fits(o) + len(names))
    picked = choose(lm, o, progress=job.part(0.0, cut) if job is not None else None)
    fits = {}
    for i, name in enumerate(names):
        lo, hi = cut + (1 - cut) * i / len(names), cut + (1 - cut) * (i + 1) / len(names)
        share = job.part(lo, hi, f"auto {name} on all labels: ") if job is not None else None
        fits[name] = fit_skills(lm, _candidate_options(o, name), progress=share)
    if job is not None:
        job(1.0)
    return AutoParts(picked, fits)


def _fit_auto(
    lm: LabelMatrix,
    o: SkillsOptions,
    dropped: int,
    timings: dict[str, float],
    graph_report: WorkerGraphReport | None,
    moments: LabelMoments | None,
    executor: MapFn | None,
    n_partitions: int,
    scratch_dir: str | None,
    progress: ProgressFn | None,
    identifiability_policy: Policy,
    gold: np.ndarray | None = None,
    parts: AutoParts | None = None,
) -> SkillsResult:
    """``method="auto"``: choose a candidate by held-out log-likelihood (:func:`crowdflow.skills.auto.choose`),
    then refit it on all labels; the choice and every candidate's score go into ``metadata["auto"]``. With ``gold``,
    the gold tasks may overrule that choice (:func:`crowdflow.skills.gold_pick.gold_choose` on the candidates' fits
    without gold, ``metadata["auto_gold"]``), and the refit of a candidate that takes gold pins it.

    ``progress``: one rise from 0 to 1.0 over the whole job, each of the n fits (every candidate on every fold's
    training part, with gold every candidate on all labels, then the refit) a share 1/n of it
    (:class:`crowdflow.progress.Span`); pass lines name the fit.
    """
    clock = time.perf_counter()
    job = Span(progress) if progress is not None else None
    n_gold_fits = 0 if parts is not None or gold is None else len(o.auto_candidates or DEFAULT_CANDIDATES)
    cut = (n_fits(o) + n_gold_fits) / (n_fits(o) + n_gold_fits + 1.0) if parts is None else 0.0
    if parts is None:
        parts = prepare_auto(lm, o, gold is not None, job.part(0.0, cut) if job is not None else None)
    choice, from_gold = parts.picked.choice, None
    if gold is not None:
        from_gold = gold_choose(
            {n: gold_codes(lm, r.consensus)[0] for n, r in parts.fits.items()},
            gold,
            parts.picked.choice,
            o.auto_gold_level,
            {n: bool(r.metadata.get("converged", True)) for n, r in parts.fits.items()},
            list(parts.picked.scores["candidate"]),
        )
        choice = from_gold.choice
    chosen = _candidate_options(o, choice)
    select_time = time.perf_counter() - clock
    share = job.part(cut, 1.0, f"auto refit ({choice}): ") if job is not None else None
    if gold is not None and chosen.method not in GOLD_METHODS:
        res = parts.fits[choice]  # takes no gold (mv): its fit on all labels without gold is the refit
    else:  # the refit sees all labels and nothing of the folds: a fresh fit_skills call on the full label matrix
        res = fit_skills(
            lm,
            chosen,
            graph_report=graph_report,
            moments=moments,
            executor=executor,
            n_partitions=n_partitions,
            scratch_dir=scratch_dir,
            progress=share,
            identifiability_policy=identifiability_policy,
            gold=gold,
        )
    if job is not None:
        job(1.0)  # the job's end when the refit reported none (mv); after the refit's own 1.0 it passes nothing on
    meta = dict(res.metadata)
    meta["n_duplicates_dropped"] = int(dropped)
    meta["auto_choice"] = choice
    meta["auto"] = parts.picked.record()
    if from_gold is not None:
        meta["auto_gold"] = from_gold.record() | {"gold_pinned_in_refit": chosen.method in GOLD_METHODS}
    return replace(res, metadata=meta, timings={**timings, "select": select_time, **res.timings})
