"""The assignment entry point (crowdflow.assignment.fit.assign_tasks): the maximum-total-score
assignment equals brute force, degenerate inputs give explicit empty results, bad tables are refused
with messages naming the column and the ids.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from crowdflow.assignment.fit import assign_tasks
from crowdflow.synth.assignment import synthetic_assignment

# ---------------------------------------------------------------------------------------------
# assignment by total score (spec §1.2 with u = score)
# ---------------------------------------------------------------------------------------------


def _cands():
    return pd.DataFrame(
        {
            "task": ["t1", "t1", "t2", "t2", "t3", "t3"],
            "worker": ["w1", "w2", "w1", "w2", "w1", "w3"],
            "score": [3.0, 2.0, 2.0, 1.0, 0.5, -1.0],
        }
    )


def test_assign_tasks_brute_force_and_tables():
    rng = np.random.default_rng(13)
    for _ in range(40):
        nw, nt = int(rng.integers(1, 4)), int(rng.integers(1, 5))
        pairs = [(f"t{j}", f"w{i}") for i in range(nw) for j in range(nt) if rng.random() < 0.8]
        if not pairs:
            continue
        cand = pd.DataFrame(pairs, columns=["task", "worker"])
        cand["score"] = rng.normal(size=len(cand))
        wcap = pd.DataFrame({"worker": [f"w{i}" for i in range(nw)], "capacity": rng.integers(0, nt + 1, nw)})
        tcap = pd.DataFrame({"task": [f"t{j}" for j in range(nt)], "cap": rng.integers(0, nw + 1, nt)})
        budget = int(rng.integers(0, len(cand) + 1))
        res = assign_tasks(cand, budget, wcap, tcap)
        # brute force over all subsets of candidates (vectorised enumeration)
        wi = cand.worker.str[1:].astype(int).to_numpy()
        tj = cand.task.str[1:].astype(int).to_numpy()
        X = np.array(list(itertools.product((0, 1), repeat=len(cand))), dtype=float)
        Wm = np.eye(nw)[wi].T  # workers x candidates
        Tm = np.eye(nt)[tj].T
        ok = (
            (X.sum(1) <= budget)
            & np.all(wcap.capacity.to_numpy() >= X @ Wm.T, axis=1)
            & np.all(tcap.cap.to_numpy() >= X @ Tm.T, axis=1)
        )
        best = float(np.max(np.where(ok, X @ cand.score.to_numpy(), -np.inf)))
        assert res.objective == pytest.approx(best, abs=1e-9)
        assert res.certified and res.n_selected == len(res.assignment) <= budget
        assert list(res.assignment.columns) == ["task", "worker", "score"]
        wl = res.worker_load.set_index("worker")
        assert (wl.n_assigned <= wl.capacity).all()
        tl = res.task_load.set_index("task")
        assert (tl.n_assigned <= tl.cap).all()
        assert wl.n_assigned.sum() == res.n_selected == tl.n_assigned.sum()
        assert (res.assignment.score > 0).all()


def test_assign_tasks_degenerate_inputs():
    cand = _cands()
    # negative scores are never assigned (documented; counted)
    res = assign_tasks(cand, None, 5, 5)
    assert res.n_excluded == 1 and ("t3", "w3") not in set(zip(res.assignment.task, res.assignment.worker, strict=True))
    assert res.objective == pytest.approx(8.5)
    # budget 0 / caps 0 / no candidates / only negative scores -> explicit empty results
    for r in (
        assign_tasks(cand, 0, 5, 5),
        assign_tasks(cand, 10, 0, 5),
        assign_tasks(cand, 10, 5, 0),
        assign_tasks(cand.iloc[:0], 10, 5, 5),
        assign_tasks(cand.assign(score=-1.0), 10, 5, 5),
    ):
        assert r.n_selected == 0 and len(r.assignment) == 0 and r.objective == 0.0 and r.certified
        assert list(r.assignment.columns) == ["task", "worker", "score"]
    empty = assign_tasks(cand.iloc[:0], 10, None, None)
    assert len(empty.worker_load) == 0 and len(empty.task_load) == 0
    # unlimited caps show as <NA>
    r = assign_tasks(cand, None, None, None)
    assert r.worker_load.capacity.isna().all() and r.budget is None


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda c: pd.concat([c, c.iloc[[0]]]), "duplicate"),
        (lambda c: c.assign(score=[1.0, np.nan, 1, 1, 1, 1]), "NaN"),
        (lambda c: c.assign(score=[1.0, np.inf, 1, 1, 1, 1]), "NaN/inf"),
        (lambda c: c.drop(columns="score"), "score"),
        (lambda c: c.assign(worker=[None, "w2", "w1", "w2", "w1", "w3"]), "missing ids"),
    ],
)
def test_assign_tasks_candidate_errors(mutate, match):
    with pytest.raises(ValueError, match=match):
        assign_tasks(mutate(_cands()), 3, 2, 2)


def test_assign_tasks_cap_and_budget_errors():
    cand = _cands()
    with pytest.raises(ValueError, match="budget"):
        assign_tasks(cand, -1, 2, 2)
    with pytest.raises(ValueError, match="budget"):
        assign_tasks(cand, float("nan"), 2, 2)
    with pytest.raises(ValueError, match="negative"):
        assign_tasks(cand, 3, pd.DataFrame({"worker": ["w1", "w2", "w3"], "capacity": [1, -1, 1]}), 2)
    with pytest.raises(ValueError, match=r"no 'capacity' row.*w3"):
        assign_tasks(cand, 3, pd.DataFrame({"worker": ["w1", "w2"], "capacity": [1, 1]}), 2)
    with pytest.raises(ValueError, match="duplicate worker"):
        assign_tasks(cand, 3, pd.DataFrame({"worker": ["w1", "w1", "w2", "w3"], "capacity": 1}), 2)
    with pytest.raises(ValueError, match="'cap'"):
        assign_tasks(cand, 3, 2, pd.DataFrame({"task": ["t1", "t2", "t3"], "max": [1, 1, 1]}))
    with pytest.raises(ValueError, match=">= 0"):
        assign_tasks(cand, 3, -2, 2)
    # spec aliases and extra entities (listed with zero load); real caps floored
    alias = cand.rename(columns={"task": "task_id", "worker": "worker_id", "score": "value"})
    wc = pd.DataFrame({"worker_id": ["w1", "w2", "w3", "w9"], "max_tasks": [1.7, 1, 1, 4]})
    r = assign_tasks(alias, 3, wc, 1)
    assert r.worker_load.set_index("worker").loc["w9", "n_assigned"] == 0
    assert r.worker_load.set_index("worker").loc["w1", "capacity"] == 1
    assert r.objective == pytest.approx(3.0 + 1.0)


def test_assign_tasks_backends_agree_and_ids_are_strings():
    cand, wc, tc, budget = synthetic_assignment(8, 30, 0.3, seed=1)
    cand = cand.assign(score=cand["quality"] - 0.55)
    res = {bk: assign_tasks(cand, budget, wc, tc, backend=bk) for bk in ("flow", "lp")}
    assert res["flow"].objective == pytest.approx(res["lp"].objective, rel=1e-9)
    # integer ids come back as strings
    c2 = pd.DataFrame({"task": [1, 1, 2], "worker": [10, 20, 10], "score": [1.0, 2.0, 3.0]})
    r = assign_tasks(c2, 2, 1, 1)
    assert set(r.assignment.worker) == {"10", "20"} and set(r.assignment.task) == {"1", "2"}
