"""Partitioned DJAM (crowdflow.personal_models.blocked): blocks, executors, engines.

docs/methods/personal_models.md §6.3: the result does not depend on the executor or the engine.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from crowdflow.personal_models import (
    build_problem,
    centralized,
    djam_blocked,
    partition_agents,
)
from crowdflow.synth.personal_models import (
    field_estimation_instance,
)


def test_partition_blocks():
    inst = field_estimation_instance(21, n=60, radius=0.25)
    prob = inst.problem()
    block = partition_agents(prob.graph, 4)
    assert set(block.tolist()) == {0, 1, 2, 3}
    assert np.bincount(block).min() >= 60 // 4
    cut = np.mean(block[prob.graph.u] != block[prob.graph.v])
    assert cut < 0.5


@pytest.mark.parametrize("kind", ["huber", "quadratic"])
def test_blocked_mode_equals_centralized(kind, quadratic_tables):
    if kind == "huber":
        prob = field_estimation_instance(22, n=40, radius=0.3).problem()
    else:
        rows, edges = quadratic_tables(23, n=40)
        prob = build_problem(rows, edges, reg=0.1)
    ref = centralized(prob).theta
    seq = djam_blocked(prob, n_blocks=4, seed=0, tol=1e-9, engine="simulation")
    assert seq.converged and seq.metadata["n_blocks"] == 4 and seq.metadata["cut_edges"] > 0
    assert np.linalg.norm(seq.theta - ref) <= 1e-9 * max(1.0, np.linalg.norm(seq.theta))
    with ThreadPoolExecutor(max_workers=2) as ex:
        thr = djam_blocked(prob, n_blocks=4, seed=0, tol=1e-9, executor=ex, engine="simulation")
    np.testing.assert_array_equal(seq.theta, thr.theta)
    calls = []

    def my_executor(fn, items):  # the callable form a Dask/Prefect adapter would take
        calls.append(len(items))
        return [fn(it) for it in reversed(items)][::-1]

    cal = djam_blocked(prob, n_blocks=4, seed=0, tol=1e-9, executor=my_executor, engine="simulation")
    np.testing.assert_array_equal(seq.theta, cal.theta)
    assert calls and all(c == 4 for c in calls)


def test_blocked_matching_equals_blocked_simulation(scaled):
    _inst, prob, ref = scaled
    a = djam_blocked(prob, n_blocks=3, seed=2, tol=1e-8, engine="simulation")
    b = djam_blocked(prob, n_blocks=3, seed=2, tol=1e-8, engine="matching")
    assert a.converged and b.converged and a.iterations == b.iterations
    np.testing.assert_array_equal(a.theta, b.theta)
    assert np.linalg.norm(b.theta - ref) <= 1e-8 * max(1.0, np.linalg.norm(b.theta))
