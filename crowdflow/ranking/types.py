"""Result types shared by the fitting modules and the entry points, and the column conventions of the
output tables.

* :class:`GraphReport`: the pre-fit connectivity checks (docs/methods/ranking.md §5.1);
* :class:`RankingResult`: a least-squares HodgeRank fit (docs/methods/ranking.md §2);
* :class:`RobustRankingResult`: an outlier-robust fit by HLASSO (docs/methods/ranking.md §3) or LBI (§4).

Every table is a pandas DataFrame; ids are nullable pandas ``string`` columns (``_str``) and ranks count
from 1 = largest key (``_rank_desc``). The tables are described in docs/methods/ranking.md §7.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

__all__ = ["GraphReport", "RankingResult", "RobustRankingResult"]


@dataclass(frozen=True)
class GraphReport:
    """Result of the pre-fit graph checks (docs/methods/ranking.md §5.1).

    Attributes
    ----------
    n_items, n_rows, n_edges, n_components : int
    cycle_dim : int
        ``l = m − n + c``; 0 means no outlier is detectable.
    components : pandas.DataFrame
        ``item, component, degree`` (degree = number of rows involving the item).
    component_sizes : numpy.ndarray
    isolated_items : list of str
        Items listed in the universe but never compared.
    connected : bool
        True iff ``n_components == 1``.
    """

    n_items: int
    n_rows: int
    n_edges: int
    n_components: int
    cycle_dim: int
    components: pd.DataFrame
    component_sizes: np.ndarray
    isolated_items: list[str]
    connected: bool

    def describe(self, limit: int = 5) -> str:
        """One-paragraph human-readable summary."""
        sizes = sorted(self.component_sizes.tolist(), reverse=True)
        s = ", ".join(str(x) for x in sizes[:limit]) + (" …" if len(sizes) > limit else "")
        iso = self.isolated_items[:limit]
        return (
            f"{self.n_components} connected component(s) (sizes {s}); "
            f"{len(self.isolated_items)} isolated item(s){' e.g. ' + str(iso) if iso else ''}"
        )


@dataclass(frozen=True)
class RankingResult:
    """Plain HodgeRank (least squares) fit.

    Attributes
    ----------
    ranking : pandas.DataFrame
        ``item`` (str), ``score`` (float64, centred per component), ``rank`` (int64, 1 = best within the
        component), ``component`` (int64), ``n_comparisons`` (int64 rows involving the item).
    residuals : pandas.DataFrame
        ``row_id, annotator, item_a, item_b, outcome, weight, fitted, residual, undetectable`` with
        ``fitted = score_a − score_b`` and ``residual = outcome − fitted`` (input orientation).
    diagnostics : pandas.DataFrame
        Per-component Hodge diagnostics (see :func:`~crowdflow.ranking.hodge.hodge_decomposition`).
    graph : GraphReport
    params : dict
        Run parameters (method ``'ls'``, solver, sizes).
    """

    ranking: pd.DataFrame
    residuals: pd.DataFrame
    diagnostics: pd.DataFrame
    graph: GraphReport
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def tables(self) -> dict[str, pd.DataFrame]:
        """The job's output tables by name: ``ranking``, ``components`` (the diagnostics), ``residuals``."""
        return {"ranking": self.ranking, "components": self.diagnostics, "residuals": self.residuals}

    @property
    def summary(self) -> str:
        """One line for a log."""
        return f"HodgeRank least squares on {len(self.ranking)} items"


@dataclass(frozen=True)
class RobustRankingResult:
    """Outlier-robust HodgeRank fit (HLASSO or LBI).

    Attributes
    ----------
    method : str
        ``'hlasso'`` or ``'lbi'``.
    ranking : pandas.DataFrame
        ``item, score, rank, component, n_comparisons``; ``score`` is the debiased score (LS refit without
        the flagged rows) if ``debias`` else the raw robust score.
    scores : pandas.DataFrame
        ``item, component, score_ls, score_robust, score_debiased`` (all centred per component).
    outliers : pandas.DataFrame
        One row per input comparison: ``row_id, annotator, item_a, item_b, outcome, weight, gamma,
        entry_time, entry_sign, path_rank, is_outlier, undetectable, residual``. ``gamma`` is in the input
        orientation (γ > 0: the observed outcome exceeds the model difference); ``entry_time`` is the LBI
        time at which γ became non-zero (HLASSO: ``1/λ_entry``), ``inf`` if never; ``path_rank`` orders
        all rows by outlyingness (1 = first to enter); ``residual = outcome − (score_a − score_b)``.
    annotators : pandas.DataFrame
        ``annotator, n_comparisons, n_outliers, outlier_rate`` (empty when annotators are unknown).
    diagnostics : pandas.DataFrame
        Per-component Hodge diagnostics of the LS fit plus ``n_outliers`` and ``outlier_weight_share``.
    trace : pandas.DataFrame
        Convergence / path trace (LBI: per iteration ``iteration, t, support_size, support_weight,
        residual_norm``; HLASSO: per grid point ``step, lambda, t, support_size, support_weight, n_iter,
        converged``).
    path : pandas.DataFrame
        γ at checkpoints, long and sparse: ``checkpoint, t, row_id, gamma`` (non-zeros only).
    graph : GraphReport
    params : dict
        Run parameters (κ, Δt, stop rule, λ*, t*, …).
    converged : bool
        False when an iteration cap was hit or the stop rule never fired.
    """

    method: str
    ranking: pd.DataFrame
    scores: pd.DataFrame
    outliers: pd.DataFrame
    annotators: pd.DataFrame
    diagnostics: pd.DataFrame
    trace: pd.DataFrame
    path: pd.DataFrame
    graph: GraphReport
    params: dict[str, Any] = field(default_factory=dict)
    converged: bool = True

    @property
    def tables(self) -> dict[str, pd.DataFrame]:
        """The job's output tables by name: ``ranking``, ``outliers``, ``annotators``, ``components`` (the
        diagnostics) and ``path``."""
        return {
            "ranking": self.ranking,
            "outliers": self.outliers,
            "annotators": self.annotators,
            "components": self.diagnostics,
            "path": self.path,
        }

    @property
    def summary(self) -> str:
        """One line for a log."""
        n_out = int(self.outliers["is_outlier"].sum())
        return f"{self.method.upper()}: {n_out} of {len(self.outliers)} comparisons flagged as outliers"


def _str(values: np.ndarray) -> pd.Series:
    """Ids as a nullable pandas string column (stable Arrow ``string`` type, missing → <NA>)."""
    return pd.Series(pd.array(np.asarray(values, dtype=object), dtype="string"))


def _str_take(ids: np.ndarray, codes: np.ndarray, text: pa.Array | None = None) -> pd.Series:
    """``_str(ids[codes])`` gathered in Arrow: the distinct ids become text once, not one Python object per row
    (``text``: ``ids`` already as an Arrow ``large_string`` array, shared by several gathers)."""
    if text is None:
        text = pa.array(np.asarray(ids, dtype=object), type=pa.large_string())
    return pd.Series(pd.arrays.ArrowStringArray(text.take(pa.array(np.asarray(codes, dtype=np.int64)))), dtype="string")


def _rank_desc(key: np.ndarray) -> np.ndarray:
    return pd.Series(key).rank(method="min", ascending=False).to_numpy().astype(np.int64)
