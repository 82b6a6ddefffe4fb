"""Property tests of DJAM personal models (issue #9, item 2e).

DJAM on random connected small agent graphs matches the centralized quadratic solution (computed
here as one dense linear solve, independently of the library); a disconnected graph is refused with
the documented message or solved per component when allowed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crowdflow.personal_models import fit_personal_models

FLOATS = st.floats(-5, 5, allow_nan=False)


@st.composite
def agent_problems(draw: st.DrawFn, connected: bool = True) -> tuple[pd.DataFrame, pd.DataFrame, float]:
    n = draw(st.integers(2, 6))
    # a random spanning tree (connected) plus random extra edges
    edges: dict[tuple[int, int], float] = {}
    weight = st.floats(0.05, 5.0, allow_nan=False)
    for k in range(1, n):
        parent = draw(st.integers(0, k - 1))
        edges[(parent, k)] = draw(weight)
    for a, b in draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=6)):
        if a != b and (min(a, b), max(a, b)) not in edges:
            edges[(min(a, b), max(a, b))] = draw(weight)
    if not connected:  # cut the tree edge into the last agent and every edge touching it
        edges = {e: w for e, w in edges.items() if n - 1 not in e}
    rows = []
    for i in range(n):
        for _ in range(draw(st.integers(1, 3))):
            rows.append((f"a{i}", draw(FLOATS)))
    agents = pd.DataFrame(rows, columns=["agent", "y"])
    e = pd.DataFrame([(f"a{a}", f"a{b}", w) for (a, b), w in edges.items()], columns=["source", "target", "weight"])
    reg = draw(st.sampled_from([0.0, 0.1, 1.0]))
    return agents, e, reg


def dense_optimum(agents: pd.DataFrame, edges: pd.DataFrame, reg: float) -> dict[str, float]:
    """argmin Σ_i [Σ_s (θ_i − y_is)²/2 + reg θ_i²/2] + Σ_(i,j) w_ij (θ_i − θ_j)²/2, one dense solve."""
    ids = sorted(agents["agent"].unique())
    pos = {a: k for k, a in enumerate(ids)}
    n = len(ids)
    A = np.zeros((n, n))
    b = np.zeros(n)
    for a, y in zip(agents["agent"], agents["y"], strict=True):
        A[pos[a], pos[a]] += 1.0
        b[pos[a]] += y
    A += reg * np.eye(n)
    for s, t, w in zip(edges["source"], edges["target"], edges["weight"], strict=True):
        i, j = pos[s], pos[t]
        A[i, i] += w
        A[j, j] += w
        A[i, j] -= w
        A[j, i] -= w
    return dict(zip(ids, np.linalg.solve(A, b), strict=True))


@settings(max_examples=25)
@given(problem=agent_problems(), method=st.sampled_from(["djam", "centralized"]))
def test_djam_matches_centralized(problem: tuple[pd.DataFrame, pd.DataFrame, float], method: str) -> None:
    agents, edges, reg = problem
    res = fit_personal_models(agents, edges, loss="quadratic", method=method, reg=reg, tol=1e-10)
    assert res.converged
    pm = res.personal_models
    theta = pm["theta_intercept"].to_numpy()
    assert np.isfinite(theta).all() and np.isfinite(pm["residual"]).all()
    assert np.isfinite(res.kkt_norm) and np.isfinite(res.error_bound)
    ref = dense_optimum(agents, edges, reg)
    want = np.array([ref[a] for a in pm["agent"]])
    np.testing.assert_allclose(theta, want, rtol=1e-7, atol=1e-7 * max(1.0, np.abs(want).max()))


@settings(max_examples=20)
@given(problem=agent_problems(connected=False))
def test_disconnected_agent_graph(problem: tuple[pd.DataFrame, pd.DataFrame, float]) -> None:
    agents, edges, reg = problem
    reg = max(reg, 0.1)  # the cut-off agent has no neighbour: it needs a prior or data (it has data)
    with pytest.raises(ValueError, match="not connected"):
        fit_personal_models(agents, edges, loss="quadratic", reg=reg)
    res = fit_personal_models(agents, edges, loss="quadratic", reg=reg, allow_disconnected=True, tol=1e-10)
    assert res.converged
    pm = res.personal_models
    assert pm["component"].nunique() >= 2
    ref = dense_optimum(agents, edges, reg)
    np.testing.assert_allclose(pm["theta_intercept"], [ref[a] for a in pm["agent"]], rtol=1e-7, atol=1e-7)
