"""The ranking job's front door: a comparisons DataFrame in, the tables a ranking run writes out.

:func:`output_tables` is the job's output tables from a fit (the flow and the front door both use it);
:func:`rank` is the whole job in one call, ``crowdflow.rank(comparisons, outliers=...)``: the file reader's
column rules (Crowd-Kit's ``worker, left, right, label`` and the papers' names accepted, a winner column read
as the outcome), the table contract, the comparison-graph check (:func:`crowdflow.checks.check_comparison_graph`)
and :func:`~crowdflow.ranking.fit_ranking`, as a pipeline runs them (docs/methods/ranking.md).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from crowdflow.checks import Checks, GraphChecks, check_comparison_graph, check_modes
from crowdflow.contracts.comparisons import comparisons_from_shapes
from crowdflow.ranking.fit import fit_ranking
from crowdflow.ranking.options import RankingOptions
from crowdflow.ranking.trimmed import TrimmedRankingResult
from crowdflow.ranking.types import RankingResult, RobustRankingResult
from crowdflow.storage.frames import Columns, columns_for, input_errors, read_input, written_tables

log = logging.getLogger(__name__)

__all__ = ["RankingFit", "output_tables", "rank"]


def output_tables(result: RankingResult | RobustRankingResult | TrimmedRankingResult) -> dict[str, pd.DataFrame]:
    """The ranking job's output tables: ``ranking``, ``components`` and ``outliers``, ``annotators``, ``path``
    (an outlier search; ``trimmed``: the flagged rows, no path) or ``residuals`` (plain least squares);
    docs/methods/ranking.md §7."""
    return dict(result.tables)


@dataclass(frozen=True)
class RankingFit:
    """What ``crowdflow.rank(comparisons)`` returns: the run's tables, the checks and the fit.

    Attributes
    ----------
    tables : dict
        The tables a ranking run writes (``ranking``, ``components``, and ``outliers``, ``annotators``,
        ``path`` or ``residuals``).
    checks : GraphChecks
        The comparison-graph check (components of the item graph).
    result : RankingResult or RobustRankingResult
        The fit (parameters, trace, graph report).
    options : RankingOptions
    """

    tables: dict[str, pd.DataFrame]
    checks: GraphChecks
    result: RankingResult | RobustRankingResult | TrimmedRankingResult
    options: RankingOptions

    @property
    def ranking(self) -> pd.DataFrame:
        """One row per item: ``item, score, rank, component, n_comparisons`` (rank 1 = best in its component)."""
        return self.tables["ranking"]

    @property
    def outliers(self) -> pd.DataFrame | None:
        """One row per comparison with ``gamma``, ``entry_time`` and ``is_outlier`` (None with ``outliers="none"``)."""
        return self.tables.get("outliers")

    @property
    def annotators(self) -> pd.DataFrame | None:
        """Per annotator: ``n_comparisons, n_outliers, outlier_rate`` (None with ``outliers="none"``)."""
        return self.tables.get("annotators")

    @property
    def components(self) -> pd.DataFrame:
        """Hodge diagnostics per connected component of the comparison graph."""
        return self.tables["components"]


def rank(
    comparisons: Any,
    ys: Sequence[Any] | None = None,
    winners: Sequence[Any] | None = None,
    *,
    weights: Sequence[float] | None = None,
    annotators: Sequence[Any] | None = None,
    items: Sequence[Any] | None = None,
    options: RankingOptions | None = None,
    checks: Checks = None,
    columns: Columns = None,
    **overrides: Any,
) -> RankingFit:
    """A global ranking of items from pairwise comparisons, with the outlying comparisons flagged.

    Parameters
    ----------
    comparisons : pandas.DataFrame, Evalica's ``xs`` or choix's pairs
        One row per judgement: ``annotator, item_a, item_b, outcome`` (> 0: ``item_a`` preferred; 0 a tie) or
        a ``winner`` column; Crowd-Kit's ``worker, left, right, label`` (label = the winner) and the papers'
        ``user``/``item_i``/``item_j``/``y`` are read as they are. Optional ``weight``. Or, as the ranking
        libraries take them: Evalica's ``xs`` (with ``ys`` and ``winners``), or choix's list of
        ``(winner, loser)`` index pairs (with ``items`` naming the indices);
        :func:`crowdflow.contracts.comparisons.comparisons_from_shapes` maps each onto the table.
    ys, winners : sequence, optional
        Evalica's shape: ``rank(xs, ys, winners)``, ``winners`` of ``evalica.Winner`` (X, Y, Draw).
    weights, annotators : sequence, optional
        Per comparison, for the Evalica and choix shapes: a weight > 0, who judged it (default one annotator).
    items : sequence, optional
        choix's shape: the item id of each index.
    options : RankingOptions, optional
        The job's options (the ``ranking:`` section of a spec); default: the pipeline's defaults.
    checks : {"block", "warn"} or mapping, optional
        Policy of ``validation`` (block) and ``connectivity`` (warn: each component is ranked on its own).
    columns : mapping, optional
        Canonical column → your column name, e.g. ``{"annotator": "rater"}``.
    **overrides
        Fields of :class:`~crowdflow.ranking.RankingOptions` (``outliers="hlasso"``, ``budget=0.1``, …).

    Returns
    -------
    RankingFit
        ``.ranking``, ``.outliers``, ``.annotators``, ``.components``, ``.tables``.

    Raises
    ------
    pydantic.ValidationError
        An unknown option or a value outside its range.
    crowdflow.contracts.errors.InputError
        A missing column, an unreadable outcome or winner, comparisons the fit cannot use.
    crowdflow.contracts.errors.ValidationFailed
        The table breaks its contract (null ids, a self-comparison, a non-finite outcome …).
    crowdflow.contracts.errors.GraphCheckFailed
        A disconnected comparison graph when ``connectivity`` blocks.

    Examples
    --------
    >>> import pandas as pd
    >>> import crowdflow as cf
    >>> votes = pd.DataFrame({
    ...     "worker": ["u1", "u1", "u2", "u2", "u3", "u3"],
    ...     "left": ["a", "b", "a", "c", "b", "a"],
    ...     "right": ["b", "c", "c", "b", "c", "b"],
    ...     "label": ["a", "b", "a", "b", "b", "a"],
    ... })
    >>> fit = cf.rank(votes, outliers="none")
    >>> fit.ranking[["item", "rank"]].to_dict("records")
    [{'item': 'a', 'rank': 1}, {'item': 'b', 'rank': 2}, {'item': 'c', 'rank': 3}]
    """
    o = RankingOptions.resolve(options, **overrides)
    modes = check_modes("ranking", checks)
    table = comparisons_from_shapes(comparisons, ys, winners, weights=weights, annotators=annotators, items=items)
    cmp = read_input(
        table, "comparisons", columns_for("comparisons", columns, "comparisons"), validation=modes["validation"]
    )
    with input_errors(cmp.source):
        graph = check_comparison_graph(cmp.df, modes["connectivity"], aggregate=False)
    for text in graph.warnings:
        log.warning("%s", text)
    graph.raise_if_blocking(cmp.source)
    with input_errors(cmp.source):
        result = fit_ranking(cmp.df, o)
    return RankingFit(written_tables("ranking", output_tables(result)), graph, result, o)
