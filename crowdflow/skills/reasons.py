"""Why a number of the skills tables is undefined (the rule of crowdflow/contracts/missing.py, for this package)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from crowdflow.contracts.missing import explain_missing

__all__ = ["explain_missing_components", "explain_missing_skills", "explain_missing_workers"]

_STATUS_REASON = {
    "isolated": "isolated worker (shares no task with another worker)",
    "bipartite_component": "worker in a bipartite component (rank-one skills not identifiable)",
    "too_few_labels": "too few labels for a skill (empty feasibility box)",
}
_SPECTRAL = ("norm_N_2", "lambda_min_signless_unit", "lambda_min_signless_weighted")
_PGD_DIAGNOSTICS = ("kappa", "K", "mu_hat", "lip_hat", "cond_hat", "error_bound_hat")
#: what a pair-free fit leaves out (docs/scale.md, memory laws): statistics of individual worker pairs
_PER_PAIR = ("N_min", "N_median", "N_max", "odd_cycle_witness_len")
_PAIRS_WHY = (
    "a statistic of individual worker pairs (the co-label matrix N), built for method pgd or when spectral, "
    "min_pair_count or prune_spammers ask for it, never by this pair-free fit (docs/scale.md, memory laws)"
)
#: what a partitioned fit without pairs cannot sum over its task buckets
_PARTNERS = ("n_partners", "n_edges", "d_max", "D_sum")
_PARTNERS_WHY = (
    "distinct co-labellers are not a sum over task buckets or input files, and this fit (partitioned on Dask, or "
    "folded from per-file sums) forms no worker pair (docs/scale.md, memory laws)"
)
#: table → the columns a partitioned fit without pairs leaves missing (with :data:`_PARTNERS_WHY` as their reason),
#: where an inline fit of the same labels has them: what a comparison of the two runs leaves out
PARTITIONED_MISSING: dict[str, tuple[str, ...]] = {"skills": ("n_partners",), "components": _PARTNERS[1:]}


def explain_missing_skills(table: pd.DataFrame, diag: pd.DataFrame | None, method: str, pairs: bool = True) -> None:
    """Give every undefined number of the skills and components tables its reason (crowdflow/contracts/missing.py).

    A worker whose status is not ``ok`` has no rank-one skill under pgd (docs/methods/skills.md §3.3); the
    feasibility box ``lower``/``upper`` (§2.3) and the convergence diagnostics of a component (§3.4) are
    computed by pgd only; a component that is not ``ok`` has no diagnostics. ``pairs`` False: the fit formed no
    worker pair, so the per-pair statistics (and, partitioned, the distinct co-labellers) are missing.
    The two tables' rules are :func:`explain_missing_workers` and :func:`explain_missing_components` (a partitioned
    run applies the first where a Dask worker builds the skills table, :mod:`crowdflow.storage.held_tables`).
    """
    explain_missing_workers(table, method, pairs)
    if diag is not None:
        explain_missing_components(diag, method, pairs)


def explain_missing_workers(table: pd.DataFrame, method: str, pairs: bool = True) -> None:
    """The skills table's part of :func:`explain_missing_skills` (one row per worker)."""
    if not pairs:
        explain_missing(table, ["n_partners"], _PARTNERS_WHY)
    status = table["status"]  # compared as it is held (Arrow text), never as a Python string a worker
    for st, why in _STATUS_REASON.items():
        is_st = (status == st).to_numpy(dtype=bool)
        explain_missing(table, [c for c in table.columns if c not in ("lower", "upper")], why, where=is_st)
    if method == "ds":
        explain_missing(table, ["vote_weight"], "full Dawid-Skene votes with the confusion matrix (no scalar weight)")
    if method == "ebcc":
        explain_missing(
            table, ["vote_weight"], "EBCC votes with its per-subtype answer distributions (no scalar weight)"
        )
    if method != "pgd":
        explain_missing(table, ["lower", "upper"], f"the feasibility box is computed by method pgd only, not {method}")
    else:
        explain_missing(
            table, ["lower", "upper"], "no feasibility box for this worker", where=(status != "ok").to_numpy(dtype=bool)
        )


def explain_missing_components(diag: pd.DataFrame, method: str, pairs: bool = True) -> None:
    """The components table's part of :func:`explain_missing_skills` (one row per component)."""
    if not pairs:
        explain_missing(diag, _PER_PAIR, _PAIRS_WHY)
        explain_missing(diag, _PARTNERS, _PARTNERS_WHY)
    if method != "pgd":
        explain_missing(diag, _PGD_DIAGNOSTICS, f"PGD convergence diagnostics (method pgd only, not {method})")
    if "eig_method" in diag.columns:
        explain_missing(
            diag,
            [*_SPECTRAL, "mu_hat", "lip_hat", "cond_hat", "error_bound_hat"],
            "spectral diagnostics not asked for (on by default for method pgd only, on with spectral true)",
            where=diag["eig_method"].to_numpy(dtype=object) == "none",
        )
        explain_missing(
            diag,
            [*_SPECTRAL, *_PGD_DIAGNOSTICS],
            "spectral diagnostics skipped (the component stores more co-label counts than spectral_max_nnz)",
            where=diag["eig_method"].to_numpy(dtype=object) == "skipped",
        )
    if "status" in diag.columns:
        cstatus = diag["status"].to_numpy(dtype=object)
        for st in np.unique(cstatus[cstatus != "ok"]):
            explain_missing(diag, list(diag.columns), f"the component is {st} (no diagnostics)", where=cstatus == st)
