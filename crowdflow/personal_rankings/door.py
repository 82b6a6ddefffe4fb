"""The personal-rankings job's front door: a comparisons DataFrame in, the tables a run writes out.

:func:`output_tables` is the job's output tables from a fit (the flow and the front door both use it);
:func:`personal_rankings` is the whole job in one call, ``crowdflow.personal_rankings(comparisons, rank=3)``:
the file reader's column rules, the table contract, the annotator–item connectivity check
(:func:`crowdflow.checks.check_comparison_graph`) and :func:`~crowdflow.personal_rankings.fit_personal_rankings`,
as a pipeline runs them (docs/methods/personal_rankings.md).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pandas as pd

from crowdflow.checks import Checks, GraphChecks, check_comparison_graph, check_modes
from crowdflow.contracts.errors import DegenerateInput
from crowdflow.personal_rankings.fit import PersonalRankingResult, fit_personal_rankings
from crowdflow.personal_rankings.options import PersonalRankingsOptions
from crowdflow.storage.frames import Columns, columns_for, input_errors, read_input, written_tables

log = logging.getLogger(__name__)

__all__ = ["PersonalRankingsFit", "output_tables", "personal_rankings"]


def output_tables(result: PersonalRankingResult) -> dict[str, pd.DataFrame]:
    """The personal-rankings job's output tables: ``personal_rankings`` (user, item, score, rank),
    ``user_factors``, ``item_factors``, ``excluded`` and the one-row ``fit`` table."""
    return {
        "personal_rankings": result.personal_rankings,
        "user_factors": result.user_factors,
        "item_factors": result.item_factors,
        "excluded": result.excluded,
        "fit": result.diagnostics_table(),
    }


@dataclass(frozen=True)
class PersonalRankingsFit:
    """What ``crowdflow.personal_rankings(comparisons)`` returns: the run's tables, the checks and the fit.

    Attributes
    ----------
    tables : dict
        ``personal_rankings``, ``user_factors``, ``item_factors``, ``excluded``, ``fit``.
    checks : GraphChecks
        The annotator–item connectivity check.
    result : PersonalRankingResult
        The fit (diagnostics, trace, factors; ``predict_proba`` for new comparisons).
    options : PersonalRankingsOptions
    """

    tables: dict[str, pd.DataFrame]
    checks: GraphChecks
    result: PersonalRankingResult
    options: PersonalRankingsOptions

    @property
    def rankings(self) -> pd.DataFrame:
        """One row per (user, item): ``user, item, score, rank`` (rank 1 = that user's favourite)."""
        return self.tables["personal_rankings"]

    @property
    def excluded(self) -> pd.DataFrame:
        """Users and items without a usable comparison: ``kind, id, reason`` (never ranked silently)."""
        return self.tables["excluded"]

    @property
    def user_factors(self) -> pd.DataFrame:
        """``user, f0 … f{r-1}``."""
        return self.tables["user_factors"]

    @property
    def item_factors(self) -> pd.DataFrame:
        """``item, f0 … f{r-1}``."""
        return self.tables["item_factors"]


def personal_rankings(
    comparisons: pd.DataFrame,
    *,
    options: PersonalRankingsOptions | None = None,
    checks: Checks = None,
    columns: Columns = None,
    **overrides: Any,
) -> PersonalRankingsFit:
    """Per-user rankings of the items from pairwise comparisons (low-rank Bradley–Terry–Luce).

    Parameters
    ----------
    comparisons : pandas.DataFrame
        One row per judgement, the layouts :func:`crowdflow.rank` reads (Crowd-Kit's included).
    options : PersonalRankingsOptions, optional
        The job's options (the ``personal_rankings:`` section of a spec); default: the pipeline's defaults.
    checks : {"block", "warn"} or mapping, optional
        Policy of ``validation`` and ``connectivity`` (both block by default: users are ranked on one
        connected annotator–item graph).
    columns : mapping, optional
        Canonical column → your column name.
    **overrides
        Fields of :class:`~crowdflow.personal_rankings.PersonalRankingsOptions` (``rank=3``, ``method="rtr"``, …).

    Returns
    -------
    PersonalRankingsFit
        ``.rankings``, ``.user_factors``, ``.item_factors``, ``.excluded``, ``.tables``.

    Raises
    ------
    pydantic.ValidationError
        An unknown option or a value outside its range.
    crowdflow.contracts.errors.InputError
        A missing column or an unreadable outcome.
    crowdflow.contracts.errors.DegenerateInput
        Comparisons that admit no fit (only ties, a rank above the number of users or items), naming the table.
    crowdflow.contracts.errors.ValidationFailed, crowdflow.contracts.errors.GraphCheckFailed
        A broken table contract or a disconnected annotator–item graph under a blocking policy.
    """
    o = PersonalRankingsOptions.resolve(options, **overrides)
    modes = check_modes("personal_rankings", checks)
    cmp = read_input(
        comparisons, "comparisons", columns_for("comparisons", columns, "comparisons"), validation=modes["validation"]
    )
    with input_errors(cmp.source):
        graph = check_comparison_graph(cmp.df, modes["connectivity"], aggregate=True)
    for text in graph.warnings:
        log.warning("%s", text)
    graph.raise_if_blocking(cmp.source)
    try:
        with input_errors(cmp.source):
            result = fit_personal_rankings(cmp.df, options=o)
    except DegenerateInput as exc:  # the data admit no fit: say which table, as the pipeline does
        raise DegenerateInput(f"{cmp.source}: {exc}", exc.reason) from None
    return PersonalRankingsFit(written_tables("personal_rankings", output_tables(result)), graph, result, o)
