"""Input checks and problem construction (crowdflow.personal_models.problem).

AT-1..3 of docs/methods/personal_models.md §7: connectivity (and the per-component opt-in), edge
rejections, strong convexity, observation checks, zero-weight edges; features as columns or a list.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowdflow.personal_models import (
    build_problem,
    centralized,
    djam,
)


def _agents(ids, y=None):
    y = y if y is not None else np.arange(len(ids), dtype=float)
    return pd.DataFrame({"agent": list(ids), "y": y})


def test_at1_disconnected_rejected_and_opt_in():
    agents = _agents(["a", "b", "c", "d", "e"], [0.0, 1.0, 2.0, 3.0, 4.0])
    edges = pd.DataFrame({"source": ["a", "c"], "target": ["b", "d"], "weight": [1.0, 2.0]})
    with pytest.raises(ValueError, match=r"graph is not connected: 3 components \(sizes \[2, 2, 1\]"):
        build_problem(agents, edges)
    prob = build_problem(agents, edges, reg=0.5, prior_mean=1.0, allow_disconnected=True)
    ref = centralized(prob)
    res = djam(prob, seed=0, tol=1e-12, engine="simulation")
    assert res.converged
    np.testing.assert_allclose(res.theta, ref.theta, atol=1e-11)
    # isolated agent e: argmin ½(y − θ)² + (λ/2)(θ − θ̄)² = (y + λθ̄)/(1 + λ)
    e = list(prob.agents).index("e")
    assert res.theta[e, 0] == pytest.approx((4.0 + 0.5 * 1.0) / 1.5, abs=1e-14)
    # component a–b in closed form: [[1+λ+W, −W], [−W, 1+λ+W]] θ = [y + λθ̄]
    A = np.array([[1.5 + 1.0, -1.0], [-1.0, 1.5 + 1.0]])
    np.testing.assert_allclose(res.theta[:2, 0], np.linalg.solve(A, [0.5, 1.5]), atol=1e-11)
    assert res.personal_models["component"].nunique() == 3


def test_at1_isolated_agent_rejected():
    agents = _agents(["a", "b", "c"])
    edges = pd.DataFrame({"source": ["a"], "target": ["b"], "weight": [1.0]})
    with pytest.raises(
        ValueError, match=r"graph is not connected: 2 components \(sizes \[2, 1\]; e.g. agents component of 1: \[c\]"
    ):
        build_problem(agents, edges)


@pytest.mark.parametrize(
    ("edges", "message"),
    [
        (
            {"source": ["a", "b"], "target": ["b", "a"], "weight": [1.0, 2.0]},
            r"edges: asymmetric weights for pairs \[\(a, b: 1.0 vs 2.0\)\]",
        ),
        (
            {"source": ["a", "b"], "target": ["b", "c"], "weight": [1.0, -1.0]},
            r"edges: non-positive or non-finite weight.*\(b, c, -1.0\)",
        ),
        (
            {"source": ["a", "b"], "target": ["b", "c"], "weight": [1.0, np.nan]},
            r"edges: non-positive or non-finite weight",
        ),
        (
            {"source": ["a", "b", "c"], "target": ["b", "c", "c"], "weight": [1.0, 1.0, 1.0]},
            r"edges: self-loop on \[c\]",
        ),
        ({"source": ["a", "b"], "target": ["b", "zz"], "weight": [1.0, 1.0]}, r"edges: unknown agent id\(s\) \[zz\]"),
        (
            {"source": ["a", "a", "b"], "target": ["b", "b", "c"], "weight": [1.0, 1.0, 1.0]},
            r"edges: duplicate pair \(a, b\)",
        ),
    ],
)
def test_at2_edge_rejections(edges, message):
    with pytest.raises(ValueError, match=message):
        build_problem(_agents(["a", "b", "c"]), pd.DataFrame(edges))


def test_at2_symmetric_duplicate_pair_is_deduplicated():
    edges = pd.DataFrame({"source": ["a", "b", "b"], "target": ["b", "a", "c"], "weight": [1.5, 1.5, 1.0]})
    prob = build_problem(_agents(["a", "b", "c"]), edges)
    assert prob.graph.n_edges == 2


def test_at2_convexity_rejections():
    edges = pd.DataFrame({"source": ["a", "b"], "target": ["b", "c"], "weight": [1.0, 1.0]})
    # ridge agent with λ = 0 and fewer than p samples
    rows = pd.DataFrame(
        {
            "agent": ["a", "a", "a", "b", "b", "b", "c"],
            "f0": [1, 0, 1, 1, 0, 2, 1.0],
            "f1": [0, 1, 1, 0, 1, 1, 2.0],
            "y": [1, 2, 3, 1, 2, 3, 1.0],
        }
    )
    with pytest.raises(ValueError, match=r"agent c: loss not strongly convex \(λ_min"):
        build_problem(rows, edges, loss="quadratic", reg=0.0)
    with pytest.raises(ValueError, match=r"loss not strongly convex \(ridge needs reg > 0\)"):
        build_problem(rows, edges, loss="ridge", reg={"a": 1.0, "b": 1.0, "c": 0.0})
    build_problem(rows, edges, loss="quadratic", reg={"a": 0.0, "b": 0.0, "c": 0.1})  # enough data elsewhere
    # Huber with s = 0
    with pytest.raises(ValueError, match=r"agent a: loss not strongly convex \(huber needs s = reg > 0"):
        build_problem(_agents(["a", "b", "c"]), edges, loss="huber", reg=0.0)
    with pytest.raises(ValueError, match=r"logistic needs reg > 0"):
        build_problem(_agents(["a", "b", "c"], [0, 1, 1.0]), edges, loss="logistic", reg=0.0)
    # an agent without data needs a prior
    nodata = _agents(["a", "b", "c"], [1.0, 2.0, np.nan])
    with pytest.raises(ValueError, match=r"agent\(s\) \[c\]: no data and no prior"):
        build_problem(nodata, edges, reg=0.0)
    prob = build_problem(nodata, edges, reg=0.2)
    assert prob.n_samples.tolist() == [1, 1, 0]


def test_observation_checks():
    edges = pd.DataFrame({"source": ["a"], "target": ["b"], "weight": [1.0]})
    bad_x = pd.DataFrame({"agent": ["a", "b"], "x": [[1.0, 2.0], [1.0]], "y": [1.0, 2.0]})
    with pytest.raises(ValueError, match="observations: inconsistent dimension"):
        build_problem(bad_x, edges)
    nonfinite = pd.DataFrame({"agent": ["a", "b"], "f": [1.0, np.inf], "y": [1.0, 2.0]})
    with pytest.raises(ValueError, match=r"observations: non-finite features for agent\(s\) \[b\]"):
        build_problem(nonfinite, edges)
    with pytest.raises(ValueError, match="logistic targets must be 0/1"):
        build_problem(pd.DataFrame({"agent": ["a", "b"], "y": [0.0, 2.0]}), edges, loss="logistic")
    with pytest.raises(ValueError, match="agents: missing column 'y'"):
        build_problem(pd.DataFrame({"agent": ["a", "b"]}), edges)
    with pytest.raises(ValueError, match="duplicate/null agent_id"):
        build_problem(pd.DataFrame({"agent": ["a", None], "y": [1.0, 2.0]}), edges)


def test_at3_zero_weight_edges_dropped_with_warning():
    agents = _agents(["a", "b", "c"])
    edges = pd.DataFrame({"source": ["a", "b", "a"], "target": ["b", "c", "c"], "weight": [1.0, 1.0, 0.0]})
    with pytest.warns(RuntimeWarning, match=r"dropping 1 zero-weight edge\(s\), e.g. \(a, c\)"):
        prob = build_problem(agents, edges)
    assert prob.graph.n_edges == 2
    edges2 = pd.DataFrame({"source": ["a", "b"], "target": ["b", "c"], "weight": [1.0, 0.0]})
    with (
        pytest.warns(RuntimeWarning, match="zero-weight"),
        pytest.raises(ValueError, match="graph is not connected: 2 components"),
    ):
        build_problem(agents, edges2)


def test_feature_columns_and_list_column_agree(quadratic_tables):
    rows, edges = quadratic_tables(11, n=12)
    as_list = pd.DataFrame({"agent": rows["agent"], "x": rows[["f0", "f1", "f2"]].to_numpy().tolist(), "y": rows["y"]})
    shuffled = rows.sample(frac=1.0, random_state=1)
    a = centralized(build_problem(rows, edges, reg=0.1))
    b = centralized(build_problem(as_list, edges, reg=0.1))
    c = centralized(build_problem(shuffled, edges, reg=0.1))
    np.testing.assert_allclose(a.theta, b.theta, atol=1e-13)
    np.testing.assert_allclose(a.theta, c.theta, atol=1e-13)
    assert list(a.personal_models.columns[:4]) == ["agent", "theta_f0", "theta_f1", "theta_f2"]
    assert list(b.personal_models.columns[:4]) == ["agent", "theta_x_0", "theta_x_1", "theta_x_2"]
