"""Cross-validation on random projections of the cycle space: the HLASSO λ and the LBI stopping time.

Leave-rows-out CV cannot work here (every row owns its γ). Instead the l rows of ``Ψ = QᵀW^{1/2}``, with
``Q`` an orthonormal basis of the W-weighted cycle space (:func:`cycle_basis`, dense, small m only), are
l projected measurements that each involve every γ; they are split into K folds. :func:`cv_lambda` fits
the LASSO on the training rows along the λ grid and scores ``‖Ψ_val(y − γ̂)‖²``; :func:`cv_stop_time`
does the same for the LBI time t. The chosen value is mapped to the full problem by ``s = √(l_tr/l)``
(or ``l_tr/l`` with ``rescale='linear'``).

See docs/methods/ranking.md §3.4.7 (λ) and §4.4 (the LBI stopping time).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
import pandas as pd

from crowdflow.errors import DegenerateInput
from crowdflow.ranking.graph import ComparisonGraph
from crowdflow.ranking.hlasso import _fista
from crowdflow.ranking.numerics import shrink

__all__ = ["cv_lambda", "cv_stop_time", "cycle_basis"]


def cycle_basis(g: ComparisonGraph, *, max_rows: int = 4000) -> np.ndarray:
    """Dense orthonormal basis ``Q`` (m×l) of the W-weighted cycle space, small m only (docs/methods/ranking.md §3.4.7).

    ``Q`` spans ``null((W^{1/2}X)ᵀ)``, so ``‖P v‖²_W = ‖Qᵀ W^{1/2} v‖²``; the rows of ``Ψ = QᵀW^{1/2}``
    are the l "projected measurements" (``U2ᵀ`` in the unweighted case).

    Raises
    ------
    DegenerateInput
        If ``m > max_rows`` (a dense m×l basis would be too large); a ``ValueError``.
    """
    from scipy.linalg import null_space

    if g.m > max_rows:
        raise DegenerateInput(
            f"cycle_basis: m = {g.m} rows exceeds max_rows = {max_rows} (dense m×l basis): cross-validation "
            "is for small problems; choose another lambda_rule / stop_rule",
            reason="too_many_rows_for_cv",
        )
    B = (g.X.multiply(np.sqrt(g.w)[:, None])).toarray()
    return null_space(B.T)


def _check_folds(l: int, folds: int) -> None:
    if folds < 2:
        raise ValueError(f"cv needs at least 2 folds, got {folds}")
    if l < folds:
        raise DegenerateInput(
            f"cv needs at least {folds} cycle dimensions (have l = {l}): too few independent checks of the "
            "comparisons for cross-validation; choose another lambda_rule / stop_rule",
            reason="too_few_cycles_for_cv",
        )


def _cv_folds(l: int, folds: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    perm = rng.permutation(l)
    return [np.sort(p) for p in np.array_split(perm, folds)]


def cv_lambda(
    g: ComparisonGraph,
    lambdas: np.ndarray,
    *,
    folds: int = 5,
    seed: int = 0,
    rescale: Literal["sqrt", "linear"] = "sqrt",
    max_rows: int = 4000,
    fold_tol: float = 1e-9,
    fold_max_iter: int = 5000,
) -> tuple[float, pd.DataFrame]:
    """Cross-validation on random projections of the cycle space (docs/methods/ranking.md §3.4.7).

    The l rows of ``Ψ = QᵀW^{1/2}`` (:func:`cycle_basis`) are split into K folds. For each fold the
    LASSO ``½‖Ψ_tr(y − γ)‖² + λ_trΣw_k|γ_k|`` is fitted along the grid ``λ_tr = λ·s`` (warm starts) and
    scored by ``‖Ψ_val(y − γ̂)‖²``. The λ of the grid with the smallest mean validation error is
    returned; it is already expressed at full-problem scale because the training grid was scaled by
    ``s = √(l_tr/l)`` (the default, ``rescale='sqrt'``) or ``s = l_tr/l`` (``'linear'``: the scaling
    of ``λ_max`` itself, since ``E[Ψ_trᵀΨ_tr] = (l_tr/l)ΨᵀΨ``).

    Returns
    -------
    (lambda_star, table)
        ``table`` has columns ``lambda, cv_error, cv_se``.
    """
    Q = cycle_basis(g, max_rows=max_rows)
    l = Q.shape[1]
    _check_folds(l, folds)
    sw = np.sqrt(g.w)
    errs = np.zeros((folds, lambdas.size))
    for f, val in enumerate(_cv_folds(l, folds, seed)):
        tr = np.setdiff1d(np.arange(l), val)
        Qt, Qv = Q[:, tr], Q[:, val]
        s = np.sqrt(tr.size / l) if rescale == "sqrt" else tr.size / l

        def op(v: np.ndarray, aux: Any, Qt: np.ndarray = Qt) -> tuple[np.ndarray, Any]:
            return (Qt @ (Qt.T @ (sw * v))) / sw, aux

        gam = np.zeros(g.m)
        for k, lam in enumerate(lambdas):
            gam, _, _, _, _ = _fista(g.y, g.w, op, lam * s, gam, tol=fold_tol, max_iter=fold_max_iter)
            errs[f, k] = float(np.sum((Qv.T @ (sw * (g.y - gam))) ** 2))
    mean = errs.mean(axis=0)
    se = errs.std(axis=0, ddof=1) / np.sqrt(folds)
    best = int(np.argmin(mean))
    return float(lambdas[best]), pd.DataFrame({"lambda": lambdas, "cv_error": mean, "cv_se": se})


def cv_stop_time(
    g: ComparisonGraph,
    *,
    kappa: float = 100.0,
    dt: float | None = None,
    t_max: float,
    folds: int = 5,
    seed: int = 0,
    rescale: Literal["sqrt", "linear"] = "sqrt",
    n_eval: int = 200,
    max_rows: int = 4000,
) -> tuple[float, pd.DataFrame]:
    """Random-projection cross-validation of the LBI stopping time (docs/methods/ranking.md §4.4, §3.4.7).

    The l rows of ``Ψ = QᵀW^{1/2}`` (dense cycle basis, small m) are split into K folds; on the training
    rows the projected LBI ``z += Δt·W^{-1/2}Q_trQ_trᵀW^{1/2}(y − γ)``, ``γ = κ·shrink(z)`` runs to ``t_max``
    and is scored at ``n_eval`` times by ``‖Ψ_val(y − γ_t)‖²``. The minimising training time is mapped to
    the full problem by ``t = t_tr·s`` with ``s = √(l_tr/l)`` (the default) or ``l_tr/l`` (``'linear'``),
    mirroring ``λ_full = λ_tr/s``.

    Returns
    -------
    (t_star, table)
        ``table``: ``t`` (full-problem scale), ``cv_error``, ``cv_se``.
    """
    dt = 1.0 / kappa if dt is None else float(dt)
    Q = cycle_basis(g, max_rows=max_rows)
    l = Q.shape[1]
    _check_folds(l, folds)
    sw = np.sqrt(g.w)
    K = math.ceil(t_max / dt)
    eval_at = np.unique(np.linspace(0, K, n_eval).round().astype(int))
    errs = np.zeros((folds, eval_at.size))
    scale = []
    for f, val in enumerate(_cv_folds(l, folds, seed)):
        tr = np.setdiff1d(np.arange(l), val)
        Qt, Qv = Q[:, tr], Q[:, val]
        scale.append(np.sqrt(tr.size / l) if rescale == "sqrt" else tr.size / l)
        z = np.zeros(g.m)
        gam = np.zeros(g.m)
        e = 0
        for k in range(K + 1):
            if k == eval_at[e]:
                errs[f, e] = float(np.sum((Qv.T @ (sw * (g.y - gam))) ** 2))
                e += 1
                if e == eval_at.size:
                    break
            z += dt * (Qt @ (Qt.T @ (sw * (g.y - gam)))) / sw
            gam = kappa * shrink(z)
    s = float(np.mean(scale))
    mean = errs.mean(axis=0)
    se = errs.std(axis=0, ddof=1) / np.sqrt(folds)
    best = int(np.argmin(mean))
    t_full = eval_at * dt * s
    return float(t_full[best]), pd.DataFrame({"t": t_full, "cv_error": mean, "cv_se": se})
