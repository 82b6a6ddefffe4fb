"""The personal-models job's front door: agents and edges DataFrames in, the tables a run writes out.

:func:`output_tables` is the job's output tables from a fit (the flow and the front door both use it);
:func:`personal_models` is the whole job in one call, ``crowdflow.personal_models(agents, edges)``: the file
reader's column rules, the table contracts, the agent-graph checks (:func:`crowdflow.checks.check_agent_graph`)
and :func:`~crowdflow.personal_models.fit_personal_models`, as a pipeline runs them
(docs/methods/personal_models.md).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pandas as pd

from crowdflow.checks import Checks, GraphChecks, check_agent_graph, check_modes
from crowdflow.contracts.errors import DegenerateInput
from crowdflow.personal_models.fit import fit_personal_models
from crowdflow.personal_models.options import PersonalModelsOptions
from crowdflow.personal_models.result import PersonalModelsResult
from crowdflow.storage.frames import Columns, columns_for, input_errors, read_input, written_tables

log = logging.getLogger(__name__)

__all__ = ["PersonalModelsFit", "output_tables", "personal_models"]


def output_tables(result: PersonalModelsResult) -> dict[str, pd.DataFrame]:
    """The personal-models job's output tables: ``personal_models`` (agent, one column per parameter, residual,
    component, n_samples) and ``convergence`` (the trace: rounds, KKT norm, certified error bound)."""
    return {"personal_models": result.personal_models, "convergence": result.diagnostics}


@dataclass(frozen=True)
class PersonalModelsFit:
    """What ``crowdflow.personal_models(agents, edges)`` returns: the run's tables, the checks and the fit.

    Attributes
    ----------
    tables : dict
        ``personal_models`` and ``convergence``.
    checks : GraphChecks
        The agent-graph checks (edge weights, connectivity).
    result : PersonalModelsResult
        The fit (models as an array, iterations, KKT norm, certified error bound).
    options : PersonalModelsOptions
    """

    tables: dict[str, pd.DataFrame]
    checks: GraphChecks
    result: PersonalModelsResult
    options: PersonalModelsOptions

    @property
    def models(self) -> pd.DataFrame:
        """One row per agent: ``agent, theta_<param>…, residual, component, n_samples``."""
        return self.tables["personal_models"]

    @property
    def convergence(self) -> pd.DataFrame:
        """The convergence trace: ``round, kkt_norm, error_bound, …``."""
        return self.tables["convergence"]


def personal_models(
    agents: pd.DataFrame,
    edges: pd.DataFrame,
    *,
    options: PersonalModelsOptions | None = None,
    checks: Checks = None,
    columns: Columns = None,
    **overrides: Any,
) -> PersonalModelsFit:
    """One model per agent, smoothed over a weighted agent graph (DJAM, or a reference method).

    Parameters
    ----------
    agents : pandas.DataFrame
        One row per local sample: ``agent``, ``y`` and feature columns.
    edges : pandas.DataFrame
        The undirected agent graph: ``source, target, weight`` (weight > 0).
    options : PersonalModelsOptions, optional
        The job's options (the ``personal_models:`` section of a spec); default: the pipeline's defaults.
    checks : {"block", "warn"} or mapping, optional
        Policy of ``validation`` and ``connectivity`` (both block by default; with ``connectivity="warn"`` each
        component is fitted on its own). Bad edge weights always block.
    columns : mapping, optional
        Per table: ``{"agents": {...}, "edges": {...}}`` (or the agents mapping alone).
    **overrides
        Fields of :class:`~crowdflow.personal_models.PersonalModelsOptions` (``loss="logistic"``, ``reg=0.5``, …).

    Returns
    -------
    PersonalModelsFit
        ``.models``, ``.convergence``, ``.tables``.

    Raises
    ------
    pydantic.ValidationError
        An unknown option or a value outside its range.
    crowdflow.contracts.errors.InputError
        A missing column or values of the wrong type.
    crowdflow.contracts.errors.DegenerateInput
        Tables that admit no fit (an agent without data or prior, …), naming the agents table.
    crowdflow.contracts.errors.ValidationFailed, crowdflow.contracts.errors.GraphCheckFailed
        A broken table contract, bad edges or a disconnected graph under a blocking policy.

    Examples
    --------
    >>> import pandas as pd
    >>> import crowdflow as cf
    >>> agents = pd.DataFrame({"agent": ["a", "a", "b", "c"], "y": [1.0, 1.2, 0.0, 3.0]})
    >>> edges = pd.DataFrame({"source": ["a", "b"], "target": ["b", "c"], "weight": [1.0, 0.5]})
    >>> fit = cf.personal_models(agents, edges, loss="quadratic", reg=0.1)
    >>> list(fit.models.columns)
    ['agent', 'theta_intercept', 'residual', 'component', 'n_samples', 'missing_reason']
    """
    o = PersonalModelsOptions.resolve(options, **overrides)
    modes = check_modes("personal_models", checks)
    ag = read_input(agents, "agents", columns_for("agents", columns, "agents"), validation=modes["validation"])
    ed = read_input(edges, "edges", columns_for("edges", columns, "agents"), validation=modes["validation"])
    with input_errors(ed.source):
        graph = check_agent_graph(ag.df, ed.df, modes["connectivity"])
    for text in graph.warnings:
        log.warning("%s", text)
    graph.raise_if_blocking(ed.source)
    try:
        with input_errors(ag.source):
            result = fit_personal_models(ag.df, ed.df, o, allow_disconnected=modes["connectivity"] == "warn")
    except DegenerateInput as exc:  # the data admit no fit: say which table, as the pipeline does
        raise DegenerateInput(f"{ag.source}: {exc}", exc.reason) from None
    return PersonalModelsFit(written_tables("personal_models", output_tables(result)), graph, result, o)
