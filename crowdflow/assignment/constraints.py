"""The TVCS constraint structure: elements, two partition views, their caps and a global cap.

Elements ``i ∈ [p]`` belong to at most one view-1 group (e.g. a worker) and at most one view-2
group (e.g. a task); groups of one view are disjoint by construction (one key per element). Every
group ``g`` has an integer cap ``s_g`` and the total has ``s_total``. A selection ``x ∈ {0,1}^p``
is feasible when ``A x ≤ s``, with ``A`` the 0/1 matrix of one row for the total, one per view-1
group and one per view-2 group (:meth:`TVCSConstraints.matrix`).

:class:`TVCSConstraints` validates and normalises the structure (caps floored and clipped to the
group size; ``None``/``inf`` = unlimited) and evaluates the weak-duality upper bound
``UB(a, b, λ) = s_total·λ + Σ_g s_g a_g + Σ_h s_h b_h + Σ_i [u_i − a_{g(i)} − b_{h(i)} − λ]₊``
that certifies every selection (:meth:`TVCSConstraints.dual_bound`).

See docs/methods/assignment.md §1.1 (structure) and §2.2 (the certificate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import scipy.sparse as sp


def _as_view(view: Any, p: int, name: str) -> tuple[np.ndarray, int]:
    """Validate a view membership vector: int group index per element, negative = no group."""
    if view is None:
        return np.full(p, -1, dtype=np.int64), 0
    arr = np.asarray(view)
    if arr.ndim != 1 or arr.shape[0] != p:
        raise ValueError(f"{name} must be a 1-D array of length p={p}, got shape {arr.shape}")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.floor(arr)):
            raise ValueError(f"{name} must hold integer group indices (negative = no group)")
    elif arr.dtype.kind not in "iub":
        raise ValueError(f"{name} must hold integer group indices, got dtype {arr.dtype}")
    idx = arr.astype(np.int64)
    idx[idx < 0] = -1
    n = int(idx.max()) + 1 if p and idx.max() >= 0 else 0
    return idx, n


def _as_caps(caps: Any, n: int, sizes: np.ndarray, name: str) -> np.ndarray:
    """Caps per group as int64; ``None``/``inf`` = unlimited (the group size). Floors reals."""
    if caps is None:
        return sizes.astype(np.int64).copy()
    arr = np.asarray(caps, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    if arr.ndim != 1 or arr.shape[0] < n:
        raise ValueError(f"{name} must be a scalar or have one entry per group ({n}), got shape {arr.shape}")
    arr = arr[:n]
    if np.any(np.isnan(arr)):
        raise ValueError(f"{name} contains NaN at groups {np.flatnonzero(np.isnan(arr))[:10].tolist()}")
    if np.any(arr < 0):
        raise ValueError(f"{name} must be >= 0; negative at groups {np.flatnonzero(arr < 0)[:10].tolist()}")
    out = np.where(np.isinf(arr), sizes, np.minimum(np.floor(arr), sizes))  # floor: docs/methods/assignment.md §2.1
    return out.astype(np.int64)


@dataclass(frozen=True)
class TVCSConstraints:
    """A validated TVCS structure (docs/methods/assignment.md §1.1).

    Attributes
    ----------
    view1, view2 : ndarray of int64, shape (p,)
        Group index of each element in view 1 / view 2, ``-1`` when the element has no group.
        Groups of one view are disjoint by construction (one key per element).
    caps1, caps2 : ndarray of int64
        Cap per group (already floored and clipped to the group size; unlimited = group size).
    total : int
        Global cap ``s_total`` (clipped to ``p``).
    """

    view1: np.ndarray
    view2: np.ndarray
    caps1: np.ndarray
    caps2: np.ndarray
    total: int

    @classmethod
    def build(
        cls,
        p: int,
        view1: Any = None,
        view2: Any = None,
        caps1: Any = None,
        caps2: Any = None,
        total: float | None = None,
    ) -> TVCSConstraints:
        """Validate and normalise a TVCS structure.

        Parameters
        ----------
        p : int
            Number of elements.
        view1, view2 : array-like of int or None
            Group index per element (negative = no group); ``None`` = the view is absent.
        caps1, caps2 : scalar, array-like or None
            Per-group caps (scalar broadcasts). ``None`` or ``inf`` = unlimited. Reals are floored
            (flooring does not change the integer feasible set, docs/methods/assignment.md §2.1); negative or NaN caps
            raise ``ValueError``.
        total : float or None
            Global cap; ``None``/``inf`` = unlimited (``p``). Floored; negative raises.
        """
        p = int(p)
        if p < 0:
            raise ValueError("p must be >= 0")
        v1, n1 = _as_view(view1, p, "view1")
        v2, n2 = _as_view(view2, p, "view2")
        size1 = np.bincount(v1[v1 >= 0], minlength=n1)
        size2 = np.bincount(v2[v2 >= 0], minlength=n2)
        c1 = _as_caps(caps1, n1, size1, "caps1")
        c2 = _as_caps(caps2, n2, size2, "caps2")
        if total is None or (isinstance(total, float) and math.isinf(total) and total > 0):
            tot = p
        else:
            t = float(total)
            if math.isnan(t) or t < 0:
                raise ValueError(f"total must be >= 0 (or None for unlimited), got {total!r}")
            tot = int(min(math.floor(t), p))
        for a in (v1, v2, c1, c2):
            a.setflags(write=False)
        return cls(view1=v1, view2=v2, caps1=c1, caps2=c2, total=tot)

    @property
    def p(self) -> int:
        return int(self.view1.shape[0])

    @property
    def n1(self) -> int:
        return int(self.caps1.shape[0])

    @property
    def n2(self) -> int:
        return int(self.caps2.shape[0])

    def scaled(self, factor: int) -> TVCSConstraints:
        """Every cap (total included) times ``factor``: ``P_{2s}`` of GradMP (docs/methods/assignment.md §4.2)."""
        return TVCSConstraints.build(
            self.p, self.view1, self.view2, self.caps1 * factor, self.caps2 * factor, self.total * factor
        )

    def matrix(self) -> tuple[sp.csr_matrix, np.ndarray]:
        """Constraint matrix ``A`` (rows: total, view-1 groups, view-2 groups) and caps ``s``.

        See docs/methods/assignment.md §1.2.
        """
        p = self.p
        cols = [np.arange(p)]
        rows = [np.zeros(p, dtype=np.int64)]
        m1 = self.view1 >= 0
        cols.append(np.flatnonzero(m1))
        rows.append(1 + self.view1[m1])
        m2 = self.view2 >= 0
        cols.append(np.flatnonzero(m2))
        rows.append(1 + self.n1 + self.view2[m2])
        r = np.concatenate(rows)
        c = np.concatenate(cols)
        A = sp.csr_matrix((np.ones(r.shape[0]), (r, c)), shape=(1 + self.n1 + self.n2, p))
        s = np.concatenate([[self.total], self.caps1, self.caps2]).astype(np.float64)
        return A, s

    def counts(self, x: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
        """Total, per-view-1-group and per-view-2-group counts of a selection ``x``."""
        xb = np.asarray(x).astype(np.float64)
        c1 = np.bincount(self.view1[self.view1 >= 0], weights=xb[self.view1 >= 0], minlength=self.n1)
        c2 = np.bincount(self.view2[self.view2 >= 0], weights=xb[self.view2 >= 0], minlength=self.n2)
        return round(float(xb.sum())), c1, c2

    def is_feasible(self, x: np.ndarray) -> bool:
        """``x`` binary and ``A x ≤ s``."""
        x = np.asarray(x)
        if x.shape != (self.p,) or not np.all((x == 0) | (x == 1)):
            return False
        tot, c1, c2 = self.counts(x)
        return bool(tot <= self.total and np.all(c1 <= self.caps1) and np.all(c2 <= self.caps2))

    def fill_bound(self, idx: np.ndarray) -> int:
        """Upper bound on ``|x|`` over selections inside the elements ``idx``:
        ``min(s_total, Σ_g min(|idx ∩ g|, s_g) + |idx without view-1 group|, same for view 2)``."""
        bound = self.total
        for view, caps in ((self.view1, self.caps1), (self.view2, self.caps2)):
            g = view[idx]
            grouped = g >= 0
            cnt = np.bincount(g[grouped], minlength=caps.shape[0])
            bound = min(bound, int(np.minimum(cnt, caps).sum()) + int(idx.shape[0] - grouped.sum()))
        return bound

    def reduced_gain(self, u: np.ndarray, a: np.ndarray, b: np.ndarray, lam: float) -> np.ndarray:
        """``u_i − a_{g(i)} − b_{h(i)} − λ`` per element (a missing group contributes 0)."""
        red = np.asarray(u, dtype=np.float64) - lam
        if self.n1:
            red = red - np.where(self.view1 >= 0, a[np.maximum(self.view1, 0)], 0.0)
        if self.n2:
            red = red - np.where(self.view2 >= 0, b[np.maximum(self.view2, 0)], 0.0)
        return cast(np.ndarray, red)

    def dual_bound(self, u: np.ndarray, a: np.ndarray, b: np.ndarray, lam: float) -> float:
        """Weak-duality upper bound on OPT (docs/methods/assignment.md §2.2) for any duals ``a, b, λ`` (clipped at 0).

        ``UB = s_total·λ + Σ_g s_g a_g + Σ_h s_h b_h + Σ_i [u_i − a_{g(i)} − b_{h(i)} − λ]₊``, where
        the bracket is the optimal ``y_B`` for these group duals.
        """
        a = np.maximum(np.asarray(a, dtype=np.float64), 0.0)
        b = np.maximum(np.asarray(b, dtype=np.float64), 0.0)
        lam = max(float(lam), 0.0)
        red = self.reduced_gain(u, a, b, lam)
        # caps clipped at s_total: Σ_{i∈g} x_i ≤ s_total is implied by the total row (same LP)
        c1 = np.minimum(self.caps1, self.total)
        c2 = np.minimum(self.caps2, self.total)
        return float(self.total * lam + c1 @ a + c2 @ b + np.maximum(red, 0.0).sum())
