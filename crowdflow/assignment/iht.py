"""IHT and GradMP with the TVCS projection (docs/methods/assignment.md §4).

Cardinality-constrained estimation ``min_w f(w) s.t. w ∈ Ω(𝒢, s)`` where ``Ω`` is a
Three-view Cardinality Constrained Set (:mod:`crowdflow.assignment.constraints`). Both solvers call
the exact Euclidean projection ``P_s`` (:class:`~crowdflow.assignment.projector.TVCSProjector`) once
per iteration.

Losses (on a design matrix ``X`` (n × p) and targets ``y``):

- ``"squares"``: ``f(w) = Σ_i (⟨x_i, w⟩ − y_i)²`` (regression, docs/methods/assignment.md §4.4), ``L_f = 2σ_max(X)²``;
- ``"logistic"``: ``f(w) = Σ_i log(1 + exp(−y_i⟨x_i, w⟩))``, ``y ∈ {−1, +1}``, ``L_f = σ_max²/4``;
- ``"squared_hinge"``: ``f(w) = Σ_i max(0, 1 − y_i⟨x_i, w⟩)²`` (classification),
  ``L_f = 2σ_max²``.

The synthetic generator :func:`crowdflow.synth.assignment.synthetic_tvcs` reproduces the paper's
Section 5.1 setup (docs/methods/assignment.md §4.4). See docs/methods/assignment.md §4.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import numpy as np
from scipy.optimize import minimize

from crowdflow.assignment.accuracy import _sigmoid
from crowdflow.assignment.constraints import TVCSConstraints
from crowdflow.assignment.projector import TVCSProjector

log = logging.getLogger(__name__)

LossKind = Literal["squares", "logistic", "squared_hinge"]


@dataclass(frozen=True)
class Loss:
    """A smooth loss ``f(w)`` on data ``(X, y)`` (see module docstring for the formulas)."""

    kind: LossKind
    X: np.ndarray
    y: np.ndarray

    def __post_init__(self) -> None:
        if self.kind not in ("squares", "logistic", "squared_hinge"):
            raise ValueError(f"unknown loss {self.kind!r}")
        if self.X.ndim != 2 or self.y.shape != (self.X.shape[0],):
            raise ValueError(f"X must be (n, p) and y (n,), got {self.X.shape} and {self.y.shape}")
        if not (np.all(np.isfinite(self.X)) and np.all(np.isfinite(self.y))):
            raise ValueError("X and y must be finite")
        if self.kind != "squares" and not np.all(np.isin(self.y, (-1.0, 1.0))):
            raise ValueError("classification labels y must be in {-1, +1}")

    def value_grad(self, w: np.ndarray) -> tuple[float, np.ndarray]:
        """``(f(w), ∇f(w))``."""
        X, y = self.X, self.y
        t = X @ w
        if self.kind == "squares":
            r = t - y
            return float(r @ r), 2.0 * (X.T @ r)
        m = y * t
        if self.kind == "logistic":
            val = float(np.sum(np.logaddexp(0.0, -m)))
            return val, -(X.T @ (y * _sigmoid(-m)))
        h = np.maximum(1.0 - m, 0.0)
        return float(h @ h), -2.0 * (X.T @ (y * h))

    def value(self, w: np.ndarray) -> float:
        return self.value_grad(w)[0]

    def lipschitz(self) -> float:
        """Lipschitz constant of ``∇f`` (``c·σ_max(X)²``)."""
        smax2 = float(np.linalg.norm(self.X, 2) ** 2) if self.X.size else 0.0
        return {"squares": 2.0, "logistic": 0.25, "squared_hinge": 2.0}[self.kind] * smax2

    def minimize_on(self, support: np.ndarray, w0: np.ndarray, maxiter: int = 200) -> np.ndarray:
        """``argmin f(z) s.t. z_i = 0 off ``support`` (the GradMP step of docs/methods/assignment.md §4.2).

        Least squares: ``lstsq`` on the support columns (minimum-norm solution if
        underdetermined). Other losses: L-BFGS-B warm-started at ``w0`` (``maxiter`` cap).
        """
        cols = np.flatnonzero(support)
        z = np.zeros_like(w0)
        if cols.size == 0:
            return z
        Xs = self.X[:, cols]
        if self.kind == "squares":
            z[cols] = np.linalg.lstsq(Xs, self.y, rcond=None)[0]
            return z
        sub = Loss(self.kind, Xs, self.y)
        res = minimize(sub.value_grad, w0[cols], jac=True, method="L-BFGS-B", options={"maxiter": maxiter})
        z[cols] = res.x
        return z


@dataclass(frozen=True)
class SparseFitResult:
    """Result of :func:`iht` / :func:`gradmp`.

    Attributes
    ----------
    w : ndarray (p,)
        Final iterate (feasible for the TVCS caps).
    loss : float
        ``f(w)``.
    iterations : int
    converged : bool
        Whether the stopping rule fired before ``max_iter``.
    trace : ndarray
        ``f(w_t)`` after every iteration.
    method : str
    """

    w: np.ndarray
    loss: float
    iterations: int
    converged: bool
    trace: np.ndarray
    method: str
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def support(self) -> np.ndarray:
        return cast(np.ndarray, self.w != 0)


def _projector(constraints: TVCSConstraints | TVCSProjector, backend: str) -> TVCSProjector:
    if isinstance(constraints, TVCSProjector):
        return constraints
    if isinstance(constraints, TVCSConstraints):
        return TVCSProjector(constraints, backend=backend)
    raise ValueError("constraints must be a TVCSConstraints or a TVCSProjector")


def iht(
    loss: Loss,
    constraints: TVCSConstraints | TVCSProjector,
    *,
    step: float | None = None,
    w0: np.ndarray | None = None,
    max_iter: int = 500,
    tol: float = 1e-6,
    backend: str = "flow",
) -> SparseFitResult:
    """Iterative hard thresholding with the TVCS projection (docs/methods/assignment.md §4.1, paper Algorithm 1).

    ``w ← P_s(w − γ ∇f(w))`` with ``γ = 1/L_f`` by default (then ``f(w_t)`` is non-increasing
    after the first projection, docs/methods/assignment.md §7.4 T12). Stops when
    ``‖w_new − w‖ ≤ tol·max(1, ‖w‖)``, or when the support is unchanged for 5 iterations and the
    relative decrease of ``f`` is below ``tol``; warns (``RuntimeWarning``) at ``max_iter``.
    """
    proj = _projector(constraints, backend)
    p = proj.p
    w = np.zeros(p) if w0 is None else proj.project(np.asarray(w0, dtype=np.float64))
    gamma = (1.0 / loss.lipschitz()) if step is None else float(step)
    if not (gamma > 0 and math.isfinite(gamma)):
        raise ValueError("step size must be positive and finite")
    f_old = loss.value(w)
    trace: list[float] = []
    same_supp = 0
    converged = False
    it = 0
    for it in range(1, max_iter + 1):
        _, g = loss.value_grad(w)
        w_new = proj.project(w - gamma * g)
        f_new = loss.value(w_new)
        trace.append(f_new)
        same_supp = same_supp + 1 if np.array_equal(w_new != 0, w != 0) else 0
        step_norm = float(np.linalg.norm(w_new - w))
        rel_dec = (f_old - f_new) / max(1.0, abs(f_old))
        w_prev_norm = float(np.linalg.norm(w))
        w, f_old = w_new, f_new
        if step_norm <= tol * max(1.0, w_prev_norm) or (same_supp >= 5 and 0 <= rel_dec < tol):
            converged = True
            break
    if not converged:
        warnings.warn(f"IHT did not converge in {max_iter} iterations", RuntimeWarning, stacklevel=2)
    return SparseFitResult(w, f_old, it, converged, np.asarray(trace), "iht", {"step": gamma})


def gradmp(
    loss: Loss,
    constraints: TVCSConstraints | TVCSProjector,
    *,
    w0: np.ndarray | None = None,
    max_iter: int = 100,
    tol: float = 1e-6,
    refit: bool = True,
    backend: str = "flow",
) -> SparseFitResult:
    """Gradient matching pursuit with the TVCS projection (docs/methods/assignment.md §4.2, paper Algorithm 2).

    Each iteration: ``Γ = supp(P_{2s}(∇f(w)))`` (all caps doubled), ``Γ̂ = Γ ∪ supp(w)``,
    ``z = argmin f`` on ``Γ̂`` (:meth:`Loss.minimize_on`), ``w ← P_s(z)``. Stops when the support
    is unchanged and ``‖w_new − w‖ ≤ tol·max(1, ‖w‖)``; warns at ``max_iter``.

    ``refit=True`` [C, our addition] re-minimises ``f`` on ``supp(P_s(z))`` after the projection
    (the usual CoSaMP "debiasing"; same support, so still feasible). Without it the iterate keeps
    moving by the noise level once the support is right (the LS on the larger ``Γ̂`` absorbs
    noise differently each time) and the stopping rule rarely fires; ``refit=False`` is the
    paper's plain step.
    """
    proj = _projector(constraints, backend)
    proj2 = TVCSProjector(proj.cons.scaled(2), backend=proj.backend)
    p = proj.p
    w = np.zeros(p) if w0 is None else proj.project(np.asarray(w0, dtype=np.float64))
    trace: list[float] = []
    converged = False
    it = 0
    f = loss.value(w)
    for it in range(1, max_iter + 1):
        _, g = loss.value_grad(w)
        gamma_set = proj2.select(g * g).x
        cand = gamma_set | (w != 0)
        z = loss.minimize_on(cand, w)
        w_new = proj.project(z)
        if refit:
            w_new = loss.minimize_on(w_new != 0, w_new)
        f = loss.value(w_new)
        trace.append(f)
        same = np.array_equal(w_new != 0, w != 0)
        small = float(np.linalg.norm(w_new - w)) <= tol * max(1.0, float(np.linalg.norm(w)))
        w = w_new
        if same and small:
            converged = True
            break
    if not converged:
        warnings.warn(f"GradMP did not converge in {max_iter} iterations", RuntimeWarning, stacklevel=2)
    return SparseFitResult(w, f, it, converged, np.asarray(trace), "gradmp")


def relax_constraints(cons: TVCSConstraints, keep: tuple[str, ...]) -> TVCSConstraints:
    """Baseline structures of docs/methods/assignment.md §4.3: keep only some of ``"total", "view1", "view2"``.

    ``("total",)`` = overall sparsity (CoSaMP/IHT); ``("total", "view1")`` = row-wise exclusive
    sparsity; ``("total", "view2")`` = column-wise. Dropped caps become unlimited.
    """
    bad = set(keep) - {"total", "view1", "view2"}
    if bad:
        raise ValueError(f"unknown parts {sorted(bad)}")
    return TVCSConstraints.build(
        cons.p,
        cons.view1,
        cons.view2,
        cons.caps1 if "view1" in keep else None,
        cons.caps2 if "view2" in keep else None,
        cons.total if "total" in keep else None,
    )


def selection_recall(w: np.ndarray, w_true: np.ndarray) -> float:
    """``|supp(w) ∩ supp(w̄)| / ‖w̄‖₀`` (docs/methods/assignment.md §4.4)."""
    t = w_true != 0
    return float(np.sum((w != 0) & t) / max(int(t.sum()), 1))


def exact_recovery(w: np.ndarray, w_true: np.ndarray) -> bool:
    """``supp(w) = supp(w̄)``."""
    return bool(np.array_equal(w != 0, w_true != 0))
