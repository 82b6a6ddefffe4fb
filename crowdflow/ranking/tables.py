"""The output tables of a fit: ranking, outliers, annotators, diagnostics and the sparse γ path.

:func:`assemble_robust_result` turns fit-level arrays (possibly on merged identical rows) into a
:class:`~crowdflow.ranking.types.RobustRankingResult`: γ, entry times and signs expanded back to the input
rows in their own orientation, the debiased refit without the flagged rows, per-annotator outlier rates and
the per-component Hodge diagnostics. Ranks count from 1 = best inside every connected component.

See docs/methods/ranking.md §7.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import scipy.sparse as sp

from crowdflow.contracts.comparisons import rename_comparison_aliases, text_ids
from crowdflow.contracts.missing import explain_missing
from crowdflow.ranking.encoding import arrow_strings
from crowdflow.ranking.graph import ComparisonGraph
from crowdflow.ranking.hodge import hodge_decomposition, undetectable_rows
from crowdflow.ranking.least_squares import refit_without
from crowdflow.ranking.rows import is_range
from crowdflow.ranking.types import GraphReport, RobustRankingResult, _rank_desc, _str, _str_take

__all__ = ["assemble_robust_result"]


def _finite_or_nan(x: np.ndarray) -> np.ndarray:
    """``x`` with ±inf (a time never reached) as NaN, the missing value of an output table."""
    return np.where(np.isfinite(x), x, np.nan)


def _ranking_table(g: ComparisonGraph, theta: np.ndarray, n_comparisons: np.ndarray | None = None) -> pd.DataFrame:
    """The ``ranking`` table; ``n_comparisons`` replaces the rows per item counted on ``g`` (edge-aggregated graphs)."""
    if n_comparisons is None:
        n_comp = (np.bincount(g.i, minlength=g.n) + np.bincount(g.j, minlength=g.n)).astype(np.int64)
    else:
        n_comp = np.asarray(n_comparisons, dtype=np.int64)
    df = pd.DataFrame(
        {
            "item": _str(g.items),
            "score": np.asarray(theta, dtype=np.float64),
            "component": g.component.astype(np.int64),
            "n_comparisons": n_comp,
        }
    )
    key = np.round(df["score"].to_numpy(), 12)
    df["rank"] = (
        pd.Series(key)
        .groupby(df["component"].to_numpy())
        .rank(method="min", ascending=False)
        .to_numpy()
        .astype(np.int64)
    )
    df = df.iloc[_ranking_order(g.items, df["component"].to_numpy(), df["rank"].to_numpy())].reset_index(drop=True)
    return df[["item", "score", "rank", "component", "n_comparisons"]]


def _ranking_order(items: np.ndarray, component: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """The row order of ``sort_values(["component", "rank", "item"])`` for distinct ``str`` items.

    The items' text order comes from Arrow's sort of their UTF-8 bytes (the order of their code points, as Python
    compares ``str``; 7 ms at 10^5 ids, where pandas' sort with a string key took 33-88 ms), then one ``lexsort``.
    (Ids that are not valid Unicode text, lone surrogates, fail here as they fail in pandas' sort, which also
    goes through Arrow.)
    """
    text = pa.array(np.asarray(items, dtype=object), type=pa.large_string())
    by_text = pc.sort_indices(text).to_numpy(zero_copy_only=False)
    text_rank = np.empty(by_text.size, dtype=np.int64)
    text_rank[by_text] = np.arange(by_text.size, dtype=np.int64)
    return np.lexsort((text_rank, rank, component))


def _annotator_table(annotator: np.ndarray, is_outlier: np.ndarray) -> pd.DataFrame:
    known = np.array([a is not None for a in annotator], dtype=bool)
    df = pd.DataFrame(
        {"annotator": np.asarray(annotator, dtype=object)[known], "o": is_outlier[known].astype(np.int64)}
    )
    agg = df.groupby("annotator", sort=True)["o"].agg(["size", "sum"]).reset_index()
    out = pd.DataFrame(
        {
            "annotator": _str(agg["annotator"].to_numpy(dtype=object)),
            "n_comparisons": agg["size"].to_numpy(dtype=np.int64),
            "n_outliers": agg["sum"].to_numpy(dtype=np.int64),
        }
    )
    out["outlier_rate"] = out["n_outliers"] / out["n_comparisons"]
    return out


def _annotator_column(annotator: np.ndarray, has_annotator: bool = True) -> pd.Series:
    """``text_ids`` of the annotator ids (hashed once, not one object per row); all-missing without hashing (and
    without reading them when ``has_annotator`` is False: a graph built without annotators)."""
    if not has_annotator or pd.isna(annotator).all():
        return pd.Series(pd.arrays.ArrowStringArray(pa.nulls(annotator.size, pa.large_string())), dtype="string")
    return text_ids(pd.Series(annotator, dtype=object))


def _source_ids(source: pd.DataFrame | None, col: str, g: ComparisonGraph, in_order: bool) -> pd.Series | None:
    """The id column ``col`` of the table ``g`` was built from, when it already is the output column.

    An Arrow string column without missing ids is its own text (:mod:`crowdflow.ranking.encoding`), so for a graph
    built from it row by row (``row_id`` = input position) ``items[i]`` is the column as it is: no gather of m
    strings (two Arrow takes of 10^7 strings cost ~1 s). ``in_order``: ``g.row_id`` is ``0, 1, …, m − 1``.
    """
    if source is None or len(source) != g.m or not in_order:
        return None
    layout = rename_comparison_aliases(source)
    if col not in layout.columns or "outcome" not in layout.columns:
        return None
    data = arrow_strings(layout[col])
    if data is None or data.null_count:
        return None
    return pd.Series(pd.arrays.ArrowStringArray(data.cast(pa.large_string())), dtype="string")


def _row_columns(g: ComparisonGraph, source: pd.DataFrame | None = None) -> dict[str, Any]:
    """The columns that identify each comparison row in the output tables (row id, who, which pair, outcome).

    ``source``: the comparisons table ``g`` was built from by :func:`build_comparison_graph`, if any (its Arrow
    string id columns are reused as they are). ``g`` is then the fit's own graph, whose row arrays are fresh and go
    nowhere else, so they become the columns without a copy (the residual table is built with ``copy=False``);
    a graph the caller handed in is copied.
    """
    owned = source is not None
    in_order = owned and g.row_id.dtype == np.int64 and is_range(g.row_id)
    item_a = _source_ids(source, "item_a", g, in_order)
    item_b = _source_ids(source, "item_b", g, in_order)
    ids = (
        None
        if item_a is not None and item_b is not None
        else pa.array(np.asarray(g.items, dtype=object), type=pa.large_string())
    )
    return {
        "row_id": g.row_id if owned and g.row_id.dtype == np.int64 else g.row_id.astype(np.int64),
        "annotator": _annotator_column(g.annotator, g.has_annotator),
        "item_a": _str_take(g.items, g.i, ids) if item_a is None else item_a,
        "item_b": _str_take(g.items, g.j, ids) if item_b is None else item_b,
        "outcome": g.y if owned else g.y.copy(),
        "weight": g.w if owned else g.w.copy(),
    }


def assemble_robust_result(
    *,
    method: str,
    g: ComparisonGraph,
    rep: GraphReport,
    gf: ComparisonGraph,
    group: np.ndarray,
    sign: np.ndarray,
    theta_ls: np.ndarray,
    theta_robust: np.ndarray,
    gamma_fit: np.ndarray,
    entry_time_fit: np.ndarray,
    order_key_fit: np.ndarray,
    entry_sign_fit: np.ndarray,
    trace: pd.DataFrame,
    checkpoints: Sequence[tuple[int, float, sp.csc_matrix | np.ndarray]],
    params: dict[str, Any],
    converged: bool,
    debias: bool,
    diagnostics: bool,
    solver_method: str = "auto",
) -> RobustRankingResult:
    """Build the output tables of a robust fit from fit-level (possibly grouped) arrays.

    Shared by :func:`crowdflow.ranking.fit.fit_hlasso` and :func:`crowdflow.ranking.fit.fit_lbi`.
    ``checkpoints`` is a list of ``(checkpoint id, t, γ_fit)``; γ values are expanded to rows with the
    orientation signs.
    """
    flagged_fit = gamma_fit != 0
    theta_deb = refit_without(gf, flagged_fit, theta_robust, solver_method=solver_method) if debias else theta_robust
    score = theta_deb if debias else theta_robust
    gamma = sign * gamma_fit[group]
    is_out = gamma != 0
    undet = undetectable_rows(g)
    fitted = score[g.i] - score[g.j]
    outl = pd.DataFrame(
        {
            **_row_columns(g),
            "gamma": gamma,
            "entry_time": _finite_or_nan(np.asarray(entry_time_fit, dtype=float)[group]),
            "entry_sign": (sign * np.asarray(entry_sign_fit, dtype=float)[group]).astype(np.int8),
            "path_rank": _rank_desc(np.asarray(order_key_fit, dtype=float)[group]),
            "is_outlier": is_out,
            "undetectable": undet,
            "residual": g.y - fitted,
        }
    )
    explain_missing(outl, ["entry_time"], "the row never entered the regularisation path (no outlier at any t)")
    scores = pd.DataFrame(
        {
            "item": _str(g.items),
            "component": g.component.astype(np.int64),
            "score_ls": theta_ls,
            "score_robust": theta_robust,
            "score_debiased": theta_deb,
        }
    )
    if diagnostics:
        diag = hodge_decomposition(g, theta_ls, undetectable=undet).table
    else:
        diag = pd.DataFrame({"component": np.arange(g.n_components, dtype=np.int64)})
    rcomp = g.component[g.i]
    diag["n_outliers"] = np.bincount(rcomp, weights=is_out, minlength=g.n_components).astype(np.int64)
    wc = np.bincount(rcomp, weights=g.w, minlength=g.n_components)
    with np.errstate(invalid="ignore", divide="ignore"):
        diag["outlier_weight_share"] = np.bincount(rcomp, weights=g.w * is_out, minlength=g.n_components) / wc
    explain_missing(diag, ["outlier_weight_share"], "no comparison rows in this component")
    frames = []
    for cid, t, gam_c in checkpoints:
        gcol = np.asarray(gam_c.toarray()).ravel() if sp.issparse(gam_c) else np.asarray(gam_c)
        grow = sign * gcol[group]
        nz = np.flatnonzero(grow)
        frames.append(
            pd.DataFrame(
                {
                    "checkpoint": np.full(nz.size, cid, dtype=np.int64),
                    "t": np.full(nz.size, float(t)),
                    "row_id": g.row_id[nz].astype(np.int64),
                    "gamma": grow[nz],
                }
            )
        )
    path = (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(
            {
                "checkpoint": pd.Series(dtype=np.int64),
                "t": pd.Series(dtype=float),
                "row_id": pd.Series(dtype=np.int64),
                "gamma": pd.Series(dtype=float),
            }
        )
    )
    params = dict(params)
    params.update(
        n_items=g.n,
        n_rows=g.m,
        n_fit_rows=gf.m,
        n_components=g.n_components,
        n_outliers=int(is_out.sum()),
        outlier_weight=float(g.w[is_out].sum()),
        debias=debias,
    )
    return RobustRankingResult(
        method=method,
        ranking=_ranking_table(g, score),
        scores=scores,
        outliers=outl,
        annotators=_annotator_table(g.annotator, is_out),
        diagnostics=diag,
        trace=trace,
        path=path,
        graph=rep,
        params=params,
        converged=bool(converged),
    )
