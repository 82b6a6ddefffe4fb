"""The fit result and the certified error bound (docs/methods/personal_models.md §1.3, §2.6).

Every solver returns a :class:`PersonalModelsResult` built by :func:`make_result`. Its error bound is
the certificate of docs/methods/personal_models.md §2.6: J is ``m_min = min_i m_i`` strongly convex, so for any
models Θ̂ the KKT residual bounds the distance to the optimum, ``‖Θ̂ − Θ*‖₂ ≤ ‖r(Θ̂)‖₂ / m_min``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pandas as pd

from crowdflow.contracts.missing import explain_missing
from crowdflow.personal_models.problem import PersonalProblem


@dataclass(frozen=True)
class PersonalModelsResult:
    """Fitted personal models and convergence diagnostics.

    Attributes
    ----------
    personal_models : pandas.DataFrame
        ``agent``, one ``theta_<param>`` column per parameter (``theta`` for Huber), ``residual``
        (‖r_i‖, the agent's KKT residual), ``component``, ``n_samples``.
    diagnostics : pandas.DataFrame
        Convergence trace: ``round`` (or Newton iteration), ``kkt_norm`` (‖r‖₂), ``error_bound``
        (certified ‖Θ̂ − Θ*‖₂ ≤ ‖r‖₂/m_min), ``rel_error_bound`` (error_bound/max(1, ‖Θ̂‖₂)) and, when a
        reference is known, ``mean_rel_err``, ``max_rel_err``, ``V`` (the largest copy error,
        docs/methods/personal_models.md §3.1).
    theta : numpy.ndarray
        (n, p) models, rows in ``agents`` order.
    agents : numpy.ndarray
    param_names : tuple of str
    method : str
    iterations : int
        Rounds (edge activations) for DJAM / CL-ADMM; Newton iterations for ``centralized``.
    converged : bool
    kkt_norm : float
    error_bound : float
        Certified bound on ‖Θ̂ − Θ*‖₂ (docs/methods/personal_models.md §2.6, step 2).
    beta : float
        Epoch contraction bound (docs/methods/personal_models.md §3.1).
    metadata : dict
        n, n_edges, p, loss, sampling, init, tol, seed, wall time, ... (JSON-friendly scalars).
    copies : numpy.ndarray, optional
        DJAM only: the final copies ``C_i[k]`` (2|E|, p), arcs in ``problem.graph`` order.
    """

    personal_models: pd.DataFrame
    diagnostics: pd.DataFrame
    theta: np.ndarray
    agents: np.ndarray
    param_names: tuple[str, ...]
    method: str
    iterations: int
    converged: bool
    kkt_norm: float
    error_bound: float
    beta: float
    metadata: dict[str, Any] = field(default_factory=dict)
    copies: np.ndarray | None = None


def _column_names(problem: PersonalProblem) -> list[str]:
    if problem.loss == "huber":
        return ["theta"]
    return [f"theta_{nm}" for nm in problem.param_names]


def certificate(
    problem: PersonalProblem, theta: np.ndarray, grad: np.ndarray | None = None
) -> tuple[float, float, np.ndarray]:
    """Certified error bound (docs/methods/personal_models.md §2.6): ``‖Θ̂ − Θ*‖₂ ≤ ‖r‖₂ / m_min``.

    J is ``m_min = min_i m_i`` strongly convex (the Laplacian term is PSD), so for any Θ̂ the KKT
    residual ``r = ∇J(Θ̂)`` bounds the distance to the unique minimiser.

    Returns
    -------
    kkt_norm, error_bound : float
    residual : numpy.ndarray
        (n, p) per-agent KKT residuals.
    """
    r = problem.kkt(theta, grad)
    kn = float(np.linalg.norm(r))
    return kn, kn / float(np.min(problem.m)), r


def rel_errors(theta: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Per-agent ‖θ̂_i − θ_i*‖/‖θ_i*‖ (absolute error where θ_i* = 0), for theta (..., n, p)."""
    den = np.linalg.norm(reference, axis=-1)
    den = np.where(den > 0, den, 1.0)
    return cast(np.ndarray, np.linalg.norm(theta - reference, axis=-1) / den)


def make_result(
    problem: PersonalProblem,
    theta: np.ndarray,
    method: str,
    iterations: int,
    converged: bool,
    trace: list[dict[str, Any]],
    metadata: dict[str, Any],
    copies: np.ndarray | None = None,
    grad: np.ndarray | None = None,
) -> PersonalModelsResult:
    kn, bound, r = certificate(problem, theta, grad)
    cols = _column_names(problem)
    pm = pd.DataFrame({"agent": problem.agents.astype(str)})
    for k, c in enumerate(cols):
        pm[c] = theta[:, k]
    pm["residual"] = np.linalg.norm(r, axis=1)
    pm["component"] = problem.component.astype(np.int64)
    pm["n_samples"] = problem.n_samples
    diag_cols = ["round", "kkt_norm", "error_bound", "rel_error_bound", "mean_rel_err", "max_rel_err", "V"]
    diag = pd.DataFrame(trace, columns=diag_cols) if trace else pd.DataFrame(columns=diag_cols)
    diag = diag.astype(dict.fromkeys(diag_cols[1:], float))
    explain_missing(
        diag, ["V"], "no neighbour copies (V is the largest copy error of DJAM)", where=diag["mean_rel_err"].notna()
    )
    explain_missing(
        diag,
        ["mean_rel_err", "max_rel_err", "V"],
        "no reference optimum to compare with (errors are measured against a centralized solve when one is given)",
    )
    meta = {
        "n": problem.n,
        "n_edges": problem.graph.n_edges,
        "p": problem.p,
        "loss": problem.loss,
        "beta": problem.beta,
        "m_min": float(np.min(problem.m)),
        "n_components": int(problem.component.max(initial=-1) + 1),
    }
    meta.update(metadata)
    return PersonalModelsResult(
        personal_models=pm,
        diagnostics=diag.astype({"round": np.int64}),
        theta=theta,
        agents=problem.agents,
        param_names=problem.param_names,
        method=method,
        iterations=int(iterations),
        converged=bool(converged),
        kkt_norm=kn,
        error_bound=bound,
        beta=problem.beta,
        metadata=meta,
        copies=copies,
    )


def trace_row(
    problem: PersonalProblem,
    t: int,
    theta: np.ndarray,
    copies: np.ndarray | None,
    reference: np.ndarray | None,
    grad: np.ndarray | None = None,
) -> dict[str, Any]:
    kn, bound, _ = certificate(problem, theta, grad)
    row: dict[str, Any] = {
        "round": int(t),
        "kkt_norm": kn,
        "error_bound": bound,
        "rel_error_bound": bound / max(1.0, float(np.linalg.norm(theta))),
        "mean_rel_err": np.nan,
        "max_rel_err": np.nan,
        "V": np.nan,
    }
    if reference is not None:
        rel = rel_errors(theta, reference)
        row["mean_rel_err"] = float(rel.mean())
        row["max_rel_err"] = float(rel.max())
        if copies is not None and copies.shape[0]:
            row["V"] = float(np.max(np.linalg.norm(copies - reference[problem.graph.nbr], axis=1)))
        elif copies is not None:
            row["V"] = 0.0
    return row
