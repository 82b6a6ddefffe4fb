"""Property tests of the skills models (issue #9, item 2b) against a brute-force identifiability oracle.

Random sparse label tables (1-8 workers, 1-10 tasks, 2-3 classes, any pattern of who labelled what)
through PGD, one-coin Dawid-Skene and majority vote: outputs are finite where the model defines them,
skills stay inside their box, consensus confidences are probabilities, and every worker's
identifiability status equals a plain BFS 2-colouring of the worker co-label graph.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from crowdflow.graphs import worker_graph_report
from crowdflow.labels import encode_labels
from crowdflow.skills.fit import fit_skills


@st.composite
def label_tables(draw: st.DrawFn) -> pd.DataFrame:
    """A sparse labels table with unique (task, worker) pairs and at least two distinct labels."""
    n_workers = draw(st.integers(1, 8))
    n_tasks = draw(st.integers(1 if n_workers > 1 else 2, 10))  # room for two different labels
    n_classes = draw(st.integers(2, 3))
    cells = [(t, w) for t in range(n_tasks) for w in range(n_workers)]
    chosen = draw(st.lists(st.sampled_from(cells), min_size=2, max_size=min(len(cells), 40), unique=True))
    labels = draw(st.lists(st.integers(0, n_classes - 1), min_size=len(chosen), max_size=len(chosen)))
    if len(set(labels)) < 2:  # a label set of size 1 is rejected by validation before any model runs
        labels[0] = (labels[0] + 1) % n_classes
    # ids that sort differently as numbers and as strings, so order bugs cannot hide
    return pd.DataFrame(
        {
            "task": [f"t{t * 7 % 11}" for t, _ in chosen],
            "worker": [str(10 - w) for _, w in chosen],
            "label": [f"c{c}" for c in labels],
        }
    )


def brute_status(df: pd.DataFrame) -> dict[str, str]:
    """ok / bipartite_component / isolated per worker, from a BFS 2-colouring of the co-label graph."""
    by_task: dict[str, set[str]] = {}
    for t, w in zip(df["task"], df["worker"], strict=True):
        by_task.setdefault(t, set()).add(w)
    nbrs: dict[str, set[str]] = {w: set() for w in df["worker"]}
    for ws in by_task.values():
        for a in ws:
            nbrs[a] |= ws - {a}
    return _two_colour(nbrs)


def _two_colour(nbrs: dict[str, set[str]]) -> dict[str, str]:
    colour: dict[str, int] = {}
    status: dict[str, str] = {}
    for s in sorted(nbrs):
        if s in colour:
            continue
        colour[s], members, odd = 0, [s], False
        q = deque([s])
        while q:
            u = q.popleft()
            for v in nbrs[u]:
                if v not in colour:
                    colour[v] = 1 - colour[u]
                    members.append(v)
                    q.append(v)
                elif colour[v] == colour[u]:
                    odd = True
        verdict = "isolated" if len(members) == 1 else ("ok" if odd else "bipartite_component")
        status.update(dict.fromkeys(members, verdict))
    return status


def brute_active(df: pd.DataFrame, tau: float) -> set[str]:
    """docs/methods/skills.md §2.8 active set: drop workers with n_i <= tau^2 and non-ok components until stable."""
    n_i = df["worker"].value_counts().to_dict()
    status = brute_status(df)
    active = {w for w, s in status.items() if s == "ok" and n_i[w] > tau**2}
    while True:
        sub = df[df["worker"].isin(active)]
        st_sub = brute_status(sub) if len(sub) else {}
        still = {w for w in active if st_sub.get(w) == "ok"}
        if still == active:
            return active
        active = still


def _assert_consensus(res, df: pd.DataFrame) -> None:
    cons = res.consensus
    assert sorted(cons["task"]) == sorted(df["task"].unique())
    conf = cons["confidence"].to_numpy(dtype=np.float64)
    assert np.isfinite(conf).all() and (conf >= 0).all() and (conf <= 1 + 1e-12).all()
    assert set(cons["label"]) <= set(df["label"])
    assert not cons["label"].isna().any()


@settings(max_examples=50)
@given(df=label_tables())
@example(df=pd.DataFrame({"task": ["a", "a"], "worker": ["1", "2"], "label": ["x", "y"]}))  # one edge
def test_graph_status_matches_brute_force(df: pd.DataFrame) -> None:
    rep = worker_graph_report(encode_labels(df))
    got = dict(zip(rep.workers["worker"], rep.workers["status"], strict=True))
    assert got == brute_status(df)


@settings(max_examples=40)
@given(df=label_tables(), solver=st.sampled_from(["scaled", "gd"]), tau=st.sampled_from([0.0, 0.5, 1.0]))
def test_pgd_finite_boxed_and_identifiability(df: pd.DataFrame, solver: str, tau: float) -> None:
    res = fit_skills(df, method="pgd", solver=solver, tau=tau, max_iter=300)
    sk = res.skills.set_index("worker")
    graph_status = brute_status(df)
    active = brute_active(df, tau)
    # identifiable = in the final active set; the graph verdict is kept for the others
    assert set(sk.index[sk["identifiable"]]) == active
    for w, s in sk["status"].items():
        if s in ("isolated", "bipartite_component") and graph_status[w] != "ok":
            assert s == graph_status[w]
        assert (s == "ok") == (w in active)
    # skills: finite and inside the box exactly for the identified workers, NaN (documented) otherwise
    ident = sk["identifiable"].to_numpy()
    skill = sk["skill"].to_numpy(dtype=np.float64)
    assert np.isfinite(skill[ident]).all() and np.isnan(skill[~ident]).all()
    lo, hi = sk["lower"].to_numpy(), sk["upper"].to_numpy()
    assert (skill[ident] >= lo[ident] - 1e-12).all() and (skill[ident] <= hi[ident] + 1e-12).all()
    w = sk["vote_weight"].to_numpy(dtype=np.float64)
    assert np.isfinite(w).all() and (w[~ident] == 0).all()
    _assert_consensus(res, df)
    fallback = res.consensus["fallback"].to_numpy()
    assert res.metadata["n_fallback_tasks"] == int(fallback.sum())
    assert res.metadata["frac_workers_identified"] == pytest.approx(len(active) / len(sk))
    assert np.isfinite(res.metadata["final_loss"])


@settings(max_examples=30)
@given(df=label_tables(), method=st.sampled_from(["onecoin_ds", "ds", "mv"]))
def test_baselines_finite(df: pd.DataFrame, method: str) -> None:
    res = fit_skills(df, method=method)
    sk = res.skills
    acc = sk["accuracy"].to_numpy(dtype=np.float64)
    assert np.isfinite(acc).all() and (acc >= 0).all() and (acc <= 1 + 1e-12).all()
    weight = sk["vote_weight"].to_numpy(dtype=np.float64)
    # the full-confusion model has no scalar vote weight: NaN by contract, finite for the others
    assert np.isnan(weight).all() if method == "ds" else np.isfinite(weight).all()
    assert res.metadata["fit_status"] in ("converged", "not_converged", "closed_form")
    if method != "mv":
        assert np.isfinite(sk["skill"].to_numpy(dtype=np.float64)).all()
        assert np.isfinite(res.loss_trace).all()
    got = dict(zip(sk["worker"], sk["status"], strict=True))
    assert got == brute_status(df)  # informational status of the baselines = the graph verdict
    _assert_consensus(res, df)
