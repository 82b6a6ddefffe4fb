"""Identifiability of the skills: which workers can be fitted, and per-component diagnostics.

The moments determine the skills exactly on the connected components of the worker interaction graph
that contain an odd cycle: on a bipartite component, multiplying one colour class by α and the other by
1/α leaves every product s_i s_j unchanged (docs/methods/skills.md §3.1). This module finds the active
set (statuses ok / isolated / bipartite_component / too_few_labels, recomputed until stable), one odd
cycle per non-bipartite component as a witness, and the per-component diagnostics table: sizes, N
statistics, signless-Laplacian eigenvalues and the Theorem-12 error bound. The components and their
bipartiteness come from ``crowdflow.graphs.graph_structure``. See docs/methods/skills.md §2.8, §3.2, §3.4.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import scipy.sparse as sp

from crowdflow._typing import SparseMatrix
from crowdflow.graphs import Components, GraphStructure, graph_structure, restrict_to, without_diagonal
from crowdflow.labels import LabelMatrix
from crowdflow.skills.consensus import skill_box
from crowdflow.skills.spectra import DENSE_EIG_MAX, signless_lambda_min, signless_min_pair, top_eigenvalue


def witness_cycles(structure: GraphStructure) -> dict[int, np.ndarray]:
    odd = np.flatnonzero(structure.odd_edge[:, 0] >= 0)
    if odd.size == 0:
        return {}
    pred = structure.pred
    cu = structure.odd_edge[odd, 0].copy()
    cv = structure.odd_edge[odd, 1].copy()
    us, vs = [cu.copy()], [cv.copy()]
    while np.any(cu != cv):  # climb both branches (same depth) to the lowest common ancestor
        m = cu != cv
        cu[m] = pred[cu[m]]
        cv[m] = pred[cv[m]]
        us.append(cu.copy())
        vs.append(cv.copy())
    us_a, vs_a = np.vstack(us), np.vstack(vs)
    ks = np.argmax(us_a == vs_a, axis=0)
    out: dict[int, np.ndarray] = {}
    for j, c in enumerate(odd):
        k = int(ks[j])
        out[int(c)] = np.concatenate([us_a[: k + 1, j], vs_a[:k, j][::-1]]).astype(np.int64)
    return out


def odd_cycle_witnesses(adj: SparseMatrix, graph: Components | None = None) -> dict[int, np.ndarray]:
    """One odd cycle per non-bipartite component (docs/methods/skills.md §3.2 step 2).

    A BFS from the smallest node of each component assigns levels; a non-bipartite component
    has an edge (u, v) joining two nodes of the same level. The witness is u → … → lca → … → v
    along the BFS tree (both branches have the same length k), closed by the edge (v, u): an odd
    cycle of 2k + 1 distinct nodes. All components are processed together (vectorised ascent);
    see :func:`graph_structure`.

    Parameters
    ----------
    adj : scipy.sparse matrix
        Symmetric adjacency (nonzero = edge).
    graph : Components, optional
        Accepted for compatibility; component ids are those of :func:`graph_structure` (the same
        numbering as ``crowdflow.graphs.components``).

    Returns
    -------
    dict
        component id → node ids of the cycle in order (consecutive nodes adjacent, last adjacent
        to first).
    """
    return witness_cycles(graph_structure(adj))


def theorem12_error_bound(co_labels: SparseMatrix, kappa: float, big_k: float, max_delta: float) -> float:
    """Theorem 12 limit-error bound ||x* − s||_2 ≤ K √W ||N||_∞ / μ · max|Δ| (docs/methods/skills.md §3.4).

    μ = κ² λ_min(L_s^unit) N_min with L_s^unit the unit-weight signless Laplacian of the pattern
    of N, N_min the smallest positive N_ij and ||N||_∞ the largest row sum. Infinite when
    μ = 0 (bipartite graph).
    """
    n = without_diagonal(co_labels).astype(np.float64)
    if n.nnz == 0:
        return float("inf")
    unit = sp.csr_matrix((np.ones(n.nnz), n.indices, n.indptr), shape=n.shape)
    lam, _ = signless_lambda_min(unit)
    mu = kappa**2 * lam * float(n.data.min())
    if mu <= 0:
        return float("inf")
    norm_inf = float(np.asarray(n.sum(axis=1)).max())
    return float(big_k * math.sqrt(n.shape[0]) * norm_inf / mu * max_delta)


def _group_stats(groups: np.ndarray, values: np.ndarray, n_groups: int) -> tuple[np.ndarray, ...]:
    """Per-group min, median and max of ``values`` (NaN for empty groups), by one sort."""
    out_min = np.full(n_groups, np.nan)
    out_med = np.full(n_groups, np.nan)
    out_max = np.full(n_groups, np.nan)
    if values.size == 0:
        return out_min, out_med, out_max
    v = _sorted_by_group(groups, values, n_groups)
    cnt = np.bincount(groups, minlength=n_groups)
    start = np.concatenate([[0], np.cumsum(cnt)[:-1]])
    has = cnt > 0
    s, c = start[has], cnt[has]
    out_min[has] = v[s]
    out_max[has] = v[s + c - 1]
    out_med[has] = 0.5 * (v[s + (c - 1) // 2] + v[s + c // 2])
    return out_min, out_med, out_max


def _sorted_by_group(groups: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """``values`` sorted by (group, value), as ``values[np.lexsort((values, groups))]``.

    Co-label counts are small non-negative integers: then one sort of the key group·(max + 1) + value,
    several times faster than the lexsort (which stays the rule for other values).
    """
    top = float(values.max())
    whole = top < 2**31 and float(values.min()) >= 0 and bool(np.all(values == np.floor(values)))
    if whole and n_groups * (top + 1) < 2**62:
        if n_groups == 1:
            return np.sort(values)
        span = np.int64(top) + 1
        key = np.sort(groups.astype(np.int64) * span + values.astype(np.int64))
        return (key % span).astype(values.dtype)
    order = np.lexsort((values, groups))
    return values[order]


def _group_quantile(groups: np.ndarray, values: np.ndarray, n_groups: int, q: float) -> np.ndarray:
    """Per-group quantile with linear interpolation (numpy's default), NaN for empty groups."""
    out = np.full(n_groups, np.nan)
    if values.size == 0:
        return out
    order = np.lexsort((values, groups))
    g, v = groups[order], values[order]
    cnt = np.bincount(g, minlength=n_groups)
    start = np.concatenate([[0], np.cumsum(cnt)[:-1]])
    has = cnt > 0
    s, c = start[has], cnt[has]
    h = (c - 1) * q
    lo = np.floor(h).astype(np.int64)
    hi = np.minimum(lo + 1, c - 1)
    out[has] = v[s + lo] + (h - lo) * (v[s + hi] - v[s + lo])
    return out


def labels_and_tasks_per_component(
    lm: LabelMatrix, worker_component: np.ndarray, n_components: int
) -> tuple[np.ndarray, np.ndarray]:
    """Labels, and tasks with at least one label, per component of the worker graph (int64 arrays).

    Sums over tasks: for labels split into partitions that hold whole tasks, the sums over the partitions.
    """
    nc = n_components
    lab_comp = worker_component[lm.worker_idx]
    n_lab = np.bincount(lab_comp, minlength=nc).astype(np.int64)
    # tasks touching each component: the largest component by a bincount over tasks, the rest
    # (usually few labels) by a unique over (task, component) pairs
    n_tasks = np.zeros(nc, dtype=np.int64)
    if nc and lm.n_labels:
        big = int(np.argmax(n_lab))
        in_big = lab_comp == big
        n_tasks[big] = int(np.count_nonzero(np.bincount(lm.task_idx[in_big], minlength=lm.n_tasks)))
        if not in_big.all():
            pairs = np.unique(lm.task_idx[~in_big] * nc + lab_comp[~in_big])
            n_tasks += np.bincount(pairs % nc, minlength=nc)
    return n_lab, n_tasks


def _per_component_counts(
    lm: LabelMatrix | None,
    per_component: tuple[np.ndarray, np.ndarray] | None,
    worker_component: np.ndarray,
    n_components: int,
    caller: str,
) -> tuple[np.ndarray, np.ndarray]:
    """The given per-component (labels, tasks) counts, or :func:`labels_and_tasks_per_component` of ``lm``."""
    if per_component is not None:
        return per_component
    if lm is None:
        raise ValueError(f"{caller} needs the labels or their per_component counts")
    return labels_and_tasks_per_component(lm, worker_component, n_components)


def component_diagnostics(
    lm: LabelMatrix | None,
    co_labels: sp.csr_matrix,
    weights: sp.csr_matrix,
    graph: Components,
    skills: np.ndarray | None = None,
    worker_status: np.ndarray | None = None,
    *,
    spectral: bool = True,
    dense_max: int = DENSE_EIG_MAX,
    witness: bool = True,
    delta: float = 0.05,
    spectral_max_nnz: int | None = 2_000_000,
    witnesses: dict[int, np.ndarray] | None = None,
    per_component: tuple[np.ndarray, np.ndarray] | None = None,
) -> pd.DataFrame:
    """Per-component diagnostics table of docs/methods/skills.md §3.4.

    Columns: component, status, n_workers, n_ok_workers, n_edges, n_tasks, n_labels, bipartite,
    odd_cycle_witness_len, d_max, D_sum, N_min, N_median, N_max, norm_N_inf, norm_N_2,
    lambda_min_signless_unit, lambda_min_signless_weighted, eig_method, kappa, K, mu_hat, lip_hat,
    cond_hat, error_bound_hat.

    κ, K = 5th/95th percentile of |ŝ| over the component's fitted workers; μ̂ = κ² λ_min^unit
    N_min; lip̂ = 2 √W_K ||N||_2 K²; cond̂ = lip̂/μ̂; error_bound_hat = K √W_K ||N||_∞ / μ̂ ·
    log(D/δ)/√N_min with D = D_sum (the number of observed entries; the paper leaves D
    unspecified; docs/methods/skills.md §3.4) and δ = 0.05.

    Cost. Everything except the eigenvalues is O(|labels| + |E|) and vectorised. Eigenvalues
    (``spectral=True``), per component: bipartite components get λ_min = 0 exactly (no solve;
    x = ±1 on the two colour classes is a null vector of L_s); otherwise dense LAPACK ``eigvalsh``
    for components of at most ``dense_max`` workers, else verified LOBPCG with a dense or Lanczos fallback
    (:func:`crowdflow.skills.spectra.signless_lambda_min`; column ``eig_method``). A component with more
    than ``spectral_max_nnz`` stored entries of N is skipped (NaN, ``eig_method = "skipped"``): Lanczos needs
    some hundred mat-vecs there (≈ 0.5 s per eigenvalue at 3.6·10^6 entries); pass ``spectral_max_nnz=None``
    to compute them anyway.

    Parameters
    ----------
    witnesses : dict, optional
        Precomputed odd-cycle witnesses (component → cycle), e.g. from :func:`graph_structure`.
    per_component : (numpy.ndarray, numpy.ndarray), optional
        Labels and tasks per component (:func:`labels_and_tasks_per_component`) summed elsewhere (over the
        partitions of a partitioned run); then ``lm`` may be None.
    """
    n_mat = sp.csr_matrix(co_labels)  # counts as stored (int32 from the moments): no float64 copy of N
    w_mat = sp.csr_matrix(weights, dtype=np.float64)
    g_lab = graph.labels
    nc = graph.n_components
    deg = np.diff(n_mat.indptr)
    rowsum = np.asarray(n_mat.sum(axis=1, dtype=np.float64)).ravel()
    n_edges = np.bincount(g_lab, weights=deg, minlength=nc) / 2
    n_lab, n_tasks = _per_component_counts(lm, per_component, g_lab, nc, "component_diagnostics")
    d_max = np.zeros(nc, dtype=np.int64)
    np.maximum.at(d_max, g_lab, deg)
    norm_inf = np.zeros(nc)
    np.maximum.at(norm_inf, g_lab, rowsum)
    rows = np.repeat(np.arange(n_mat.shape[0], dtype=np.int32), deg)
    upper = rows < n_mat.indices
    rows = rows[upper]
    n_min, n_med, n_max = _group_stats(g_lab[rows], n_mat.data[upper].astype(np.float64), nc)
    del rows, upper

    comp_status = np.where(graph.bipartite, "bipartite_component", "ok").astype(object)
    comp_status[graph.sizes == 1] = "isolated"
    if worker_status is None:
        n_ok = np.where(comp_status == "ok", graph.sizes, 0)
    else:
        n_ok = np.bincount(g_lab, weights=(np.asarray(worker_status) == "ok"), minlength=nc)

    wit_len = np.zeros(nc, dtype=np.int64)
    if witness:
        cycles = witnesses if witnesses is not None else odd_cycle_witnesses(n_mat)
        for c, cyc in cycles.items():
            wit_len[c] = cyc.size

    lam_u = np.zeros(nc)
    lam_w = np.zeros(nc)
    norm2 = np.zeros(nc)
    method = np.array(["none"] * nc, dtype=object)
    if spectral:
        nnz_comp = np.bincount(g_lab, weights=deg, minlength=nc)
        todo = np.flatnonzero((graph.sizes >= 2) & ~graph.bipartite)
        method[graph.sizes >= 2] = "exact"  # bipartite: λ_min = 0 exactly
        if spectral_max_nnz is not None:
            skip = todo[nnz_comp[todo] > spectral_max_nnz]
            method[skip] = "skipped"
            lam_u[skip] = lam_w[skip] = norm2[skip] = np.nan
            todo = todo[nnz_comp[todo] <= spectral_max_nnz]
        bip2 = np.flatnonzero((graph.sizes >= 2) & graph.bipartite)
        if todo.size or bip2.size:
            order = np.argsort(g_lab, kind="stable")
            starts = np.concatenate([[0], np.cumsum(graph.sizes)])
            whole = nc == 1
            pn = n_mat if whole else n_mat[order][:, order]
            pw = w_mat if whole else w_mat[order][:, order]
            for c in bip2:  # type: ignore[assignment]  # numpy ints, indices like c above; ||N||_2 still needs a solve; λ_min = 0
                s, e = starts[c], starts[c + 1]
                norm2[c] = top_eigenvalue(sp.csr_matrix(pn[s:e, s:e], dtype=np.float64), dense_max)
            for c in todo:  # type: ignore[assignment]  # numpy ints, indices like c above
                s, e = starts[c], starts[c + 1]
                sub_n = pn if whole else pn[s:e, s:e]
                sub_w = pw if whole else pw[s:e, s:e]
                unit = sp.csr_matrix((np.ones(sub_n.nnz), sub_n.indices, sub_n.indptr), shape=sub_n.shape)
                lam_u[c], method[c], vec = signless_min_pair(unit, dense_max)
                lam_w[c], _, _ = signless_min_pair(sub_w, dense_max, start=vec)
                norm2[c] = top_eigenvalue(sp.csr_matrix(sub_n, dtype=np.float64), dense_max)
    else:
        lam_u[:] = np.nan
        lam_w[:] = np.nan
        norm2[:] = np.nan

    kappa = np.full(nc, np.nan)
    big_k = np.full(nc, np.nan)
    if skills is not None:
        s_abs = np.abs(np.asarray(skills, dtype=np.float64))
        fin = np.isfinite(s_abs)
        if fin.any():
            kappa = _group_quantile(g_lab[fin], s_abs[fin], nc, 0.05)
            big_k = _group_quantile(g_lab[fin], s_abs[fin], nc, 0.95)
    sizes = graph.sizes.astype(np.float64)
    d_sum = 2 * n_edges
    with np.errstate(divide="ignore", invalid="ignore"):
        mu = kappa**2 * lam_u * n_min
        lip = 2 * np.sqrt(sizes) * norm2 * big_k**2
        cond = lip / mu
        dev = np.log(d_sum / delta) / np.sqrt(n_min)
        bound = big_k * np.sqrt(sizes) * norm_inf / mu * dev
    bad = ~(mu > 0)
    cond[bad] = np.nan
    bound[bad] = np.nan
    return pd.DataFrame(
        {
            "component": np.arange(nc, dtype=np.int64),
            "status": comp_status.astype(str),
            "n_workers": graph.sizes.astype(np.int64),
            "n_ok_workers": np.asarray(n_ok).astype(np.int64),
            "n_edges": n_edges.astype(np.int64),
            "n_tasks": n_tasks.astype(np.int64),
            "n_labels": n_lab.astype(np.int64),
            "bipartite": graph.bipartite.astype(bool),
            "odd_cycle_witness_len": wit_len,
            "d_max": d_max,
            "D_sum": d_sum.astype(np.int64),
            "N_min": n_min,
            "N_median": n_med,
            "N_max": n_max,
            "norm_N_inf": norm_inf,
            "norm_N_2": norm2,
            "lambda_min_signless_unit": lam_u,
            "lambda_min_signless_weighted": lam_w,
            "eig_method": method.astype(str),
            "kappa": kappa,
            "K": big_k,
            "mu_hat": mu,
            "lip_hat": lip,
            "cond_hat": cond,
            "error_bound_hat": bound,
        }
    )


def component_diagnostics_pairless(
    lm: LabelMatrix | None,
    graph: Components,
    n_partners: np.ndarray,
    strength: np.ndarray,
    skills: np.ndarray | None = None,
    worker_status: np.ndarray | None = None,
    *,
    per_component: tuple[np.ndarray, np.ndarray] | None = None,
) -> pd.DataFrame:
    """:func:`component_diagnostics` without N: the columns that are row statistics of N, the rest missing.

    docs/scale.md (memory laws). From each worker's distinct partners (the row length of N) and strength (its row
    sum): ``n_edges`` = Σ n_partners / 2, ``d_max``, ``D_sum`` = 2·n_edges, ``norm_N_inf`` = max strength, exactly
    as from N; ``n_partners`` NaN (a partitioned run) leaves the first three NaN. The per-pair statistics
    (``N_min``, ``N_median``, ``N_max``), the odd-cycle witness (a BFS over the pairs) and the spectra are NaN,
    ``eig_method`` = ``"none"``; :func:`crowdflow.skills.reasons.explain_missing_skills` gives their reason.
    Same columns and dtypes as :func:`component_diagnostics` but those, which are float here.
    """
    g_lab = graph.labels
    nc = graph.n_components
    partners = np.asarray(n_partners, dtype=np.float64)
    known = bool(np.all(np.isfinite(partners)))
    n_lab, n_tasks = _per_component_counts(lm, per_component, g_lab, nc, "component_diagnostics_pairless")
    nan = np.full(nc, np.nan)
    if known:
        n_edges: np.ndarray = (np.bincount(g_lab, weights=partners, minlength=nc) / 2).astype(np.int64)
        d_max: np.ndarray = np.zeros(nc, dtype=np.int64)
        np.maximum.at(d_max, g_lab, partners.astype(np.int64))
        d_sum: np.ndarray = 2 * n_edges
    else:
        n_edges, d_max, d_sum = nan.copy(), nan.copy(), nan.copy()
    norm_inf = np.zeros(nc)
    np.maximum.at(norm_inf, g_lab, np.asarray(strength, dtype=np.float64))
    comp_status = np.where(graph.bipartite, "bipartite_component", "ok").astype(object)
    comp_status[graph.sizes == 1] = "isolated"
    if worker_status is None:
        n_ok = np.where(comp_status == "ok", graph.sizes, 0)
    else:
        n_ok = np.bincount(g_lab, weights=(np.asarray(worker_status) == "ok"), minlength=nc)
    kappa, big_k = nan.copy(), nan.copy()
    if skills is not None:
        s_abs = np.abs(np.asarray(skills, dtype=np.float64))
        fin = np.isfinite(s_abs)
        if fin.any():
            kappa = _group_quantile(g_lab[fin], s_abs[fin], nc, 0.05)
            big_k = _group_quantile(g_lab[fin], s_abs[fin], nc, 0.95)
    return pd.DataFrame(
        {
            "component": np.arange(nc, dtype=np.int64),
            "status": comp_status.astype(str),
            "n_workers": graph.sizes.astype(np.int64),
            "n_ok_workers": np.asarray(n_ok).astype(np.int64),
            "n_edges": n_edges,
            "n_tasks": n_tasks.astype(np.int64),
            "n_labels": n_lab.astype(np.int64),
            "bipartite": graph.bipartite.astype(bool),
            "odd_cycle_witness_len": nan.copy(),
            "d_max": d_max,
            "D_sum": d_sum,
            "N_min": nan.copy(),
            "N_median": nan.copy(),
            "N_max": nan.copy(),
            "norm_N_inf": norm_inf,
            "norm_N_2": nan.copy(),
            "lambda_min_signless_unit": nan.copy(),
            "lambda_min_signless_weighted": nan.copy(),
            "eig_method": np.array(["none"] * nc, dtype=object).astype(str),
            "kappa": kappa,
            "K": big_k,
            "mu_hat": nan.copy(),
            "lip_hat": nan.copy(),
            "cond_hat": nan.copy(),
            "error_bound_hat": nan.copy(),
        }
    )


def active_workers(
    graph: Components, base: np.ndarray, w_all: sp.csr_matrix, n_i: np.ndarray, m: int, tau: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, Components, list[tuple[Components, np.ndarray]]]:
    """Statuses and the active set (docs/methods/skills.md §2.8): too_few_labels dropped until the graph is stable."""
    status = base[graph.labels].copy()
    lo, hi = skill_box(n_i, m, tau)
    too_few = hi <= 0.0
    status[(status == "ok") & too_few] = "too_few_labels"
    active = status == "ok"
    # docs/methods/skills.md §2.8: drop inactive workers, recompute components and bipartiteness until stable. Without
    # too_few_labels drops the active graph is the union of the ok components: already stable.
    ag = graph
    drops: list[tuple[Components, np.ndarray]] = []  # (graph of the pass, workers lost in it)
    if np.any((base[graph.labels] == "ok") & too_few):
        while True:
            # D w D with D = diag(active), by one mask over the stored entries (no W×W product): symmetric, zero
            # diagonal, sorted, so its components need no symmetrisation
            (sub,) = restrict_to(active, w_all, renumber=False)
            ag = graph_structure(sub, symmetric=True).graph
            still = active & ~ag.bipartite[ag.labels]
            if np.array_equal(still, active):
                break
            lost = active & ~still
            drops.append((ag, lost))
            status[lost & (ag.sizes[ag.labels] == 1)] = "isolated"
            status[lost & (ag.sizes[ag.labels] > 1)] = "bipartite_component"
            active = still
    return status, active, lo, hi, ag, drops
