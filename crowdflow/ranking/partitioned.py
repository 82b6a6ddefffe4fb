"""HodgeRank and a robust (trimmed) outlier fit on a comparison table split into partitions.

No process holds the rows at once. Partitions are opaque descriptors ``P`` read by a picklable
``read(P) -> DataFrame`` (canonical comparisons, :func:`~crowdflow.contracts.comparisons.canonical_comparisons`);
work runs through a generic executor ``executor(fn, items) -> results in order`` (a Dask client's
``map`` + ``gather``, or :func:`inline_executor`). Every function sent to the executor is a module-level
function bound with :func:`functools.partial`, so it pickles to worker processes.

**Passes.** The scan reads each partition; then each partition is read once more and encoded (item codes, the
oriented outcome and the weight, rows grouped by pair: :mod:`crowdflow.ranking.held`) into blocks that the executor
holds across the passes (:func:`crowdflow.executors.hold`: persisted futures in the Dask workers' memory); every
edge-sum and histogram pass is one compiled loop over the held rows, and the final write pass reads the partitions
again. The pipeline skips the first two reads (``held=`` and ``scans=``): its validate-and-copy pass keeps each
file's rows in the worker's memory (:func:`~crowdflow.ranking.passes.keep_local`) and scans them there, and the
blocks are built from what it kept. Each pass returns a compact summary:

1. *scan*: the distinct item ids, the row count and the distinct ``|y|`` (at most 3). The flow sorts the
   union of the ids with :func:`~crowdflow.labels.natural_order`, the order
   :func:`~crowdflow.ranking.graph.build_comparison_graph` gives, so internal ids agree with the in-memory fit.
2. *edges*: rows are encoded with that dictionary and oriented along their pair ``u < v``
   (``y° = s·y``, ``s = ±1``); per pair ``e`` the pass returns :class:`EdgeSums`: ``N_e`` (rows),
   ``W_e = Σw``, ``A_e = Σw·y°``, ``Q_e = Σw·y°²``, ``min/max y°``, the weights with ``y° > 0`` and
   ``y° < 0`` and the tie count. The aggregated problem (one row per pair, outcome ``Ȳ_e = A_e/W_e``,
   weight ``W_e``) has the same Laplacian ``L = Σ_e W_e(e_u − e_v)(e_u − e_v)ᵀ`` and divergence
   ``XᵀWy = Σ_e A_e(e_u − e_v)``, hence the same ``θ̂ = L†XᵀWy`` per component; the row residual norm is
   ``Σ_k w_k r_k² = Σ_e [(Q_e − A_e²/W_e) + W_e(Ȳ_e − d_e)²]`` with ``d_e = θ_u − θ_v``.
3. robust fit (when ``options.outliers != 'none'``), by the passes below, θ and a cut broadcast to the
   workers and nothing but edge sums and histograms coming back.

**Robust fit (the trimmed rule).** LBI and HLASSO need every row in one process, so the partitioned fit
runs the adaptive rule's trimmed least squares (docs/methods/ranking.md §3.4.2) as passes and flags by
its threshold directly:

* the start σ₀ = 1.4826·med_w|r| / √(1 − h̄) from a histogram pass (log-spaced bins, 1,000 per decade over
  ``[10⁻⁶, 10⁶]`` times the rms residual: a quantile is resolved to a bin's upper edge, 0.23 %);
* trimming passes: with ``(θ, σ)`` broadcast, a pass returns the edge sums of the rows with
  ``|r| ≤ 2.5σ`` (after the first step of a start, only for the pairs with a row whose kept status changed: the
  others' sums are the previous step's, which the flow keeps per block) and the number of rows whose kept status
  changed since the previous pass; ``Σ w min(r², (2.5σ)²)`` is the kept rows' ``Σ w r²`` from those sums plus
  ``(2.5σ)²`` times the dropped weight (no pass); the flow refits ``θ ← θ + L_in†X_inᵀW(y − Xθ)`` on the kept pairs and
  ``σ² = Σ_in w r² / (ψ(2.5)(W_in − p_in))``; the iteration stops when no row changes status (an exact
  fixed point). The least-trimmed-squares start (kept share 0.6, concentration steps of one histogram
  pass and one sums pass) competes when ``h̄ ≤ 0.15``; the fixed point with the smaller capped objective
  ``J = ½Σ w min(r²/σ², 2.5²) + (W − p)·log σ`` is kept, as in :func:`~crowdflow.ranking.scale.trimmed_scale`;
* graded outcomes: ``t*`` is Benjamini–Hochberg at ``fdr_q`` on a histogram of ``|r|/σ̂`` (each bin's
  lower edge a is a candidate: ``2Φ̄(a) ≤ q·W(|z| ≥ a)/W``), floored at ``t_min``; a row is an outlier iff
  ``|r_k| > t*·σ̂``;
* ±1 outcomes: the upset curve of :func:`~crowdflow.ranking.scale.upset_gap_cut` is fitted on the pairs
  (gap ``|d_e|/a``, upset weight, agreeing weight; the 90th percentile of the gaps over played rows is
  computed from the counts), and a row is an outlier iff it contradicts the trimmed order at a gap
  ``≥ g*`` (ties never);
* reported scores: the least-squares refit without the outliers (``debias``), offsets between pieces the
  kept rows no longer connect taken from the trimmed fit.

A final pass writes, per partition, the flagged rows (or all rows) with their residuals to
``out_dir/part-<k>.parquet`` and returns the counts. :func:`fit_trimmed` is the in-memory counterpart: the
same code on one partition, so the flags agree exactly with any partitioning (up to the order in which
floating-point sums are added; tested). It is not the ``lbi`` default: LBI/HLASSO flag along a path and
shrink, the trimmed rule thresholds one fit; on the planted family both recover the planted rows
(tests/ranking/test_partitioned.py).

**Memory (flow side).** O(n + |E|): the item dictionary (n ids), θ (8n bytes), the combined edge sums
(``|E|`` pairs × 9 numbers × 8 bytes = 72 bytes per pair) and the Laplacian (≤ n + 2|E| entries).
Per pass each partition returns: scan — its distinct ids and annotators' count (O(n_p) strings);
edges — 72 bytes per distinct pair of the partition (``|E_p| ≤ |E|``); a trimming step — 24 bytes per pair of
each held block (``|E_b|``), or per pair whose kept rows changed; histogram — ≤ 12,002 non-empty
bins × 12 bytes (≤ 144 KB); write — a path, counts and per-component / per-annotator counts. The
executor's result list holds one answer per partition, so a pass's transient peak is ``Σ_p |E_p|`` pairs
(≤ P·|E|, and ≤ the rows). The trimming steps keep each held block's last sums: 24 bytes × ``Σ_b |E_b|`` (≤ B·|E|
for B blocks, two per Dask worker). Broadcast to every task: the n ids and θ (8n bytes).

See docs/methods/ranking.md §2.4 (this fit) and §3.4.2 (the rule it mirrors).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy.special import ndtr, ndtri

from crowdflow.contracts.comparisons import ComparisonTableError
from crowdflow.contracts.errors import DegenerateInput
from crowdflow.contracts.missing import explain_missing
from crowdflow.executors import InlineMemory, MapFn, hold, holds, inline_executor, release, slots
from crowdflow.labels import natural_order
from crowdflow.ranking.graph import ComparisonGraph
from crowdflow.ranking.held_passes import _Kept, _Passes, _Step
from crowdflow.ranking.hodge import hodge_decomposition
from crowdflow.ranking.hodge_kernels import laplacian_bridges
from crowdflow.ranking.least_squares import LaplacianSolver, center_per_component, hodgerank_scores
from crowdflow.ranking.options import RankingOptions
from crowdflow.ranking.passes import (
    SKETCH_BINS,
    EdgeSums,
    Scan,
    _bin_lower,
    _Ctx,
    _encode_part,
    _Rule,
    _scan_part,
    _write_part,
    _Written,
    to_parquet,
)
from crowdflow.ranking.scale import (
    LTS_KEEP,
    LTS_MAX_LEVERAGE,
    MAX_TRIM,
    TRIM_K,
    _truncated_variance,
    upset_gap_cut,
)
from crowdflow.ranking.tables import _ranking_table
from crowdflow.ranking.types import GraphReport, _str

logger = logging.getLogger(__name__)

__all__ = [
    "SKETCH_BINS",
    "EdgeSums",
    "MapFn",
    "PartitionedRankingResult",
    "fit_ranking_partitioned",
    "fit_trimmed",
    "inline_executor",
]

#: The partitioned fit's cap on the triangle enumeration of its diagnostics (candidate triples): past it the
#: triangle columns are missing with their reason, so the flow's memory stays ~0.3 GB above the edge sums (at 10^6
#: comparisons of 1,000 Zipf-popular items the default cap, 5·10^7, let the enumeration add 2 GB and 10 s).
MAX_TRIANGLE_CANDIDATES = 5_000_000


def _identity(part: pd.DataFrame) -> pd.DataFrame:
    return part  # the reader of fit_trimmed's single in-memory partition


#: Trimming steps per start and concentration steps of the least-trimmed-squares start.
TRIM_MAX_ITER = 50
LTS_MAX_STEPS = 20


# ---------------------------------------------------------------------------------------------------
# Flow side
# ---------------------------------------------------------------------------------------------------


def _blocks(parts: list[Any], executor: MapFn) -> list[list[Any]]:
    """The partitions in consecutive blocks, one held item each: 2 per worker slot of an executor that holds (so
    the workers share the reading and each pass is a few tasks), one per partition otherwise (each pass then
    encodes one partition at a time again, holding nothing)."""
    k = min(len(parts), 2 * slots(executor)) if holds(executor) else len(parts)
    return [[parts[i] for i in idx] for idx in np.array_split(np.arange(len(parts)), k) if idx.size]


@dataclass(frozen=True)
class _Problem:
    """The aggregated problem: items, components and the all-rows edge sums."""

    items: np.ndarray
    sums: EdgeSums
    u: np.ndarray
    v: np.ndarray
    g: ComparisonGraph  # one row per pair: outcome Ȳ_e, weight W_e
    solver: str

    @property
    def n(self) -> int:
        return int(self.items.size)


def _edge_graph(items: np.ndarray, s: EdgeSums | _Kept, mask: np.ndarray | None = None) -> ComparisonGraph:
    n = items.size
    key, w, wy = (s.key, s.w, s.wy) if mask is None else (s.key[mask], s.w[mask], s.wy[mask])
    return ComparisonGraph.from_arrays(key // n, key % n, wy / w, w, n=n, items=items)


def _rss(s: EdgeSums | _Kept, u: np.ndarray, v: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """Per pair ``Σ_k w_k r_k² = (Q − A²/W) + W(Ȳ − d)²`` (0 for pairs without rows)."""
    pos = s.w > 0
    wsafe = np.where(pos, s.w, 1.0)
    ybar = s.wy / wsafe
    within = np.maximum(s.wy2 - s.wy * ybar, 0.0)
    return np.where(pos, within + s.w * (ybar - (theta[u] - theta[v])) ** 2, 0.0)


def _refit(pb: _Problem, kept: _Kept, theta_ref: np.ndarray) -> tuple[np.ndarray, int]:
    """LS on the kept rows from their edge sums, ``θ_ref`` supplying offsets the kept rows do not fix, and
    ``p_in = n − c_in`` (as :func:`~crowdflow.ranking.least_squares.ls_on_rows`)."""
    mask = kept.w > 0
    if not mask.any():
        return theta_ref.copy(), pb.n
    gk = _edge_graph(pb.items, kept, mask)
    sol = LaplacianSolver.from_graph(gk, method=pb.solver)
    theta = theta_ref + sol.solve(gk.divergence(gk.y - gk.gradient(theta_ref)))
    return center_per_component(theta, pb.g.component, pb.g.n_components), pb.n - gk.n_components


def _uv(items: np.ndarray, s: EdgeSums | _Kept) -> tuple[np.ndarray, np.ndarray]:
    return s.key // items.size, s.key % items.size  # pairs are keyed u·n + v


def _quantile(h: np.ndarray, q: float) -> float:
    """Upper edge of the bin holding the lower weighted q-quantile of a histogram (in its units)."""
    cw = np.cumsum(h)
    b = int(np.searchsorted(cw, q * cw[-1], side="left"))
    return float(_bin_lower(b + 1))


@dataclass(frozen=True)
class _Fixed:
    sigma: float
    theta: np.ndarray
    J: float
    trimmed_weight: float
    start: str
    n_iter: int
    converged: bool


def _trim_iterate(ps: _Passes, pb: _Problem, theta: np.ndarray, sigma: float, start: str) -> _Fixed:
    """Trimming passes from ``(θ, σ)`` to the fixed point where no row changes its kept status."""
    psi = _truncated_variance(TRIM_K)
    W = float(pb.sums.w.sum())
    dof_full = W - (pb.n - pb.g.n_components)
    prev: _Rule | None = None
    for it in range(1, TRIM_MAX_ITER + 1):
        rule = _Rule(theta, TRIM_K * sigma)
        st = ps.edges(rule, prev)
        trimmed = W - float(st.sums.w.sum())
        # Σ w min(r², cut²): the kept rows' Σ w r² (|r| ≤ cut) plus cut² for each dropped unit of weight
        u, v = _uv(pb.items, st.sums)
        capped = float(_rss(st.sums, u, v, theta).sum()) + rule.cut**2 * trimmed
        J = 0.5 * capped / sigma**2 + dof_full * math.log(sigma)
        if prev is not None and st.n_changed == 0:
            return _Fixed(sigma, theta, J, trimmed, start, it, True)
        new_theta, p_in = _refit(pb, st.sums, theta)
        dof = float(st.sums.w.sum()) - p_in
        new = math.sqrt(float(_rss(st.sums, u, v, new_theta).sum()) / (psi * dof)) if dof > 0 else 0.0
        if new <= 0:
            return _Fixed(0.0, new_theta, math.inf, trimmed, start, it, True)
        prev, theta, sigma = rule, new_theta, new
    return _Fixed(sigma, theta, J, trimmed, start, TRIM_MAX_ITER, False)


def _lts_start(
    ps: _Passes, pb: _Problem, theta: np.ndarray, rms: float, h0: np.ndarray
) -> tuple[np.ndarray, float] | None:
    """Least-trimmed-squares start: concentration steps keeping the ``LTS_KEEP`` share of the weight. ``h0`` is the
    histogram at the start ``(θ, rms)``, which the σ₀ start already made (one pass fewer, the same histogram)."""
    held: _Step | None = None
    prev: _Rule | None = None
    p_in = pb.n - pb.g.n_components
    for step in range(LTS_MAX_STEPS):
        c = _quantile(h0 if step == 0 else ps.histogram(theta, rms), LTS_KEEP) * rms
        rule = _Rule(theta, c)
        st = ps.edges(rule, prev)
        if prev is not None and st.n_changed == 0:
            break
        held, prev = st, rule
        theta, p_in = _refit(pb, st.sums, theta)
    if held is None:
        return None
    z = float(-ndtri((1.0 - LTS_KEEP) / 2.0))
    u, v = _uv(pb.items, held.sums)
    dof = float(held.sums.w.sum()) - p_in
    if dof <= 0:
        return None
    s = math.sqrt(float(_rss(held.sums, u, v, theta).sum()) / (_truncated_variance(z) * dof))
    return (theta, s) if s > 0 else None


def _trimmed_scale(ps: _Passes, pb: _Problem, theta_ls: np.ndarray) -> _Fixed:
    """σ̂ and θ of the trimmed fit from the 'ls' and (guarded) 'lts' starts (module docstring)."""
    W = float(pb.sums.w.sum())
    p_full = pb.n - pb.g.n_components
    rms = math.sqrt(float(_rss(pb.sums, pb.u, pb.v, theta_ls).sum()) / max(W, 1e-300))
    ymax = float(np.maximum(np.abs(pb.sums.ymin), np.abs(pb.sums.ymax)).max(initial=0.0))
    if rms <= 1e-12 * max(1.0, ymax) or W - p_full <= 0:
        return _Fixed(0.0, theta_ls, math.inf, 0.0, "ls", 0, True)
    hbar = min(p_full / W, 0.95)
    h0 = ps.histogram(theta_ls, rms)
    s0 = 1.4826 * _quantile(h0, 0.5) * rms / math.sqrt(1.0 - hbar)
    best = _trim_iterate(ps, pb, theta_ls, s0 if s0 > 0 else rms, "ls")
    if hbar <= LTS_MAX_LEVERAGE:
        lts = _lts_start(ps, pb, theta_ls, rms, h0)
        if lts is not None:
            alt = _trim_iterate(ps, pb, lts[0], lts[1], "lts")
            if alt.sigma > 0 and alt.trimmed_weight <= MAX_TRIM * W and alt.J < best.J:
                best = alt
    return best


def _bh_grid(h: np.ndarray, q: float, t_min: float) -> float:
    """Benjamini–Hochberg threshold on a histogram of ``|z|``: the smallest non-empty bin lower edge a with
    ``2Φ̄(a) ≤ q·W(|z| ≥ a)/W`` (Bonferroni point when none), floored at ``t_min``."""
    W = float(h.sum())
    tail = np.cumsum(h[::-1])[::-1]
    nz = np.flatnonzero(h)
    a = _bin_lower(nz)
    ok = 2.0 * ndtr(-a) <= q * tail[nz] / max(W, 1e-300)
    t = float(a[ok].min()) if ok.any() else float(-ndtri(min(q / (2.0 * max(W, 1.0)), 0.5)))
    return max(t, t_min)


def _row_quantile(values: np.ndarray, counts: np.ndarray, q: float) -> float:
    """``np.quantile`` (linear) of the multiset where ``values[e]`` appears ``counts[e]`` times."""
    o = np.argsort(values, kind="stable")
    x, c = values[o], np.cumsum(counts[o])
    if c.size == 0 or c[-1] == 0:
        return 0.0
    h = (c[-1] - 1) * q
    lo = math.floor(h)
    a = float(x[np.searchsorted(c, lo + 1)])
    b = float(x[np.searchsorted(c, min(lo + 2, c[-1]))])
    return float(a + (h - lo) * (b - a))


@dataclass(frozen=True)
class _Flags:
    rule: _Rule | None
    lam: float
    t: float
    outcome: str


def _pm1_flags(pb: _Problem, fx: _Fixed, a: float, q: float) -> _Flags:
    """±1 outcomes: the upset-curve cut g* on the pairs; flag upsets at gaps ≥ g*."""
    s = pb.sums
    d = fx.theta[pb.u] - fx.theta[pb.v]
    gap = np.abs(d) / a
    up = np.where(d > 0, s.wneg, np.where(d < 0, s.wpos, 0.0))
    agree = (s.wpos + s.wneg) - up
    played = s.count - s.ties
    scale = _row_quantile(gap, played, 0.9)
    g2 = np.r_[gap, gap]
    u2 = np.r_[np.ones(gap.size, bool), np.zeros(gap.size, bool)]
    w2 = np.r_[up, agree]
    keep = w2 > 0
    cut, _, _ = upset_gap_cut(g2[keep], u2[keep], w2[keep], q=q, gap_scale=scale)
    if not math.isfinite(cut):
        return _Flags(None, math.inf, math.inf, "plus_minus_one")
    lam = a * (1.0 + cut)
    t = lam / fx.sigma if fx.sigma > 0 else math.inf
    return _Flags(_Rule(fx.theta, a * cut * (1.0 - 1e-12), "upset"), lam, t, "plus_minus_one")


@dataclass(frozen=True)
class PartitionedRankingResult:
    """Result of :func:`fit_ranking_partitioned` (all tables O(n items + components + annotators)).

    Attributes
    ----------
    ranking : pandas.DataFrame
        ``item, score, rank, component, n_comparisons`` (as :func:`~crowdflow.ranking.fit_hodgerank`).
    scores : pandas.DataFrame
        ``item, component, score_ls, score_robust, score_debiased`` (equal columns without outliers).
    diagnostics : pandas.DataFrame
        Per-component Hodge diagnostics (residual quantiles NaN, see docs/methods/ranking.md §2.4);
        ``n_outliers, outlier_weight_share`` when robust.
    annotators : pandas.DataFrame
        ``annotator, n_comparisons, n_outliers, outlier_rate``.
    graph : GraphReport
    row_files, rows_written : list
        One Parquet file per partition (``part, row_id, annotator, item_a, item_b, outcome, weight,
        fitted, residual, is_outlier``; none without ``out_dir``) and the rows written to each.
    n_rows, n_outliers, outlier_weight, passes, params
        Totals, the passes over the partitions and the run's parameters.
    sigma, threshold : float or None
        σ̂ and λ* (outcome units) of the robust fit; None for least squares.
    """

    ranking: pd.DataFrame
    scores: pd.DataFrame
    diagnostics: pd.DataFrame
    annotators: pd.DataFrame
    graph: GraphReport
    row_files: list[str]
    rows_written: list[int]
    n_rows: int
    n_outliers: int
    outlier_weight: float
    sigma: float | None
    threshold: float | None
    passes: int
    params: dict[str, Any] = field(default_factory=dict)


def _graph_report(pb: _Problem, degree: np.ndarray, n_rows: int) -> GraphReport:
    g = pb.g
    comp = pd.DataFrame({"item": _str(g.items), "component": g.component, "degree": degree.astype(np.int64)})
    return GraphReport(
        n_items=g.n,
        n_rows=n_rows,
        n_edges=g.n_edges,
        n_components=g.n_components,
        cycle_dim=n_rows - g.n + g.n_components,
        components=comp,
        component_sizes=g.component_sizes,
        isolated_items=[str(x) for x in g.items[degree == 0]],
        connected=g.n_components == 1,
    )


_QUANTILES = ["residual_q50", "residual_q90", "residual_q99"]


def _diagnostics(pb: _Problem, theta: np.ndarray, solver: LaplacianSolver) -> pd.DataFrame:
    """The per-component table of :func:`~crowdflow.ranking.hodge.hodge_decomposition` from edge sums.

    Edge-level columns (items, pairs, Fiedler value, triangles, TSR, curl/harmonic split, harmonic dimension) come
    from the aggregated graph; the row-level ones from the sums: rows, ``cycle_dim``, ``‖y‖²_W = ΣQ``, ``‖r‖²_W``
    and the bi-cycle part ``Σ(Q − A²/W)``, ``max|r| = max_e max(|y°max − d|, |y°min − d|)`` and the undetectable
    rows (exact bridge pairs whose rows agree). Row quantiles of |r| need the rows and are NaN (explained).
    """
    g, s = pb.g, pb.sums
    C = g.n_components
    undet_e = laplacian_bridges(g.L, g.n_edges) & (s.ymin == s.ymax)
    hd = hodge_decomposition(
        g, theta, solver=solver, undetectable=undet_e, max_triangle_candidates=MAX_TRIANGLE_CANDIDATES
    )
    t = hd.table.drop(columns=["missing_reason"])
    ecomp = g.component[pb.u]
    n_rows = np.bincount(ecomp, weights=s.count, minlength=C).round().astype(np.int64)
    ynorm = np.bincount(ecomp, weights=s.wy2, minlength=C)
    within = np.maximum(s.wy2 - s.wy * (s.wy / s.w), 0.0) if s.w.size else np.zeros(0)
    d = theta[pb.u] - theta[pb.v]
    with np.errstate(invalid="ignore", divide="ignore"):
        den = np.where(ynorm > 0, ynorm, np.nan)
        t["total_inconsistency"] = np.bincount(ecomp, weights=_rss(s, pb.u, pb.v, theta), minlength=C) / den
        t["bicycle_share"] = np.bincount(ecomp, weights=within, minlength=C) / den
        for col, part in (("curl_share", hd.curl), ("harmonic_share", hd.harmonic)):
            t[col] = np.bincount(ecomp, weights=g.w * part * part, minlength=C) / den if hd.curl_split else np.nan
    t["n_rows"] = n_rows
    t["cycle_dim"] = n_rows - g.component_sizes + 1
    t["weight"] = np.bincount(ecomp, weights=s.w, minlength=C)
    maxr = np.full(C, -np.inf)
    np.maximum.at(maxr, ecomp, np.maximum(np.abs(s.ymax - d), np.abs(s.ymin - d)))
    t["max_abs_residual"] = np.where(n_rows > 0, maxr, np.nan)
    for col in _QUANTILES:
        t[col] = np.nan
    t["n_undetectable"] = np.bincount(ecomp, weights=s.count * undet_e, minlength=C).round().astype(np.int64)
    explain_missing(t, list(t.columns), "no comparison rows in this component", where=n_rows == 0)
    explain_missing(t, ["fiedler_value"], "single-item component (no Fiedler value)")
    shares = ["total_inconsistency", "bicycle_share", "curl_share", "harmonic_share"]
    explain_missing(t, shares, "every outcome in the component is 0 (all ties), so no share of it", where=ynorm == 0)
    tri_cols = ["n_triangles", "n_cyclic_triangles", "tsr", "curl_share", "harmonic_share", "harmonic_dim"]
    if hd.n_triangles < 0:
        explain_missing(
            t,
            tri_cols,
            f"triangles not enumerated, more than {MAX_TRIANGLE_CANDIDATES:,} candidate triples (the partitioned "
            "fit's cap that keeps the flow's memory bounded, docs/methods/ranking.md §2.4)",
        )
    elif not hd.curl_split:
        explain_missing(t, tri_cols[3:], "curl/harmonic split skipped (more triangles than max_triangles)")
    explain_missing(t, ["tsr"], "no triangle whose three pairs all have a non-tied mean outcome")
    explain_missing(t, ["harmonic_dim"], "harmonic dimension computed for dense-solver components only")
    explain_missing(t, _QUANTILES, "row quantiles of the residual are not computed by the partitioned fit")
    return t


def _annotators(frames: list[pd.DataFrame]) -> pd.DataFrame:
    agg = pd.concat(frames, ignore_index=True).groupby("annotator", sort=True)[["size", "sum"]].sum().reset_index()
    out = pd.DataFrame(
        {
            "annotator": _str(agg["annotator"].to_numpy(dtype=object)),
            "n_comparisons": agg["size"].to_numpy(dtype=np.int64),
            "n_outliers": agg["sum"].to_numpy(dtype=np.int64),
        }
    )
    out["outlier_rate"] = out["n_outliers"] / out["n_comparisons"]
    return out


def _dictionary(
    parts: list[Any],
    read: Callable[[Any], pd.DataFrame],
    executor: MapFn,
    items: Sequence[Any] | None,
    scans: Sequence[Scan | None] | None = None,
) -> tuple[np.ndarray, int, bool, float]:
    """Scan pass: the item dictionary (natural order), the row count, whether the outcomes are ±a, and a.

    ``scans`` (one per partition, None where unknown) are scans the first read already made: only the partitions
    without one are read here.
    """
    known = list(scans) if scans is not None else [None] * len(parts)
    todo = [k for k, sc in enumerate(known) if sc is None]
    for k, sc in zip(todo, executor(partial(_scan_part, read), [parts[k] for k in todo]) if todo else [], strict=True):
        known[k] = sc
    scan = [sc for sc in known if sc is not None]
    ids = [r[0] for r in scan]
    if items is not None:
        extra = pd.Series(list(items), dtype=object)
        if extra.isna().any():
            raise ValueError("items: the item universe contains missing ids")
        ids.append(extra.astype(str).to_numpy(dtype=object))
    universe = np.asarray(pd.unique(np.concatenate(ids)), dtype=object)
    levels = np.unique(np.concatenate([r[2] for r in scan]))
    nonzero = levels[levels > 0]
    top = float(levels.max()) if levels.size else 0.0
    return universe[natural_order(universe)], int(sum(r[1] for r in scan)), nonzero.size == 1, top


def fit_ranking_partitioned(
    parts: Sequence[Any],
    read: Callable[[Any], pd.DataFrame],
    executor: MapFn = inline_executor,
    options: RankingOptions | None = None,
    out_dir: str | None = None,
    *,
    items: Sequence[Any] | None = None,
    robust: bool | None = None,
    write_rows: Literal["outliers", "all"] | None = None,
    held: Sequence[Any] | None = None,
    scans: Sequence[Scan | None] | None = None,
    write_part: Callable[[pd.DataFrame, str], Any] = to_parquet,
    **overrides: Any,
) -> PartitionedRankingResult:
    """HodgeRank and the trimmed outlier rule over partitions, by passes (module docstring for the math).

    Parameters
    ----------
    parts : sequence
        Partition descriptors, passed to ``read`` on the workers.
    read : callable
        ``read(part) -> DataFrame`` in any layout :func:`~crowdflow.contracts.comparisons.canonical_comparisons`
        accepts; must pickle (a module-level function or a partial of one) and return the same rows on
        every pass.
    executor : MapFn
        ``executor(fn, items) -> results in order`` (default :func:`inline_executor`).
    options : RankingOptions, optional
        Uses ``outliers`` (``'none'``: least squares only; otherwise the trimmed rule), ``fdr_q``,
        ``t_min``, ``debias``, ``diagnostics``, ``solver``, ``allow_disconnected``.
    out_dir : str, optional
        Folder for the per-partition Parquet files (created); no files without it.
    items : sequence, optional
        Item universe (never-compared items become isolated components).
    robust : bool, optional
        Run the trimmed outlier rule (default: ``options.outliers != 'none'``).
    write_rows : {'outliers', 'all'}, optional
        Rows written per partition (default: the outliers for a robust fit, every row otherwise).
    held : sequence, optional
        Handles (one per partition, in order) of what the executor holds from the pipeline's first read of each
        file (:func:`crowdflow.executors.hold` of ``read_check_copy(encode=keep_local)``: values with ``.path``, the
        copy, and ``.kept``, its :class:`~crowdflow.ranking.passes.LocalRows` or None). The blocks are then built
        from memory instead of a second read of the copies; the handles are released once the blocks are held.
    scans : sequence, optional
        The first read's scans (one per partition, None where it made none): the scan pass reads only the others.
    write_part : callable
        ``write_part(rows, path)`` writes one partition's row file on the worker (picklable; default
        :func:`~crowdflow.ranking.passes.to_parquet`; the pipeline passes its writer of final parts, which the export
        then moves instead of rewriting).
    **overrides
        Fields of :class:`RankingOptions`.

    Returns
    -------
    PartitionedRankingResult

    Raises
    ------
    DegenerateInput
        A disconnected graph with ``allow_disconnected=False``.
    """
    o = RankingOptions.resolve(options, **overrides)
    parts = list(parts)
    if not parts:
        raise ValueError("no partitions: nothing to rank")
    robust = o.outliers != "none" if robust is None else robust
    if robust and o.outliers != "none":
        logger.info("outliers=%r needs every row in one process: the partitioned fit runs the trimmed rule", o.outliers)
    t_start = time.perf_counter()
    item_ids, n_rows, pm1, a = _dictionary(parts, read, executor, items, scans)
    if n_rows == 0:
        raise ComparisonTableError("comparisons table is empty: nothing to rank (every partition has zero rows)")
    ctx = _Ctx(item_ids)
    if held is not None and (len(held) != len(parts) or not holds(executor)):
        raise ValueError(f"held: {len(held)} handles for {len(parts)} partitions, executor holds: {holds(executor)}")
    blocks = _blocks(parts if held is None else list(held), executor)
    # each partition read and encoded once, held by the executor across the passes (workers' memory on Dask);
    # with `held`, the blocks are built from the rows the first read kept (no read of the copies here)
    ps = _Passes(hold(executor, partial(_encode_part, read, ctx), blocks), executor, ctx, count=1)
    if held is not None:
        release(executor, list(held))
    t_read = time.perf_counter() - t_start  # the scan and the encode: two reads of every partition (none with held)
    base = ps.base()
    u, v = _uv(item_ids, base)
    g = _edge_graph(item_ids, base)
    n = item_ids.size
    degree = (np.bincount(u, weights=base.count, minlength=n) + np.bincount(v, weights=base.count, minlength=n)).round()
    pb = _Problem(item_ids, base, u, v, g, o.solver)
    rep = _graph_report(pb, degree, n_rows)
    if rep.n_components > 1 and not o.allow_disconnected:
        raise DegenerateInput(
            "the comparison graph is not connected: " + rep.describe() + ". Scores are only comparable within a "
            "component; set the option allow_disconnected to rank every component separately.",
            reason="disconnected",
        )
    sol = LaplacianSolver.from_graph(g, method=o.solver)
    theta_ls = hodgerank_scores(g, sol)
    if o.diagnostics:
        diag = _diagnostics(pb, theta_ls, sol)
    else:
        diag = pd.DataFrame({"component": np.arange(g.n_components, dtype=np.int64)})
    params: dict[str, Any] = {
        "method": "trimmed" if robust else "ls",
        "solver": sol.method,
        "n_items": g.n,
        "n_rows": n_rows,
        "n_edges": g.n_edges,
        "n_components": g.n_components,
        "n_partitions": len(parts),
        "n_blocks": len(blocks),
        "held_rows": "memory" if holds(executor) else "recomputed",
        "held_bytes": ps.held_bytes(),
    }
    theta_rob = theta_deb = theta_ls
    flags = _Flags(None, math.inf, math.inf, "graded")
    sigma: float | None = None
    if robust:
        fx = _trimmed_scale(ps, pb, theta_ls)
        sigma, theta_rob = fx.sigma, fx.theta
        if pm1:
            flags = _pm1_flags(pb, fx, a, o.fdr_q)
        elif fx.sigma > 0:
            t = _bh_grid(ps.histogram(fx.theta, fx.sigma), o.fdr_q, o.t_min)
            flags = _Flags(_Rule(fx.theta, t * fx.sigma), t * fx.sigma, t, "graded")
        if flags.rule is not None:
            kept = ps.edges(flags.rule).sums
            if kept.n_rows < n_rows:
                theta_deb = _refit(pb, kept, theta_rob)[0]
        params.update(
            sigma=fx.sigma,
            t=flags.t if math.isfinite(flags.t) else None,
            adaptive_lambda=flags.lam if math.isfinite(flags.lam) else None,
            outcome_kind=flags.outcome,
            scale_start=fx.start,
            trim_iterations=fx.n_iter,
            converged=fx.converged,
            fdr_q=o.fdr_q,
            t_min=o.t_min,
            debias=o.debias,
        )
    t_write = time.perf_counter()
    release(executor, ps.handles)  # the held rows are no longer needed: the last pass reads the partitions
    score = theta_deb if (robust and o.debias) else theta_rob
    files: list[str] = []
    written: list[int] = []
    n_out, out_w = 0, 0.0
    ann = _annotators([pd.DataFrame({"annotator": [], "size": [], "sum": []})])
    if robust or out_dir is not None:
        if out_dir is not None:
            os.makedirs(out_dir, exist_ok=True)
        write_all = (write_rows or ("outliers" if robust else "all")) == "all"
        ps.count += 1
        fn = partial(
            _write_part, read, ps.ctx, score, g.component, g.n_components, flags.rule, out_dir, write_all, write_part
        )
        res: list[_Written] = executor(fn, list(enumerate(parts)))
        files = [r.path for r in res if r.path is not None]
        written = [r.n_written for r in res]
        out_count = np.sum([r.out_count for r in res], axis=0)
        out_weight = np.sum([r.out_weight for r in res], axis=0)
        n_out, out_w = int(out_count.sum()), float(out_weight.sum())
        ann = _annotators([r.annotators for r in res])
        if robust and o.diagnostics:
            diag["n_outliers"] = out_count.astype(np.int64)
            wc = np.bincount(g.component[u], weights=base.w, minlength=g.n_components)
            with np.errstate(invalid="ignore", divide="ignore"):
                diag["outlier_weight_share"] = out_weight / wc
            explain_missing(diag, ["outlier_weight_share"], "no comparison rows in this component")
    t_end = time.perf_counter()
    params.update(
        n_outliers=n_out,
        outlier_weight=out_w,
        passes=ps.count,
        held_passes=ps.held_passes,
        held_pass_s=round(ps.held_s, 3),
        step_pairs_sent=ps.sent // 3,
        read_s=round(t_read + (t_end - t_write), 3),
        fit_s=round(t_end - t_start, 3),
    )
    scores = pd.DataFrame(
        {
            "item": _str(item_ids),
            "component": g.component.astype(np.int64),
            "score_ls": theta_ls,
            "score_robust": theta_rob,
            "score_debiased": theta_deb,
        }
    )
    logger.info("partitioned ranking (%s): %s", params["method"], params)
    return PartitionedRankingResult(
        ranking=_ranking_table(g, score, degree),
        scores=scores,
        diagnostics=diag,
        annotators=ann,
        graph=rep,
        row_files=files,
        rows_written=written,
        n_rows=n_rows,
        n_outliers=n_out,
        outlier_weight=out_w,
        sigma=sigma,
        threshold=flags.lam if robust and math.isfinite(flags.lam) else None,
        passes=ps.count,
        params=params,
    )


def fit_trimmed(
    comparisons: pd.DataFrame,
    options: RankingOptions | None = None,
    out_dir: str | None = None,
    *,
    items: Sequence[Any] | None = None,
    write_rows: Literal["outliers", "all"] | None = None,
    **overrides: Any,
) -> PartitionedRankingResult:
    """The trimmed outlier rule in memory: :func:`fit_ranking_partitioned` on one partition, inline.

    The same code path as a partitioned run, so its flags are the partitioned run's flags (up to the
    order of floating-point sums). Not offered as an ``outliers:`` option value yet: that changes the
    pipeline spec's schema, which is the pipeline's to decide; ``outliers: trimmed`` is the natural name.
    """
    return fit_ranking_partitioned(
        [comparisons],
        _identity,
        InlineMemory(),
        options,
        out_dir,
        items=items,
        robust=True,
        write_rows=write_rows,
        **overrides,
    )
