"""Property tests of TVCS assignment (issue #9, item 2f).

TVCS: random tiny candidate tables, the exact solver equals brute-force enumeration (hypothesis
complements the seeded loops of tests/models/test_tvcs.py). The DJAM property tests (item 2e) are in
tests/personal_models/test_properties.py.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from crowdflow.models.tvcs import assign_tasks


@st.composite
def candidate_tables(draw: st.DrawFn) -> tuple[pd.DataFrame, int | None, int | None, int | None]:
    n_tasks, n_workers = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    cells = [(t, w) for t in range(n_tasks) for w in range(n_workers)]
    chosen = draw(st.lists(st.sampled_from(cells), min_size=1, max_size=min(len(cells), 9), unique=True))
    scores = draw(st.lists(st.floats(-2, 2, allow_nan=False), min_size=len(chosen), max_size=len(chosen)))
    cand = pd.DataFrame({"task": [f"t{t}" for t, _ in chosen], "worker": [f"{w}" for _, w in chosen], "score": scores})
    cap = st.one_of(st.none(), st.integers(0, 3))
    return cand, draw(cap), draw(cap), draw(cap)


def brute_best(cand: pd.DataFrame, budget: int | None, wcap: int | None, tcap: int | None) -> float:
    best = 0.0
    idx = range(len(cand))
    for k in range(len(cand) + 1):
        if budget is not None and k > budget:
            break
        for sub in itertools.combinations(idx, k):
            rows = cand.iloc[list(sub)]
            if wcap is not None and (rows["worker"].value_counts() > wcap).any():
                continue
            if tcap is not None and (rows["task"].value_counts() > tcap).any():
                continue
            best = max(best, float(rows["score"].sum()))
    return best


@settings(max_examples=40)
@given(inst=candidate_tables(), backend=st.sampled_from(["flow", "lp"]))
def test_assignment_equals_brute_force(
    inst: tuple[pd.DataFrame, int | None, int | None, int | None], backend: str
) -> None:
    cand, budget, wcap, tcap = inst
    res = assign_tasks(cand, budget, wcap, tcap, backend=backend)
    assert np.isfinite(res.objective)
    np.testing.assert_allclose(res.objective, brute_best(cand, budget, wcap, tcap), atol=1e-9)
    a = res.assignment
    assert res.certified and res.n_selected == len(a)
    assert budget is None or len(a) <= budget
    assert wcap is None or (a["worker"].value_counts() <= wcap).all()
    assert tcap is None or (a["task"].value_counts() <= tcap).all()
    assert not a.duplicated(["task", "worker"]).any()
