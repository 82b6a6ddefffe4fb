"""The agent similarity graph of personal models: connectivity, positive and symmetric weights.

docs/methods/personal_models.md §3.2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from crowdflow._typing import SparseMatrix
from crowdflow.graphs.structure import components


def _symmetric_pattern(adj: SparseMatrix) -> sp.csr_matrix:
    a = sp.csr_matrix(adj, copy=True)
    a.setdiag(0)
    a.eliminate_zeros()
    # scipy-stubs leave sparse `!=` as object.__ne__ (bool); at runtime it is elementwise
    nz: Any = a
    a = ((nz != 0) + (nz.T != 0)).astype(np.int8)
    return sp.csr_matrix(a)


@dataclass(frozen=True)
class AgentGraphReport:
    """Checks on the agent similarity graph (personal models).

    Attributes
    ----------
    n_agents, n_components : int
    nonpositive_weights : pandas.DataFrame
        Edge rows (source, target, weight) with weight <= 0 or not finite.
    asymmetric : pandas.DataFrame
        source, target, weight, reverse_weight where both directions are given with different weights.
    agents_without_edges : list of str
    unknown_agents : list of str
        Edge endpoints missing from the agents table.
    """

    n_agents: int
    n_components: int
    nonpositive_weights: pd.DataFrame
    asymmetric: pd.DataFrame
    agents_without_edges: list[str]
    unknown_agents: list[str]

    @property
    def ok(self) -> bool:
        return (
            self.n_components == 1
            and self.nonpositive_weights.empty
            and self.asymmetric.empty
            and not self.unknown_agents
        )


def agent_graph_report(edges: pd.DataFrame, agents: list[str] | np.ndarray) -> AgentGraphReport:
    """Connectivity, positivity and symmetry of an undirected weighted agent graph.

    An edge given in both directions must carry the same weight; an edge given once is read as
    undirected.

    Parameters
    ----------
    edges : pandas.DataFrame
        Columns ``source, target, weight``.
    agents : array-like of str
        All agent ids.
    """
    agents_arr = np.asarray(sorted({str(a) for a in agents}), dtype=object)
    src = edges["source"].astype(str).to_numpy()
    dst = edges["target"].astype(str).to_numpy()
    w = pd.to_numeric(edges["weight"], errors="coerce").to_numpy(dtype=np.float64)
    bad_w = ~np.isfinite(w) | (w <= 0)
    nonpos = edges.loc[bad_w, ["source", "target", "weight"]]
    known = set(agents_arr.tolist())
    unknown = sorted((set(src.tolist()) | set(dst.tolist())) - known)
    e = pd.DataFrame({"source": src, "target": dst, "weight": w})
    rev = e.rename(columns={"source": "target", "target": "source", "weight": "reverse_weight"})
    both = e.merge(rev, on=["source", "target"], how="inner")
    asym = both[~np.isclose(both["weight"], both["reverse_weight"], rtol=1e-12, atol=0)]
    asym = asym[asym["source"] < asym["target"]].reset_index(drop=True)
    index = pd.Index(agents_arr)
    idx = index.get_indexer(src)
    jdx = index.get_indexer(dst)
    ok = (idx >= 0) & (jdx >= 0) & (idx != jdx)
    n = agents_arr.size
    adj = sp.csr_matrix((np.ones(int(ok.sum())), (idx[ok], jdx[ok])), shape=(n, n))
    g = components(adj)
    deg = np.diff(_symmetric_pattern(adj).indptr)
    return AgentGraphReport(
        n_agents=int(n),
        n_components=int(g.n_components),
        nonpositive_weights=nonpos.reset_index(drop=True),
        asymmetric=asym,
        agents_without_edges=agents_arr[deg == 0].astype(str).tolist(),
        unknown_agents=unknown,
    )


def agent_graph_problems(report: AgentGraphReport, require_connected: bool = True) -> list[str]:
    """Human-readable blocking problems of an agent graph (empty list: the graph is usable).

    Non-positive or non-finite weights, asymmetric weights and unknown endpoints are always problems;
    more than one connected component is one when ``require_connected``.
    """
    problems = []
    if not report.nonpositive_weights.empty:
        problems.append(f"{len(report.nonpositive_weights)} edges with weight <= 0 or not finite")
    if not report.asymmetric.empty:
        pairs = ", ".join(f"({r.source},{r.target})" for r in report.asymmetric.head(5).itertuples(index=False))
        problems.append(f"{len(report.asymmetric)} edges given in both directions with different weights: {pairs}")
    if report.unknown_agents:
        problems.append(f"edges name agents missing from the agents table: {report.unknown_agents[:10]}")
    if require_connected and report.n_components > 1:
        problems.append(
            f"the agent graph has {report.n_components} connected components "
            f"(agents without edges: {report.agents_without_edges[:10]})"
        )
    return problems
