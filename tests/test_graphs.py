"""Graph checks vs. closed forms and a brute-force BFS 2-colouring."""

from __future__ import annotations

from collections import deque

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from crowdflow.graphs import agent_graph_report, components, describe_failures, item_components, worker_graph_report
from crowdflow.labels import encode_labels


def _adj(n: int, edges: list[tuple[int, int]]) -> sp.csr_matrix:
    if not edges:
        return sp.csr_matrix((n, n))
    r, c = zip(*edges, strict=True)
    return sp.csr_matrix((np.ones(len(r)), (r, c)), shape=(n, n))


def _brute(n: int, edges: list[tuple[int, int]]) -> tuple[list[int], dict[int, bool]]:
    """Plain BFS: component of each node (numbered by smallest member) and bipartiteness per component."""
    nbrs: list[set[int]] = [set() for _ in range(n)]
    for a, b in edges:
        if a != b:
            nbrs[a].add(b)
            nbrs[b].add(a)
    comp = [-1] * n
    colour = [-1] * n
    bip: dict[int, bool] = {}
    k = 0
    for s in range(n):
        if comp[s] >= 0:
            continue
        comp[s], colour[s], ok = k, 0, True
        q = deque([s])
        while q:
            u = q.popleft()
            for v in nbrs[u]:
                if comp[v] < 0:
                    comp[v], colour[v] = k, 1 - colour[u]
                    q.append(v)
                elif colour[v] == colour[u]:
                    ok = False
        bip[k] = ok
        k += 1
    return comp, bip


def ring(n: int) -> list[tuple[int, int]]:
    return [(i, (i + 1) % n) for i in range(n)]


@pytest.mark.parametrize(
    ("name", "n", "edges", "bipartite"),
    [
        ("even ring C10", 10, ring(10), True),
        ("odd ring C11", 11, ring(11), False),
        ("triangle", 3, ring(3), False),
        ("single edge", 2, [(0, 1)], True),
        ("star", 6, [(0, i) for i in range(1, 6)], True),
        ("star + leaf edge", 6, [(0, i) for i in range(1, 6)] + [(1, 2)], False),
        ("path", 5, [(i, i + 1) for i in range(4)], True),
        ("K5", 5, [(i, j) for i in range(5) for j in range(i + 1, 5)], False),
        (
            "5x5 grid",
            25,
            [(r * 5 + c, r * 5 + c + 1) for r in range(5) for c in range(4)]
            + [(r * 5 + c, (r + 1) * 5 + c) for r in range(4) for c in range(5)],
            True,
        ),
    ],
)
def test_known_graphs(name: str, n: int, edges: list[tuple[int, int]], bipartite: bool) -> None:
    g = components(_adj(n, edges))
    assert g.n_components == 1, name
    assert bool(g.bipartite[0]) is bipartite, name
    if bipartite:  # the colouring is proper: every edge joins the two classes
        for a, b in edges:
            assert g.colour[a] != g.colour[b], name


def test_disjoint_union_statuses() -> None:
    """Spec AT-G3: triangle + single edge + isolated worker → ok / bipartite_component / isolated."""
    df = pd.DataFrame(
        {
            "task": ["t1", "t1", "t2", "t2", "t3", "t3", "t4", "t4", "t5"],
            "worker": ["a", "b", "b", "c", "c", "a", "d", "e", "f"],
            "label": ["1"] * 9,
        }
    )
    rep = worker_graph_report(encode_labels(df))
    status = dict(zip(rep.workers["worker"], rep.workers["status"], strict=True))
    assert status == {
        "a": "ok",
        "b": "ok",
        "c": "ok",
        "d": "bipartite_component",
        "e": "bipartite_component",
        "f": "isolated",
    }
    comps = rep.components.set_index("component")
    assert comps.loc[1, "colour_sizes"] == "1/1"
    assert list(rep.workers["n_partners"]) == [2, 2, 2, 1, 1, 0]
    text = describe_failures(rep)
    assert "component 1: bipartite_component, 2 workers" in text and "[d,e]" in text
    assert "component 2: isolated" in text and "[f]" in text


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 14),
    edges=st.lists(st.tuples(st.integers(0, 13), st.integers(0, 13)), max_size=30),
)
def test_components_match_brute_force(n: int, edges: list[tuple[int, int]]) -> None:
    edges = [(a % n, b % n) for a, b in edges]
    g = components(_adj(n, edges))
    comp, bip = _brute(n, edges)
    assert g.labels.tolist() == comp
    assert {k: bool(v) for k, v in enumerate(g.bipartite)} == bip


def test_component_ids_do_not_depend_on_row_order() -> None:
    rng = np.random.default_rng(3)
    df = pd.DataFrame(
        {"task": rng.integers(0, 40, 200).astype(str), "worker": rng.integers(0, 30, 200).astype(str), "label": "1"}
    ).drop_duplicates(["task", "worker"])
    a = worker_graph_report(encode_labels(df)).workers
    b = worker_graph_report(encode_labels(df.sample(frac=1.0, random_state=1))).workers
    pd.testing.assert_frame_equal(a, b)


def test_item_components() -> None:
    g = item_components(np.array([0, 1, 3]), np.array([1, 2, 4]), 6)
    assert g.labels.tolist() == [0, 0, 0, 1, 1, 2]


def test_agent_graph_checks() -> None:
    edges = pd.DataFrame(
        {"source": ["a", "b", "b", "c", "x"], "target": ["b", "a", "c", "d", "y"], "weight": [1.0, 2.0, 0.0, 1.0, 1.0]}
    )
    rep = agent_graph_report(edges, ["a", "b", "c", "d", "e"])
    assert not rep.ok
    assert rep.asymmetric[["source", "target"]].values.tolist() == [["a", "b"]]
    assert rep.nonpositive_weights["weight"].tolist() == [0.0]
    assert rep.unknown_agents == ["x", "y"]
    assert rep.agents_without_edges == ["e"]
    assert rep.n_components == 2
    good = agent_graph_report(
        pd.DataFrame({"source": ["a", "b"], "target": ["b", "c"], "weight": [1.0, 0.5]}), ["a", "b", "c"]
    )
    assert good.ok


@pytest.mark.parametrize("seed", range(6))
def test_distinct_partners_bit_matrix_and_markers_count_the_same_partners(seed: int) -> None:
    """The two counts of distinct co-labellers (a W × W bit matrix up to ``BITSET_WORKERS``, markers above) against
    a brute force with sets, on drawn label sets: workers with no task, one-label tasks, word boundaries (W = 63,
    64, 65, 129)."""
    from crowdflow.graphs import parity

    rng = np.random.default_rng(seed)
    for n_workers in (1, 63, 64, 65, 129, int(rng.integers(2, 400))):
        n_tasks = int(rng.integers(0, 300))
        k = rng.integers(0, min(n_workers, 9) + 1, n_tasks)
        indptr = np.concatenate([[0], np.cumsum(k)]).astype(np.int64)
        members = [rng.choice(n_workers, kk, replace=False) for kk in k]
        workers = np.concatenate(members).astype(np.int64) if n_tasks else np.zeros(0, np.int64)
        partners: list[set[int]] = [set() for _ in range(n_workers)]
        for group in members:
            for i in group:
                partners[int(i)].update(int(v) for v in group if v != i)
        truth = np.array([len(p) for p in partners], dtype=np.int64)
        bits = parity._distinct_partners_bits(indptr, workers, n_workers)
        marks = parity._distinct_partners(indptr, workers, n_workers)
        np.testing.assert_array_equal(bits, truth)
        np.testing.assert_array_equal(marks, truth)
        np.testing.assert_array_equal(parity.distinct_partners(indptr, workers.astype(np.int32), n_workers), truth)
