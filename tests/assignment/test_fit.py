"""The assignment entry point (crowdflow.assignment.fit.assign_tasks): the maximum-total-score
assignment equals brute force, degenerate inputs give explicit empty results, bad tables are refused
with messages naming the column and the ids.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from crowdflow.assignment.fit import assign_tasks, next_batch
from crowdflow.assignment.problem import CapsTableError
from crowdflow.assignment.scores import candidate_scores
from crowdflow.assignment.types import NextBatchResult
from crowdflow.contracts.errors import InputError
from crowdflow.synth.assignment import synthetic_assignment

# ---------------------------------------------------------------------------------------------
# assignment by total score (docs/methods/assignment.md §1.2 with u = score)
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
        res = assign_tasks(cand, budget=budget, worker_caps=wcap, task_caps=tcap)
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
    res = assign_tasks(cand, budget=None, worker_cap=5, task_cap=5)
    assert res.n_excluded == 1 and ("t3", "w3") not in set(zip(res.assignment.task, res.assignment.worker, strict=True))
    assert res.objective == pytest.approx(8.5)
    # budget 0 / caps 0 / no candidates / only negative scores -> explicit empty results
    for r in (
        assign_tasks(cand, budget=0, worker_cap=5, task_cap=5),
        assign_tasks(cand, budget=10, worker_cap=0, task_cap=5),
        assign_tasks(cand, budget=10, worker_cap=5, task_cap=0),
        assign_tasks(cand.iloc[:0], budget=10, worker_cap=5, task_cap=5),
        assign_tasks(cand.assign(score=-1.0), budget=10, worker_cap=5, task_cap=5),
    ):
        assert r.n_selected == 0 and len(r.assignment) == 0 and r.objective == 0.0 and r.certified
        assert list(r.assignment.columns) == ["task", "worker", "score"]
    empty = assign_tasks(cand.iloc[:0], budget=10, worker_cap=None, task_cap=None)
    assert len(empty.worker_load) == 0 and len(empty.task_load) == 0
    # unlimited caps show as <NA>
    r = assign_tasks(cand, budget=None, worker_cap=None, task_cap=None)
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
        assign_tasks(mutate(_cands()), budget=3, worker_cap=2, task_cap=2)


def test_assign_tasks_cap_and_budget_errors():
    cand = _cands()
    with pytest.raises(ValueError, match="budget"):
        assign_tasks(cand, budget=-1, worker_cap=2, task_cap=2)
    with pytest.raises(ValueError, match="budget"):
        assign_tasks(cand, budget=float("nan"), worker_cap=2, task_cap=2)
    with pytest.raises(ValueError, match="negative"):
        assign_tasks(
            cand, budget=3, worker_caps=pd.DataFrame({"worker": ["w1", "w2", "w3"], "capacity": [1, -1, 1]}), task_cap=2
        )
    with pytest.raises(ValueError, match=r"no 'capacity' row.*w3"):
        assign_tasks(cand, budget=3, worker_caps=pd.DataFrame({"worker": ["w1", "w2"], "capacity": [1, 1]}), task_cap=2)
    with pytest.raises(ValueError, match="duplicate worker"):
        assign_tasks(
            cand, budget=3, worker_caps=pd.DataFrame({"worker": ["w1", "w1", "w2", "w3"], "capacity": 1}), task_cap=2
        )
    with pytest.raises(ValueError, match="'cap'"):
        assign_tasks(
            cand, budget=3, worker_cap=2, task_caps=pd.DataFrame({"task": ["t1", "t2", "t3"], "max": [1, 1, 1]})
        )
    # the scalar cap is an option now: refused by AssignmentOptions (pydantic words the range)
    with pytest.raises(ValueError, match=r"worker_cap\s+Input should be greater than or equal to 0"):
        assign_tasks(cand, budget=3, worker_cap=-2, task_cap=2)
    # documented aliases (docs/methods/assignment.md §1.3) and extra entities (listed with zero load);
    # fractional caps are refused (see below)
    alias = cand.rename(columns={"task": "task_id", "worker": "worker_id", "score": "value"})
    wc = pd.DataFrame({"worker_id": ["w1", "w2", "w3", "w9"], "max_tasks": [1, 1, 1, 4]})
    r = assign_tasks(alias, budget=3, worker_caps=wc, task_cap=1)
    assert r.worker_load.set_index("worker").loc["w9", "n_assigned"] == 0
    assert r.worker_load.set_index("worker").loc["w1", "capacity"] == 1
    assert r.objective == pytest.approx(3.0 + 1.0)


def test_assign_tasks_backends_agree_and_ids_are_strings():
    cand, wc, tc, budget = synthetic_assignment(8, 30, 0.3, seed=1)
    cand = cand.assign(score=cand["quality"] - 0.55)
    res = {bk: assign_tasks(cand, budget=budget, worker_cap=wc, task_cap=tc, backend=bk) for bk in ("flow", "lp")}
    assert res["flow"].objective == pytest.approx(res["lp"].objective, rel=1e-9)
    # integer ids come back as strings
    c2 = pd.DataFrame({"task": [1, 1, 2], "worker": [10, 20, 10], "score": [1.0, 2.0, 3.0]})
    r = assign_tasks(c2, budget=2, worker_cap=1, task_cap=1)
    assert set(r.assignment.worker) == {"10", "20"} and set(r.assignment.task) == {"1", "2"}


# ---------------------------------------------------------------------------------------------
# caps tables are counts (issue #18): a fractional cap is refused where the table is read
# ---------------------------------------------------------------------------------------------


def test_fractional_caps_are_refused_naming_table_column_and_row():
    """Before: 1.5 was floored to 1 silently (and logged at INFO), so the run assigned fewer pairs
    than the table allowed without saying so; now the table, column, data row and id are named."""
    cand = _cands()
    wc = pd.DataFrame({"worker": ["w1", "w2", "w3"], "capacity": [2, 1.5, 1]})
    with pytest.raises(CapsTableError) as err:
        assign_tasks(cand, budget=3, worker_caps=wc, task_cap=2)
    msg = str(err.value)
    assert msg.startswith("worker_caps, column 'capacity', rows 2: ")
    assert "whole number, got 1.5 for worker 'w2'" in msg and "refused, not rounded" in msg
    assert isinstance(err.value, ValueError) and isinstance(err.value, InputError)  # exit 2 in the CLI
    assert err.value.column == "capacity" and err.value.rows == [2]
    tc = pd.DataFrame({"task_id": ["t1", "t2", "t3"], "max_workers": [1, 1, 0.5]})  # aliases too
    with pytest.raises(CapsTableError, match=r"task_caps, column 'cap', rows 3: .*got 0.5 for task 't3'"):
        assign_tasks(cand, task_caps=tc)
    # whole numbers written as floats (2.0, as a CSV reader returns them) and inf (no cap) are caps
    ok = assign_tasks(cand, worker_caps=wc.assign(capacity=[2.0, np.inf, 1.0]), task_cap=2)
    assert ok.worker_load.set_index("worker")["capacity"].isna().tolist() == [False, True, False]


def test_scalar_cap_is_the_default_for_ids_a_caps_table_omits():
    cand = _cands()
    wc = pd.DataFrame({"worker": ["w1"], "capacity": [1]})
    r = assign_tasks(cand, worker_caps=wc, worker_cap=0)
    assert r.worker_load.set_index("worker")["capacity"].to_dict() == {"w1": 1, "w2": 0, "w3": 0}
    assert r.objective == pytest.approx(3.0)
    with pytest.raises(ValueError, match=r"2 worker\(s\) in candidates have no 'capacity' row"):
        assign_tasks(cand, worker_caps=wc)


# ---------------------------------------------------------------------------------------------
# the next batch of the closed loop (issue #24: moved out of the Prefect task)
# ---------------------------------------------------------------------------------------------


def _loop_tables():
    open_tasks = pd.DataFrame({"task": ["x", "y", "z"]})
    workers = pd.DataFrame({"worker": ["a", "b", "c", "new"], "capacity": [1, np.nan, 2, 3]})
    skills = pd.DataFrame(
        {"worker": ["a", "b", "c", "d"], "skill": [0.8, 0.6, np.nan, 0.9], "accuracy": [0.9, 0.8, np.nan, 0.95]}
    )
    consensus = pd.DataFrame({"task": ["x", "y"], "confidence": [0.55, 0.9]})
    return open_tasks, workers, skills, consensus


def test_next_batch_candidates_counts_and_assignment():
    open_tasks, workers, skills, consensus = _loop_tables()
    out = next_batch(open_tasks, workers, skills, consensus, budget=3, worker_cap=2, task_cap=1)
    assert isinstance(out, NextBatchResult)
    # c (no usable skill) and new (no skills row) are left out and counted; d is not available
    assert out.n_workers_without_skill == 2
    assert set(out.candidates["worker"]) == {"a", "b"} and len(out.candidates) == 6
    pairs = open_tasks[["task"]].merge(workers.loc[workers["worker"].isin(["a", "b"]), ["worker"]], how="cross")
    expected = candidate_scores(skills, consensus, pairs)
    pd.testing.assert_frame_equal(out.candidates, expected)
    # the same assignment as assign_tasks on those candidates with the workers' capacities (b: empty -> 2)
    caps = pd.DataFrame({"worker": ["a", "b"], "capacity": [1, 2]})
    ref = assign_tasks(expected[["task", "worker", "score"]], budget=3, task_cap=1, worker_caps=caps)
    pd.testing.assert_frame_equal(out.result.assignment, ref.assignment)
    assert out.result.n_selected == 3 and out.result.certified


def test_next_batch_empty_capacity_without_default_is_no_cap():
    """Before: an empty capacity with no worker_cap was filled with 1e18, and worker_load reported
    capacity 1000000000000000000 (slack ~1e18) for that worker; now it is unlimited (<NA>), like every
    other 'no cap'."""
    open_tasks, workers, skills, consensus = _loop_tables()
    out = next_batch(open_tasks, workers, skills, consensus, task_cap=1)
    wl = out.result.worker_load.set_index("worker")
    assert pd.isna(wl.loc["b", "capacity"]) and pd.isna(wl.loc["b", "slack"])
    assert wl.loc["a", "capacity"] == 1
    assert wl.loc["b", "n_assigned"] == 2  # b takes the two tasks a cannot (a's capacity is 1)
    # with a worker_cap, an empty capacity takes it
    out2 = next_batch(open_tasks, workers, skills, consensus, task_cap=1, worker_cap=1)
    assert out2.result.worker_load.set_index("worker").loc["b", "capacity"] == 1


def test_next_batch_refuses_fractional_capacities():
    open_tasks, workers, skills, consensus = _loop_tables()
    with pytest.raises(CapsTableError, match=r"workers, column 'capacity', rows 3: .*got 2.5 for worker 'c'"):
        next_batch(open_tasks, workers.assign(capacity=[1, np.nan, 2.5, 3]), skills, consensus)
    with pytest.raises(ValueError, match="consensus: missing column 'confidence'"):
        next_batch(open_tasks, workers, skills, consensus[["task"]])
