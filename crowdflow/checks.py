"""The pre-fit graph checks of every job, with their block/warn policy: written once, used by run and validate.

Each check reads a graph report (:mod:`crowdflow.graphs`) and returns a :class:`GraphChecks`: the report, one
:class:`CheckOutcome` per rule (passed or not, the policy the spec gave it, the problem lines) and a one-line
summary. Nothing here raises on a failed check by itself: :meth:`GraphChecks.raise_if_blocking` does, so the
pipeline's Prefect task (which also publishes artifacts) and ``crowdflow validate`` (which prints the summary)
reach the same verdict from the same function.

The rules (docs/methods/skills.md, ranking.md, personal_rankings.md, personal_models.md):

- skills: no bipartite component in the worker interaction graph (``identifiability``: skills are not
  identifiable there), no isolated worker (``isolated_workers``);
- ranking: one connected component of the item comparison graph (``connectivity``; scores are comparable
  only within a component);
- personal rankings: one connected annotator–item graph (``connectivity``);
- personal models: positive, finite, symmetric edge weights and known endpoints (always blocking), one
  connected agent graph (``connectivity``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

import pandas as pd

from crowdflow.comparison_graphs import ComparisonGraphReport, comparison_graph_report
from crowdflow.contracts.errors import GraphCheckFailed
from crowdflow.graphs import (
    AgentGraphReport,
    WorkerGraphReport,
    agent_graph_problems,
    agent_graph_report,
    describe_failures,
    worker_graph_report,
)
from crowdflow.labels import LabelMatrix

CheckMode = Literal["block", "warn"]

#: The ``checks=`` argument of a front-door function: one policy for every check, a mapping of check name →
#: policy (the keys of a pipeline spec's ``checks:`` section), or ``None`` for the pipeline's defaults.
Checks = CheckMode | Mapping[str, CheckMode] | None

#: The pipeline's default policies (``crowdflow.spec.ChecksSpec``; a test keeps the two equal).
DEFAULT_MODES: dict[str, CheckMode] = {"validation": "block", "identifiability": "block", "isolated_workers": "warn"}
CHECK_NAMES = ("validation", "identifiability", "isolated_workers", "connectivity")


def default_connectivity(job: str) -> CheckMode:
    """The pipeline's default ``connectivity`` policy: warn for ranking (scores per component), block otherwise."""
    return "warn" if job == "ranking" else "block"


def check_modes(job: str, checks: Checks = None) -> dict[str, CheckMode]:
    """The policy of each pre-fit check of ``job``: validation, identifiability, isolated_workers, connectivity.

    Parameters
    ----------
    job : str
        The job (``skills``, ``ranking``, ``personal_rankings``, ``personal_models``, ``assignment``).
    checks : {"block", "warn"}, mapping or None
        ``None``: the pipeline's defaults (every check blocks except ``isolated_workers``, and ``connectivity`` of
        a ranking, which warn); a string: that policy for every check; a mapping: those checks changed, the rest
        at their defaults. An object with a ``modes(job)`` method and a ``validation`` field (a pipeline spec's
        ``ChecksSpec``) is taken as it is.

    Returns
    -------
    dict
        Check name → ``"block"`` or ``"warn"``.

    Raises
    ------
    ValueError
        An unknown check name or policy.
    """
    modes: dict[str, CheckMode] = {**DEFAULT_MODES, "connectivity": default_connectivity(job)}
    if checks is None:
        return modes
    if hasattr(checks, "modes") and hasattr(checks, "validation"):
        return {**cast(Any, checks).modes(job), "validation": cast(Any, checks).validation}
    given: Mapping[str, Any] = dict.fromkeys(CHECK_NAMES, checks) if isinstance(checks, str) else checks
    if not isinstance(given, Mapping):
        raise TypeError(f"checks must be 'block', 'warn' or a mapping of check -> policy, got {type(checks).__name__}")
    for name, mode in given.items():
        if name not in CHECK_NAMES:
            raise ValueError(f"unknown check {name!r}; use " + ", ".join(repr(c) for c in CHECK_NAMES))
        if mode not in ("block", "warn"):
            raise ValueError(f"checks.{name} must be 'block' or 'warn', got {mode!r}")
        modes[name] = mode
    return modes


__all__ = [
    "CheckMode",
    "CheckOutcome",
    "GraphChecks",
    "check_agent_graph",
    "check_comparison_graph",
    "check_worker_graph",
]


@dataclass(frozen=True)
class CheckOutcome:
    """One rule of a graph check.

    Attributes
    ----------
    name : str
        The spec's name of the check (``identifiability``, ``isolated_workers``, ``connectivity``, ``agent_graph``).
    policy : {"block", "warn"}
        What the spec says a failure does.
    passed : bool
    problems : tuple of str
        What failed, one message each (empty when passed).
    """

    name: str
    policy: CheckMode
    passed: bool
    problems: tuple[str, ...] = ()

    @property
    def blocking(self) -> bool:
        """A failure under the ``block`` policy: nothing may be fitted or written."""
        return not self.passed and self.policy == "block"


@dataclass(frozen=True)
class GraphChecks:
    """The outcome of a job's graph checks: the report, one outcome per rule, a one-line summary."""

    kind: str
    report: Any
    outcomes: tuple[CheckOutcome, ...]
    summary: str

    @property
    def warnings(self) -> list[str]:
        """Problems of failed checks whose policy is ``warn`` (to be logged; the run goes on)."""
        return [p for o in self.outcomes if not o.passed and o.policy == "warn" for p in o.problems]

    @property
    def results(self) -> dict[str, str]:
        """``check → passed | failed`` (what the manifest and the report record)."""
        return {o.name: "passed" if o.passed else "failed" for o in self.outcomes}

    def raise_if_blocking(self, source: str = "") -> None:
        """Raise :class:`GraphCheckFailed` naming ``source`` and every blocking problem; return otherwise."""
        blocking = [o for o in self.outcomes if o.blocking]
        if blocking:
            where = f"{source}: " if source else ""
            raise GraphCheckFailed(where + "\n".join(p for o in blocking for p in o.problems), check=blocking[0].name)


def check_worker_graph(
    lm: LabelMatrix | WorkerGraphReport, identifiability: CheckMode, isolated_workers: CheckMode
) -> GraphChecks:
    """Skills: components of the worker interaction graph; bipartite ones and isolated workers per policy.

    ``lm`` is the encoded labels, or the graph report already built from counts summed over partitions
    (:func:`crowdflow.graphs.worker_graph_from_counts`).
    """
    report: WorkerGraphReport = lm if isinstance(lm, WorkerGraphReport) else worker_graph_report(lm)
    comps = report.components
    n_bip = int((comps["status"] == "bipartite_component").sum())
    n_iso = int((comps["status"] == "isolated").sum())
    bip: tuple[str, ...] = ()
    if n_bip:
        text = describe_failures(report, ("bipartite_component",))
        bip = (f"{n_bip} bipartite component(s) in the worker graph (skills not identifiable):\n{text}",)
    iso: tuple[str, ...] = ()
    if n_iso:
        names = report.workers.loc[report.workers["status"] == "isolated", "worker"].head(20).tolist()
        iso = (f"{n_iso} isolated worker(s) share no task with anyone: {names}",)
    counts = comps["status"].value_counts().to_dict()
    return GraphChecks(
        kind="worker graph",
        report=report,
        outcomes=(
            CheckOutcome("identifiability", identifiability, not n_bip, bip),
            CheckOutcome("isolated_workers", isolated_workers, not n_iso, iso),
        ),
        summary=f"worker graph: {len(comps)} components {counts}",
    )


def check_comparison_graph(
    comparisons: pd.DataFrame | ComparisonGraphReport, connectivity: CheckMode, aggregate: bool
) -> GraphChecks:
    """Ranking (``aggregate=False``: the item graph) or personal rankings (``True``: the annotator–item graph).

    Scores are comparable only within a connected component; more than one component fails the check.
    ``comparisons`` is the comparison table, or its report already computed from the codes a fit uses
    (:func:`crowdflow.comparison_graphs.comparison_graph_report_from_codes`: the same report).
    """
    report: ComparisonGraphReport = (
        comparisons if isinstance(comparisons, ComparisonGraphReport) else comparison_graph_report(comparisons)
    )
    comps = report.components
    parts = report.n_user_item_components if aggregate else len(comps)
    what = "annotator–item graph" if aggregate else "item comparison graph"
    problems: tuple[str, ...] = ()
    if parts > 1:
        listing = "\n".join(
            f"component {r.component}: {r.n_items} items, {r.n_comparisons} comparisons: [{r.items}]"
            for r in comps.sort_values("n_items", ascending=False).head(10).itertuples(index=False)
        )
        problems = (f"the {what} has {parts} connected components; scores are not comparable across them:\n{listing}",)
    return GraphChecks(
        kind=what,
        report=report,
        outcomes=(CheckOutcome("connectivity", connectivity, parts <= 1, problems),),
        summary=f"{what}: {parts} component(s)",
    )


def check_agent_graph(agents: pd.DataFrame, edges: pd.DataFrame, connectivity: CheckMode) -> GraphChecks:
    """Personal models: the edge weights (always blocking) and the connectivity of the agent graph (per policy)."""
    report: AgentGraphReport = agent_graph_report(edges, agents["agent"].astype(str).unique())
    weights = agent_graph_problems(report, require_connected=False)
    connected = report.n_components <= 1
    split = () if connected else tuple(p for p in agent_graph_problems(report) if p not in weights)
    return GraphChecks(
        kind="agent graph",
        report=report,
        outcomes=(
            CheckOutcome("agent_graph", "block", not weights, tuple(weights)),
            CheckOutcome("connectivity", connectivity, connected, split),
        ),
        summary=f"agent graph: {report.n_agents} agents, {report.n_components} component(s)",
    )


def graph_checks(
    job: str,
    tables: Mapping[str, pd.DataFrame],
    modes: Mapping[str, CheckMode],
    lm: LabelMatrix | WorkerGraphReport | None = None,
    comparisons_report: ComparisonGraphReport | None = None,
) -> GraphChecks | None:
    """The graph checks of ``job`` (None for a job without any: assignment, next batch).

    Parameters
    ----------
    job : str
        The spec's job.
    tables : mapping
        The job's validated input tables by kind (``comparisons``; ``agents`` and ``edges``).
    modes : mapping
        Check name → policy (``identifiability``, ``isolated_workers``, ``connectivity``).
    lm : LabelMatrix or WorkerGraphReport, optional
        The encoded labels (skills), or their worker graph built from partition counts.
    comparisons_report : ComparisonGraphReport, optional
        The comparison graph's report already computed from the codes the fit uses (ranking, personal
        rankings); default: computed here from ``tables["comparisons"]``.
    """
    if job == "skills":
        if lm is None:
            raise ValueError("the skills checks need the encoded labels (lm)")
        return check_worker_graph(lm, modes["identifiability"], modes["isolated_workers"])
    if job in ("ranking", "personal_rankings"):
        graph = tables["comparisons"] if comparisons_report is None else comparisons_report
        return check_comparison_graph(graph, modes["connectivity"], job == "personal_rankings")
    if job == "personal_models":
        return check_agent_graph(tables["agents"], tables["edges"], modes["connectivity"])
    return None
