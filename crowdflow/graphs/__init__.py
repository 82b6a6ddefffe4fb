"""Interaction graphs and the identifiability checks run before any fit.

- Worker interaction graph (labels): workers i, j are adjacent iff they labelled a common task
  (N = B Bᵀ with the diagonal zeroed). Single-coin skills are identifiable on a component iff it is
  not bipartite (docs/methods/skills.md §3.1–3.2); an isolated worker has no partner at all. The check
  never forms a worker pair (:mod:`crowdflow.graphs.parity`, a parity union-find over the labels); the pairs
  themselves (:mod:`crowdflow.graphs.pairs`) are for rank-one PGD and the pair statistics only.
- Comparison graph (pairwise data): global scores are comparable only within a connected
  component (docs/methods/ranking.md §5.1); :func:`item_components` here, the check's report in
  :mod:`crowdflow.comparison_graphs`.
- Agent graph (personal models): must be connected with positive, symmetric weights
  (docs/methods/personal_models.md §3.2).

Modules: :mod:`~crowdflow.graphs.structure` (components, bipartiteness and BFS forests of sparse graphs),
:mod:`~crowdflow.graphs.pairs` (co-label and agreement counts), :mod:`~crowdflow.graphs.parity` (the pair-free
union-find), :mod:`~crowdflow.graphs.workers` (the worker-graph report), :mod:`~crowdflow.graphs.agents`.
"""

from __future__ import annotations

from crowdflow.graphs.agents import AgentGraphReport, agent_graph_problems, agent_graph_report
from crowdflow.graphs.pairs import (
    co_label_counts,
    labels_by_task,
    pair_bound,
    pair_counts,
    pair_counts_reference,
)
from crowdflow.graphs.parity import ParityForest, distinct_partners, worker_strength
from crowdflow.graphs.structure import (
    Components,
    GraphStructure,
    components,
    graph_structure,
    graph_structure_reference,
    item_components,
    restrict_to,
    without_diagonal,
)
from crowdflow.graphs.workers import (
    WorkerGraphReport,
    describe_failures,
    worker_graph_from_components,
    worker_graph_from_counts,
    worker_graph_from_forest,
    worker_graph_report,
    worker_graph_report_pairs,
)

__all__ = [
    "AgentGraphReport",
    "Components",
    "GraphStructure",
    "ParityForest",
    "WorkerGraphReport",
    "agent_graph_problems",
    "agent_graph_report",
    "co_label_counts",
    "components",
    "describe_failures",
    "distinct_partners",
    "graph_structure",
    "graph_structure_reference",
    "item_components",
    "labels_by_task",
    "pair_bound",
    "pair_counts",
    "pair_counts_reference",
    "restrict_to",
    "without_diagonal",
    "worker_graph_from_components",
    "worker_graph_from_counts",
    "worker_graph_from_forest",
    "worker_graph_report",
    "worker_graph_report_pairs",
    "worker_strength",
]
