"""``outliers: trimmed`` in memory: the partitioned fit's robust rule on one table, with the job's output tables.

The trimmed rule (docs/methods/ranking.md §2.4) is the outlier search a run can do when no process holds the
comparisons (:func:`~crowdflow.ranking.partitioned.fit_ranking_partitioned`); this module offers the same rule on a
table in memory, so a run that outgrows one machine keeps its answers: the flags of an in-memory ``trimmed`` fit
equal those of the partitioned one (up to the order of floating-point sums).

Tables: ``ranking``, ``components`` (Hodge diagnostics), ``annotators`` and ``outliers`` — *the flagged rows only*
(``part, row_id, annotator, item_a, item_b, outcome, weight, fitted, residual, is_outlier``), since a partitioned
run writes those and never every row.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from crowdflow.ranking.options import RankingOptions
from crowdflow.ranking.partitioned import PartitionedRankingResult, fit_trimmed
from crowdflow.ranking.types import GraphReport

__all__ = ["TrimmedRankingResult", "fit_trimmed_tables", "row_files_frame"]


def row_files_frame(paths: Sequence[str]) -> pd.DataFrame:
    """The rows a partitioned fit wrote, as one table in partition order."""
    frames = [pd.read_parquet(p) for p in paths]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


@dataclass(frozen=True)
class TrimmedRankingResult:
    """An in-memory ``outliers: trimmed`` fit with the job's tables (see the module docstring).

    Attributes
    ----------
    fit : PartitionedRankingResult
        The fit itself (σ̂, threshold, passes, the graph report).
    outliers : pandas.DataFrame
        The flagged comparisons with their residuals.
    """

    fit: PartitionedRankingResult
    outliers: pd.DataFrame

    @property
    def ranking(self) -> pd.DataFrame:
        return self.fit.ranking

    @property
    def graph(self) -> GraphReport:
        return self.fit.graph

    @property
    def params(self) -> dict[str, Any]:
        return {
            **self.fit.params,
            "sigma": self.fit.sigma,
            "threshold": self.fit.threshold,
            "n_rows": self.fit.n_rows,
            "n_outliers": self.fit.n_outliers,
            "passes": self.fit.passes,
        }

    @property
    def tables(self) -> dict[str, pd.DataFrame]:
        """``ranking``, ``outliers`` (flagged rows), ``annotators``, ``components``."""
        return {
            "ranking": self.fit.ranking,
            "outliers": self.outliers,
            "annotators": self.fit.annotators,
            "components": self.fit.diagnostics,
        }

    @property
    def summary(self) -> str:
        return f"TRIMMED: {self.fit.n_outliers} of {self.fit.n_rows} comparisons flagged as outliers"


def fit_trimmed_tables(
    comparisons: pd.DataFrame, options: RankingOptions, *, items: Sequence[Any] | None = None
) -> TrimmedRankingResult:
    """:func:`~crowdflow.ranking.partitioned.fit_trimmed` with its flagged rows read back as the ``outliers`` table."""
    with tempfile.TemporaryDirectory(prefix="crowdflow-trimmed-") as tmp:
        fit = fit_trimmed(comparisons, options, tmp, items=items, write_rows="outliers")
        rows = row_files_frame(fit.row_files)
    return TrimmedRankingResult(fit=fit, outliers=rows)
