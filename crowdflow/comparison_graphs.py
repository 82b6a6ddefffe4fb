"""The comparison-graph check's report: components of the item graph and of the annotator–item graph.

Items are adjacent iff compared at least once; global scores are comparable only within a connected component
of that graph (docs/methods/ranking.md §5.1). A personalised model needs the bipartite annotator–item graph
connected instead (docs/methods/personal_rankings.md §1.3). The report lists, per item, its component, its
comparisons and its distinct annotators, and per component its size, its comparisons and its first item ids.

The report is computed on integer codes (:func:`comparison_graph_report_from_codes`): from a table
(:func:`comparison_graph_report`: one hash pass per id column) or from codes a caller already holds (the ranking
flow passes those of the comparison graph its fit uses, so the table is encoded once per run). Whatever order the
codes come in, items are numbered in the lexicographic order of their ids and components by their smallest item
in that order, so both ways give the same report. :func:`comparison_graph_report_reference` is the plain
per-row version kept as the reference of the coded one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from crowdflow.contracts.comparisons import describe_positions, text_ids
from crowdflow.graphs import item_components

__all__ = [
    "ComparisonGraphReport",
    "comparison_graph_report",
    "comparison_graph_report_from_codes",
    "comparison_graph_report_reference",
]


@dataclass(frozen=True)
class ComparisonGraphReport:
    """Connectivity of pairwise-comparison data.

    Attributes
    ----------
    items : pandas.DataFrame
        item, component, n_comparisons, n_annotators — component of the item graph (items adjacent iff
        compared at least once); global scores are comparable only within a component.
    components : pandas.DataFrame
        component, n_items, n_comparisons, items (first 20 ids).
    n_user_item_components : int
        Components of the bipartite annotator–item graph (the aggregate graph a personalised model needs
        connected: docs/methods/personal_rankings.md §1.3).
    """

    items: pd.DataFrame
    components: pd.DataFrame
    n_user_item_components: int

    @property
    def n_components(self) -> int:
        return len(self.components)


def comparison_graph_report(comparisons: pd.DataFrame, max_listed: int = 20) -> ComparisonGraphReport:
    """Components of the item comparison graph and of the annotator–item graph, from a comparison table.

    Ids are compared as text (``7`` and ``"7"`` are one id, :func:`crowdflow.contracts.comparisons.text_ids`); each id
    column is hashed once, only the distinct ids are handled in Python.

    Parameters
    ----------
    comparisons : pandas.DataFrame
        Columns ``annotator, item_a, item_b``. A missing annotator names nobody (the row still joins its items).
    max_listed : int
        How many item ids to list per component.

    Raises
    ------
    ValueError
        A missing item id (no item to place in the graph), naming the rows.
    """
    m = len(comparisons)
    ids = text_ids(pd.concat([comparisons["item_a"], comparisons["item_b"]], ignore_index=True))
    na = ids.isna().to_numpy()
    if na.any():
        col = "item_a" if na[:m].any() else "item_b"
        where = na[:m] if col == "item_a" else na[m:]
        raise ValueError(f"column '{col}': {describe_positions(where)} have a missing item id")
    codes, items = pd.factorize(ids)
    users, _ = pd.factorize(text_ids(comparisons["annotator"]))
    return comparison_graph_report_from_codes(
        codes[:m], codes[m:], np.asarray(items, dtype=object), users, max_listed=max_listed
    )


def comparison_graph_report_from_codes(
    item_a: np.ndarray,
    item_b: np.ndarray,
    items: np.ndarray,
    annotator: np.ndarray,
    max_listed: int = 20,
    component: np.ndarray | None = None,
) -> ComparisonGraphReport:
    """The report of :func:`comparison_graph_report` from integer codes (no id is hashed again).

    The distinct item pairs and the distinct (item, annotator) pairs are found on integer keys (a marker array
    when the key range is small, else a sort), the two graphs are assembled in CSR order directly and their
    components found by ``scipy.sparse.csgraph.connected_components``: O(m) work for m rows, plus a sort of the
    n distinct ids.

    Parameters
    ----------
    item_a, item_b : numpy.ndarray
        (m,) codes into ``items`` of the two items of every comparison.
    items : numpy.ndarray
        (n,) the distinct item ids (str), in any order; items never compared become their own component.
    annotator : numpy.ndarray
        (m,) annotator codes ``0 ≤ a < n_annotators`` (any numbering), ``-1`` where the row names no annotator.
    max_listed : int
        How many item ids to list per component.
    component : numpy.ndarray, optional
        (n,) component labels of the items (any numbering) when the caller has them already (the comparison
        graph of a fit); default: computed here.

    Returns
    -------
    ComparisonGraphReport
        Items in the lexicographic order of their ids; components numbered by their smallest item in that order;
        ``n_annotators`` = distinct annotators per item; ``n_user_item_components`` = components of the graph
        joining each annotator to the items it compared.
    """
    names = np.array([str(x) for x in np.asarray(items, dtype=object)], dtype=object)
    n = names.size
    order = np.argsort(names, kind="stable")  # the report's item numbering: ids in lexicographic order (as str)
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n, dtype=np.int64)
    ia, ib = position[np.asarray(item_a, dtype=np.int64)], position[np.asarray(item_b, dtype=np.int64)]
    sorted_items = pd.Index(names[order])
    if component is None:
        pairs = _distinct(np.minimum(ia, ib) * n + np.maximum(ia, ib), n * n)
        n_comp, found = connected_components(_csr_from_sorted_keys(pairs, n, n), directed=False)
        raw = np.asarray(found, dtype=np.int64)
    else:
        raw = np.asarray(component, dtype=np.int64)[order]
        n_comp = int(raw.max()) + 1 if n else 0
    labels = _number_by_first(raw, int(n_comp))
    sizes = np.bincount(labels, minlength=int(n_comp))
    n_cmp = np.bincount(ia, minlength=n) + np.bincount(ib, minlength=n)
    ann = np.asarray(annotator, dtype=np.int64)
    known = ann >= 0
    n_u = int(ann.max()) + 1 if known.any() else 0
    seen_keys = _distinct(
        np.concatenate([ia[known], ib[known]]) * n_u + np.concatenate([ann[known], ann[known]]), n * n_u
    )
    seen = _csr_from_sorted_keys(seen_keys, n, n_u)  # item × annotator, one entry per distinct pair
    item_table = pd.DataFrame(
        {
            "item": sorted_items.astype(str),
            "component": labels,
            "n_comparisons": n_cmp.astype(np.int64),
            "n_annotators": np.diff(seen.indptr).astype(np.int64),
        }
    )
    comp_cmp = np.bincount(labels[ia], minlength=int(n_comp))
    by_comp = np.argsort(labels, kind="stable")
    starts = np.searchsorted(labels[by_comp], np.arange(n_comp))
    listed = [
        ",".join(sorted_items[by_comp[s : s + min(int(sz), max_listed)]].astype(str))
        for s, sz in zip(starts, sizes, strict=True)
    ]
    comps = pd.DataFrame(
        {
            "component": np.arange(n_comp, dtype=np.int64),
            "n_items": sizes.astype(np.int64),
            "n_comparisons": comp_cmp.astype(np.int64),
            "items": listed,
        }
    )
    # annotator–item graph: items 0..n-1, annotators n..n+n_u-1; an edge per (item, annotator) seen
    bip = sp.csr_matrix(
        (seen.data, seen.indices + n, np.r_[seen.indptr, np.full(n_u, seen.indptr[-1])]), shape=(n + n_u, n + n_u)
    )
    n_ui, _ = connected_components(bip, directed=False)
    return ComparisonGraphReport(items=item_table, components=comps, n_user_item_components=int(n_ui))


def _distinct(key: np.ndarray, bound: int) -> np.ndarray:
    """The distinct values of ``key`` (all in ``[0, bound)``), sorted: a marker array when ``bound`` is small."""
    if bound <= 8 * key.size + (1 << 20):
        mark = np.zeros(bound, dtype=bool)
        mark[key] = True
        return np.flatnonzero(mark)
    return np.unique(key)


def _csr_from_sorted_keys(keys: np.ndarray, n_rows: int, n_cols: int) -> sp.csr_matrix:
    """The 0/1 matrix with an entry at ``(k // n_cols, k % n_cols)`` per sorted distinct key: CSR without a sort."""
    rows = keys // max(n_cols, 1)
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n_rows), out=indptr[1:])
    cols = keys - rows * n_cols
    return sp.csr_matrix((np.ones(keys.size, dtype=np.int8), cols, indptr), shape=(n_rows, n_cols))


def _number_by_first(labels: np.ndarray, n_comp: int) -> np.ndarray:
    """Component labels renumbered 0.. in the order of each component's smallest node."""
    first = np.full(n_comp, labels.size, dtype=np.int64)
    np.minimum.at(first, labels, np.arange(labels.size, dtype=np.int64))
    new = np.empty(n_comp, dtype=np.int64)
    new[np.argsort(first, kind="stable")] = np.arange(n_comp, dtype=np.int64)
    out: np.ndarray = new[labels]
    return out


def comparison_graph_report_reference(comparisons: pd.DataFrame, max_listed: int = 20) -> ComparisonGraphReport:
    """The report of :func:`comparison_graph_report` computed row by row on Python strings (the reference).

    Every id is written with ``str``; the distinct (item, annotator) pairs are found by dropping duplicate rows.
    Needs every id present (a missing annotator is one more annotator here, which the coded version ignores).
    """
    a = comparisons["item_a"].astype(str).to_numpy()
    b = comparisons["item_b"].astype(str).to_numpy()
    users = comparisons["annotator"].astype(str).to_numpy()
    items = pd.Index(np.unique(np.concatenate([a, b])))
    ia, ib = items.get_indexer(a), items.get_indexer(b)
    g = item_components(ia, ib, len(items))
    n_cmp = np.bincount(ia, minlength=len(items)) + np.bincount(ib, minlength=len(items))
    pair_users = pd.DataFrame({"item": np.concatenate([ia, ib]), "user": np.concatenate([users, users])})
    n_ann = pair_users.drop_duplicates().groupby("item").size().reindex(range(len(items)), fill_value=0)
    item_table = pd.DataFrame(
        {
            "item": items.astype(str),
            "component": g.labels,
            "n_comparisons": n_cmp.astype(np.int64),
            "n_annotators": n_ann.to_numpy().astype(np.int64),
        }
    )
    comp_cmp = np.bincount(g.labels[ia], minlength=g.n_components)
    order = np.argsort(g.labels, kind="stable")
    starts = np.searchsorted(g.labels[order], np.arange(g.n_components))
    listed = [
        ",".join(items[order[s : s + min(int(sz), max_listed)]].astype(str))
        for s, sz in zip(starts, g.sizes, strict=True)
    ]
    comps = pd.DataFrame(
        {
            "component": np.arange(g.n_components, dtype=np.int64),
            "n_items": g.sizes.astype(np.int64),
            "n_comparisons": comp_cmp.astype(np.int64),
            "items": listed,
        }
    )
    uidx = pd.Index(np.unique(users)).get_indexer(pd.Index(users))
    n_u = int(uidx.max()) + 1 if uidx.size else 0
    rows = np.concatenate([uidx, uidx])
    cols = n_u + np.concatenate([ia, ib])
    size = n_u + len(items)
    bip = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(size, size))
    n_ui, _ = connected_components(bip, directed=False)
    return ComparisonGraphReport(items=item_table, components=comps, n_user_item_components=int(n_ui))
