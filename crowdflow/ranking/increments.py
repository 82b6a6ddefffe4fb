"""Per-file pair sums of a comparisons input and their fold: HodgeRank least squares that costs what is new (#38).

HodgeRank's scores ``θ̂ = L† XᵀW y`` (docs/methods/ranking.md §2.1) depend on the rows only through, per distinct
unordered pair ``e = {a, b}``, the weight ``w_e = Σ_k w_k`` and the weighted outcome ``s_e = Σ_k w_k y_k`` (rows
oriented ``a → b``): ``L = Σ_e w_e (e_a − e_b)(e_a − e_b)ᵀ`` and ``XᵀWy = Σ_e s_e (e_a − e_b)``. With the row
count ``n_e`` (the items' ``n_comparisons``) and ``q_e = Σ_k w_k y_k²`` (the residual sum of squares
``Σ_k w_k r_k² = q − 2 θ_abᵀ s + θ_ab² w`` per pair) they are the per-file statistic :func:`pair_sums` keeps.

The fold over files (:func:`fold_pairs`):

- **Exact** when every outcome and weight is an integer (wins/losses/ties, counts; |sums| < 2^53): float64 sums
  of integers are exact whatever the order, so adding the day's sums to the stored fold and subtracting those of
  deleted or replaced files gives the same numbers, bit for bit, as summing every row.
- **Canonical** otherwise: the fold is recomputed from the per-file sums (never the rows) in one order fixed by
  the files' content hashes, so two runs over the same files give the same bits whatever order the files
  arrived in or were replaced; against a fit over the rows it agrees to floating rounding (the rows' sums are
  added in another order), ~1e-12 relative.

:func:`hodgerank_from_pairs` (:mod:`crowdflow.ranking.folded`) solves the rows' normal equations from the sums:
the same Laplacian and the same right-hand side ``Σ_e S_e (e_lo − e_hi)`` (summed from ``S_e`` itself), so with
integer sums the same scores, bit for bit. The per-row ``residuals`` table of a full run is O(rows) by nature; a
folded run writes ``pair_residuals`` instead (``n, w, s, q``, the fitted difference and the pair's residual sum of
squares), which is O(pairs) and from which every row's residual is ``y_k − (θ_lo − θ_hi)`` on demand.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from crowdflow.contracts.missing import reasons_as_text
from crowdflow.ranking.folded import FoldedFit, fit_pairs
from crowdflow.ranking.graph import build_comparison_graph
from crowdflow.ranking.options import RankingOptions
from crowdflow.storage.increment_inputs import folded_input
from crowdflow.storage.increments import SumsRule

__all__ = [
    "PAIR_COLUMNS",
    "PAIR_SUMS",
    "FoldedPairs",
    "FoldedRanking",
    "fold_pairs",
    "hodgerank_from_pairs",
    "hodgerank_run",
    "is_integral",
    "pair_sums",
]

#: one file's stored pair sums: pair (lo < hi as text), rows, Σw, Σw·y (lo → hi), Σw·y²
PAIR_COLUMNS = ("lo", "hi", "n", "w", "s", "q")
_EXACT = 2.0**53


def pair_sums(comparisons: pd.DataFrame) -> pd.DataFrame:
    """The per-pair sums of one file's comparisons (any layout the ranking job reads), sorted by ``(lo, hi)``.

    The rows are read exactly as a full fit reads them (:func:`~crowdflow.ranking.graph.build_comparison_graph`:
    winner form, ties, weights, the same checks); each row is oriented from the pair's first item in text order.
    """
    if len(comparisons) == 0:  # an empty file adds nothing (a full read skips its rows)
        return _combine([])
    g = build_comparison_graph(comparisons)
    items = np.asarray(g.items, dtype=object).astype(str)
    rank = np.empty(items.size, dtype=np.int64)
    rank[np.argsort(items, kind="stable")] = np.arange(items.size)  # text order of the file's items
    flip = rank[g.i] > rank[g.j]
    lo = np.where(flip, g.j, g.i)
    hi = np.where(flip, g.i, g.j)
    y = np.where(flip, -g.y, g.y)
    keys, inv = np.unique(lo * np.int64(items.size) + hi, return_inverse=True)  # one code per distinct pair
    k = keys.size
    n = np.bincount(inv, minlength=k).astype(np.int64)
    w = np.bincount(inv, weights=g.w, minlength=k)  # row order: the same bits on every run over this file
    sw = np.bincount(inv, weights=g.w * y, minlength=k)
    q = np.bincount(inv, weights=g.w * y * y, minlength=k)
    lo_u, hi_u = keys // items.size, keys % items.size
    order = np.lexsort((rank[hi_u], rank[lo_u]))
    lo_u, hi_u = lo_u[order], hi_u[order]
    return pd.DataFrame(
        {"lo": items[lo_u].astype(object), "hi": items[hi_u].astype(object), "n": n[order], "w": w[order],
         "s": sw[order], "q": q[order]}
    )  # fmt: skip


def is_integral(sums: pd.DataFrame) -> bool:
    """Every sum an integer below 2^53: float64 addition of such numbers is exact in any order."""
    v = sums[["w", "s", "q"]].to_numpy(dtype=np.float64)
    return bool(np.all(np.isfinite(v)) and np.all(v == np.rint(v)) and (np.abs(v).max(initial=0.0) < _EXACT / 4))


@dataclass(frozen=True)
class FoldedPairs:
    """Pair sums folded over every file of a dataset (columns :data:`PAIR_COLUMNS`, sorted by ``(lo, hi)``).

    ``exact``: every file's sums are integers, so the fold was (and may again be) updated by adding and subtracting
    files' sums; otherwise it is refolded from the per-file sums in the files' hash order.
    """

    table: pd.DataFrame
    exact: bool


def _combine(parts: Sequence[pd.DataFrame]) -> pd.DataFrame:
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame({c: pd.Series([], dtype=object if c in ("lo", "hi") else np.float64) for c in PAIR_COLUMNS})
    cat = pd.concat(parts, ignore_index=True)
    out = cat.groupby(["lo", "hi"], sort=True).sum().reset_index()
    out["n"] = out["n"].astype(np.int64)
    return out[out["n"] > 0].reset_index(drop=True)[list(PAIR_COLUMNS)]


def _negate(df: pd.DataFrame) -> pd.DataFrame:
    return df.assign(n=-df["n"], w=-df["w"], s=-df["s"], q=-df["q"])


def fold_pairs(
    files: Mapping[str, pd.DataFrame],
    base: FoldedPairs | None = None,
    add: Sequence[str] = (),
    remove: Sequence[pd.DataFrame] = (),
) -> FoldedPairs:
    """The fold of the per-file pair sums ``files`` (content sha256 → :func:`pair_sums`) the dataset holds now.

    With ``base`` (the previous fold), ``add`` (the hashes in ``files`` read now) and ``remove`` (the sums of
    files no longer in the dataset) and every sum integral, the fold is ``base + Σ add − Σ remove`` (exact);
    else it is refolded from ``files`` in hash order (canonical).
    """
    exact = all(is_integral(files[h]) for h in files) and all(is_integral(r) for r in remove)
    if base is not None and base.exact and exact:
        table = _combine([base.table, *(files[h] for h in add), *(_negate(r) for r in remove)])
    else:
        table = _combine([files[h] for h in sorted(files)])
    return FoldedPairs(table, exact)


def hodgerank_from_pairs(folded: FoldedPairs | pd.DataFrame, options: RankingOptions | None = None) -> FoldedFit:
    """HodgeRank least squares on the folded pair sums (``outliers: none``): :func:`crowdflow.ranking.folded.fit_pairs`.

    The ``ranking`` table is a fit over the rows' table (bit for bit when the sums are integers); ``pair_residuals``
    (``lo, hi, component, n, w, s, q, fitted, rss``, O(pairs)) replaces the per-row ``residuals``; ``components``
    holds the Hodge diagnostics restored from the sums (the per-row residual quantiles excepted).
    """
    table = folded.table if isinstance(folded, FoldedPairs) else folded
    return fit_pairs(table, options)


def fold_digest(files: Sequence[str]) -> str:
    """The identity of a fold: the sorted content hashes of the files it sums."""
    h = hashlib.sha256()
    for sha in sorted(files):
        h.update(sha.encode())
    return h.hexdigest()


def _update(fold: pd.DataFrame, add: Sequence[pd.DataFrame], remove: Sequence[pd.DataFrame]) -> pd.DataFrame:
    return _combine([fold, *add, *(_negate(r) for r in remove)])


#: the increment store's rule for a comparisons input: per-pair sums (exact when integral, else canonical refold)
PAIR_SUMS = SumsRule("pair_sums", pair_sums, is_integral, _update, _combine)


@dataclass(frozen=True)
class FoldedRanking:
    """What :func:`hodgerank_run` computed: the fit on the folded pair sums and the input's account."""

    result: FoldedFit
    input: dict[str, Any]


def hodgerank_run(
    store: str | os.PathLike[str],
    source: str | os.PathLike[str],
    options: RankingOptions | None = None,
    *,
    columns: Mapping[str, str] | None = None,
    refresh: Sequence[str] = (),
    run_id: str | None = None,
    out: str | os.PathLike[str] | None = None,
) -> FoldedRanking:
    """HodgeRank least squares over every file of ``source``, reading only the files the store has not seen.

    The fold of the per-pair sums (:data:`PAIR_SUMS`) is updated under the store's lock, the scores fitted on it
    (:func:`hodgerank_from_pairs`), the ``ranking`` table written to ``out`` when given, then the state committed.
    """
    with folded_input(store, source, "comparisons", PAIR_SUMS, columns, refresh, run_id) as got:
        assert got.fold is not None
        res = hodgerank_from_pairs(got.fold.table, options)
        if out is not None:
            path = Path(out)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            pq.write_table(reasons_as_text(pa.Table.from_pandas(res.ranking, preserve_index=False)), tmp)
            os.replace(tmp, path)
    return FoldedRanking(res, got.record())
