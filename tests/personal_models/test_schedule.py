"""Vertex-disjoint batches of an activation sequence (crowdflow.personal_models.schedule).

``matching_batches`` must split an activation sequence into matchings whose in-order application is
the sequence itself (docs/methods/personal_models.md §6.1).
"""

from __future__ import annotations

import numpy as np

from crowdflow.personal_models import (
    matching_batches,
)


def _levels_by_recursion(seq, u, v, n):
    last = [0] * n
    out = []
    for e in seq.tolist():
        lv = max(last[u[e]], last[v[e]]) + 1
        last[u[e]] = last[v[e]] = lv
        out.append(lv)
    return np.asarray(out)


def _star_and_path():
    # a hub agent (every round conflicts) and a path (long dependency chains)
    star_u, star_v = np.zeros(9, dtype=np.int64), np.arange(1, 10)
    path_u, path_v = np.arange(9), np.arange(1, 10)
    return [(star_u, star_v), (path_u, path_v)]


def test_matching_batches_are_matchings_in_sequence_order(scaled):
    _inst, prob, _ref = scaled
    g = prob.graph
    cases = [(g.u, g.v, g.n, np.random.default_rng(0).integers(0, g.n_edges, 5 * g.n_edges))]
    for u, v in _star_and_path():
        cases.append((u, v, 10, np.random.default_rng(1).integers(0, u.size, 300)))
    for u, v, n, seq in cases:
        batches = matching_batches(seq, u, v)
        pos = np.concatenate(batches)
        assert np.array_equal(np.sort(pos), np.arange(seq.size))  # every round exactly once
        level = np.empty(seq.size, dtype=np.int64)
        for q, b in enumerate(batches, start=1):
            assert np.all(np.diff(b) > 0)
            ends = np.concatenate([u[seq[b]], v[seq[b]]])
            assert np.unique(ends).size == ends.size  # a matching
            level[b] = q
        np.testing.assert_array_equal(level, _levels_by_recursion(seq, u, v, n))
        # every agent receives its rounds in the original order
        for x in range(min(n, 50)):
            touching = np.flatnonzero((u[seq] == x) | (v[seq] == x))
            assert np.all(np.diff(level[touching]) > 0)
    assert matching_batches(np.zeros(0, dtype=np.int64), g.u, g.v) == []
    # on the field graph the batches are large: far fewer batches than rounds
    assert len(matching_batches(cases[0][3], g.u, g.v)) < cases[0][3].size / 20
