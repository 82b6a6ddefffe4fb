"""The worker interaction graph's identifiability report (components, bipartiteness, isolated workers).

docs/methods/skills.md §3.2. :func:`worker_graph_report` never forms a worker pair: the components and their
bipartiteness come from the parity union-find over the labels (:mod:`crowdflow.graphs.parity`), ``n_partners``
from a marker pass. :func:`worker_graph_report_pairs` builds the same tables from N (the reference, and the form
of a partitioned run that sums N for PGD).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from crowdflow.graphs.pairs import co_label_counts, labels_by_task
from crowdflow.graphs.parity import ParityForest, distinct_partners
from crowdflow.graphs.structure import Components, graph_structure
from crowdflow.labels import LabelMatrix, id_text, text_column


@dataclass(frozen=True)
class WorkerGraphReport:
    """Identifiability of the worker interaction graph.

    Attributes
    ----------
    workers : pandas.DataFrame
        worker, component, n_labels, n_partners, status (``ok`` | ``bipartite_component`` |
        ``isolated``).
    components : pandas.DataFrame
        component, n_workers, n_edges, n_labels, bipartite, colour_sizes, status, workers (first 20 ids).
    co_labels : scipy.sparse.csr_matrix or None
        N (see :func:`~crowdflow.graphs.pairs.co_label_counts`) when the report was built from it
        (:func:`worker_graph_report_pairs`, :func:`worker_graph_from_counts`); None when it was built without
        pairs (:func:`worker_graph_report`, :func:`worker_graph_from_forest`).
    graph : Components
    """

    workers: pd.DataFrame
    components: pd.DataFrame
    co_labels: sp.csr_matrix | None
    graph: Components

    @property
    def failing(self) -> pd.DataFrame:
        """Components whose status is not ``ok``."""
        return self.components[self.components["status"] != "ok"]


def worker_graph_report(lm: LabelMatrix, max_listed: int = 20) -> WorkerGraphReport:
    """Components, bipartiteness and isolated workers of the worker interaction graph, without forming a pair.

    docs/methods/skills.md §3.2: a component is ``ok`` iff it contains an odd cycle; a bipartite
    component (a single edge, a tree, an even cycle…) does not identify its skills; a worker with no
    co-labeller is ``isolated``. The components come from one parity union-find pass over the labels
    (:class:`~crowdflow.graphs.parity.ParityForest`: O(workers) memory), ``n_partners`` from a marker pass
    (:func:`~crowdflow.graphs.parity.distinct_partners`); the tables equal :func:`worker_graph_report_pairs`'s
    (``tests/test_worker_parity.py``), ``co_labels`` is None.

    Parameters
    ----------
    lm : LabelMatrix
    max_listed : int
        How many worker ids to list per component.
    """
    indptr, w, _ = labels_by_task(lm)
    g = ParityForest.from_labels(indptr, w, lm.n_workers).components()
    partners = distinct_partners(indptr, w, lm.n_workers)
    return worker_graph_from_components(g, partners, lm.labels_per_worker(), lm.workers, max_listed)


def worker_graph_report_pairs(lm: LabelMatrix, max_listed: int = 20) -> WorkerGraphReport:
    """:func:`worker_graph_report` from the co-label matrix N (O(worker pairs) memory; the reference, and N kept)."""
    return worker_graph_from_counts(co_label_counts(lm), lm.labels_per_worker(), lm.workers, max_listed)


def worker_graph_from_forest(
    forest: ParityForest, n_labels: np.ndarray, worker_ids: Any, max_listed: int = 20
) -> WorkerGraphReport:
    """The report of a partitioned run from its merged bucket forests (no pair, no label in the flow).

    ``n_partners`` (distinct co-labellers) is not a sum over task buckets, so it is missing here (NaN; the
    components' ``n_edges`` with it); docs/scale.md.
    """
    g = forest.components()
    return worker_graph_from_components(g, np.full(g.labels.size, np.nan), n_labels, worker_ids, max_listed)


def worker_graph_from_counts(
    n: sp.csr_matrix, n_labels: np.ndarray, worker_ids: Any, max_listed: int = 20
) -> WorkerGraphReport:
    """:func:`worker_graph_report` from N (symmetric CSR, zero diagonal), the labels per worker and the worker ids.

    The form a partitioned run uses: N is a sum over partitions that hold whole tasks, so no process holds the
    labels (docs/scale.md).
    """
    g = graph_structure(n, symmetric=True).graph  # N is symmetric with zero diagonal: no symmetrisation
    return worker_graph_from_components(g, np.diff(n.indptr), n_labels, worker_ids, max_listed, co_labels=n)


def worker_graph_from_components(
    g: Components,
    n_partners: np.ndarray,
    n_labels: np.ndarray,
    worker_ids: Any,
    max_listed: int = 20,
    co_labels: sp.csr_matrix | None = None,
) -> WorkerGraphReport:
    """The report's tables from the worker graph's components and each worker's number of distinct partners.

    One place for the tables whether the components come from N (:func:`worker_graph_from_counts`) or from
    the parity union-find over the labels that never forms a pair (:func:`worker_graph_report`). ``n_partners``
    all NaN (a partitioned run without pairs) leaves it and ``n_edges`` missing (float NaN).
    """
    known = bool(np.all(np.isfinite(n_partners)))
    comp_status = np.where(g.bipartite, "bipartite_component", "ok").astype(object)
    comp_status[(g.sizes == 1)] = "isolated"
    worker_status = comp_status[g.labels]
    # column by column (issue #36, docs/scale.md memory laws): the text columns go to Arrow straight from the ids and
    # statuses, and each number column is one fresh array the table owns (no 2-D block assembled from copies)
    workers = pd.DataFrame(
        {
            "worker": text_column(worker_ids),
            "component": g.labels.astype(np.int64, copy=True),
            "n_labels": n_labels.astype(np.int64, copy=True),
            "n_partners": n_partners.astype(np.int64 if known else np.float64, copy=True),
            "status": text_column(worker_status),
        },
        copy=False,
    )
    edges_per_comp = np.bincount(g.labels, weights=n_partners, minlength=g.n_components) / 2
    edges = edges_per_comp.astype(np.int64) if known else np.full(g.n_components, np.nan)
    labels_per_comp = np.bincount(g.labels, weights=n_labels, minlength=g.n_components)
    colour1 = np.bincount(g.labels, weights=g.colour, minlength=g.n_components).astype(np.int64)
    order = np.argsort(g.labels, kind="stable")
    starts = np.searchsorted(g.labels[order], np.arange(g.n_components))
    # the listed workers' text, at most ``max_listed`` a component, taken at once (the ids may be Arrow strings: no
    # Python ``str`` for the workers not listed)
    shown = np.minimum(g.sizes.astype(np.int64), max_listed)
    at = np.repeat(starts - np.cumsum(shown) + shown, shown) + np.arange(int(shown.sum()))
    text = id_text(worker_ids, order[at])
    ends = np.cumsum(shown)
    listed = [text[e - k : e] for e, k in zip(ends.tolist(), shown.tolist(), strict=True)]
    colour_sizes = [
        f"{int(sz - c1)}/{int(c1)}" if bip else "" for sz, c1, bip in zip(g.sizes, colour1, g.bipartite, strict=True)
    ]
    comps = pd.DataFrame(
        {
            "component": np.arange(g.n_components, dtype=np.int64),
            "n_workers": g.sizes.astype(np.int64),
            "n_edges": edges,
            "n_labels": labels_per_comp.astype(np.int64),
            "bipartite": g.bipartite,
            "colour_sizes": colour_sizes,
            "status": comp_status.astype(str),
            "workers": [",".join(w) for w in listed],
        }
    )
    return WorkerGraphReport(workers=workers, components=comps, co_labels=co_labels, graph=g)


def describe_failures(
    report: WorkerGraphReport,
    statuses: tuple[str, ...] = ("bipartite_component", "isolated"),
    limit: int = 10,
) -> str:
    """One human-readable line per failing component (id, status, size, colour classes, workers).

    Parameters
    ----------
    report : WorkerGraphReport
    statuses : tuple of str
        Which component statuses to describe.
    limit : int
        At most this many lines, then a count of the rest.
    """
    lines = []
    failing = report.components[report.components["status"].isin(statuses)]
    row: Any  # itertuples rows: namedtuples of the report's columns
    for row in failing.head(limit).itertuples(index=False):
        more = row.n_workers - len(row.workers.split(",")) if row.workers else 0
        extra = f" (+{more} more)" if more > 0 else ""
        colours = f", colour classes {row.colour_sizes}" if row.status == "bipartite_component" else ""
        lines.append(
            f"component {row.component}: {row.status}, {row.n_workers} workers{colours}, "
            f"{row.n_labels} labels: [{row.workers}]{extra}"
        )
    if len(failing) > limit:
        lines.append(f"... and {len(failing) - limit} more failing components")
    return "\n".join(lines)
