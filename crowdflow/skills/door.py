"""The skills job's front door: a labels DataFrame in, the tables a skills run writes out.

:func:`output_tables` assembles the job's output tables from a fit (the pipeline's flow and the front door
both call it, so both write the same tables); :func:`output_metrics` the metrics a run records;
:func:`skills` is the whole job in one call, ``crowdflow.skills(labels)``: the file reader's column rules,
the table contract, the duplicate policy, the worker-graph checks (:func:`crowdflow.checks.check_worker_graph`)
and :func:`~crowdflow.skills.fit_skills`, as a pipeline runs them (docs/methods/skills.md).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from crowdflow.checks import Checks, GraphChecks, check_modes, check_worker_graph
from crowdflow.graphs import WorkerGraphReport
from crowdflow.labels import answered, deduplicate, encode_labels
from crowdflow.metrics import SkillsReview, gold_metrics, review_skills
from crowdflow.skills.fit import SkillsResult, fit_skills
from crowdflow.skills.gold import cross_fit
from crowdflow.skills.majority import majority_vote
from crowdflow.skills.options import SkillsOptions
from crowdflow.storage.frames import Columns, columns_for, input_errors, read_input, written_tables
from crowdflow.storage.io import LoadedTable

log = logging.getLogger(__name__)

__all__ = ["SkillsFit", "output_metrics", "output_tables", "skills"]


def output_tables(
    result: SkillsResult, graph: WorkerGraphReport, review: SkillsReview | None = None
) -> dict[str, pd.DataFrame]:
    """The skills job's output tables: ``consensus``, ``skills`` and ``components`` (and with gold labels
    ``gold_workers`` and ``gold_confusion``, from ``review``: :func:`crowdflow.metrics.review_skills`).

    ``components`` is the fit's per-component diagnostics with the worker-graph report's ``colour_sizes``
    and ``workers`` (first ids) of each component. The columns and types a run writes are those of
    ``crowdflow.contracts.tables.OUTPUTS["skills"]`` (the writer casts to them).

    Parameters
    ----------
    result : SkillsResult
        The fit (:func:`crowdflow.skills.fit_skills`).
    graph : WorkerGraphReport
        The worker-graph report of the same labels (the pre-fit check's report).

    Returns
    -------
    dict
        Table name → DataFrame.
    """
    components = result.diagnostics.merge(
        graph.components[["component", "colour_sizes", "workers"]], on="component", how="left"
    )
    tables = {"consensus": result.consensus, "skills": result.skills, "components": components}
    if review is not None:
        tables.update(review.tables)
    return tables


def output_metrics(
    result: SkillsResult,
    truth: pd.DataFrame | None = None,
    n_duplicates_dropped: int = 0,
    classes: Sequence[str] | None = None,
    baseline: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """The metrics a skills run records: ties, fallback tasks, dropped duplicates, identified workers, gold accuracy.

    Parameters
    ----------
    result : SkillsResult
    truth : pandas.DataFrame, optional
        Gold labels (``task``, ``label``): adds ``accuracy``, ``error``, ``n_gold``, ``n_gold_unlabelled``.
    n_duplicates_dropped : int
        Rows the duplicate policy removed before the fit.
    classes : sequence of str, optional
        The fitted label set: gold tasks whose gold label is none of them are counted (``n_gold_label_unknown``).
    baseline : pandas.DataFrame, optional
        The majority-vote consensus (``task``, ``label``) of the same labels: with gold, adds
        ``baseline_accuracy`` (``baseline: majority vote``), the number the report puts beside ``accuracy``.
    """
    meta = result.metadata
    metrics: dict[str, Any] = {
        "n_ties": meta.get("n_ties", 0),
        "n_fallback_tasks": meta.get("n_fallback_tasks", 0),
        "n_duplicates_dropped": int(n_duplicates_dropped),
        "frac_workers_identified": meta.get("frac_workers_identified"),
    }
    if truth is not None:
        # gold in the fit: score the cross-fitted labels (crowdflow.skills.gold), never the fit that saw the gold
        scored = result.gold_scored if result.gold_scored is not None else result.consensus
        metrics.update(gold_metrics(scored, truth, None if classes is None else list(classes)).as_dict())
        metrics["accuracy_scoring"] = meta.get("accuracy_scoring", "in-sample: the fit did not see the gold")
        if baseline is not None:
            metrics["baseline"] = "majority vote"
            metrics["baseline_accuracy"] = gold_metrics(baseline, truth).accuracy
    return metrics


@dataclass(frozen=True)
class SkillsFit:
    """What ``crowdflow.skills(labels)`` returns: the run's tables, its metrics, the checks and the fit.

    Attributes
    ----------
    tables : dict
        ``consensus``, ``skills``, ``components``: the tables a skills run writes, with their columns and types.
    metrics : dict
        What the run's manifest records (``n_ties``, ``n_fallback_tasks``, …; ``accuracy`` and ``error`` when
        gold labels were given).
    checks : GraphChecks
        The worker-graph checks (report, outcome of each rule, summary).
    result : SkillsResult
        The fit itself (metadata, loss trace, timings).
    options : SkillsOptions
        The validated options the fit ran with.
    """

    tables: dict[str, pd.DataFrame]
    metrics: dict[str, Any]
    checks: GraphChecks
    result: SkillsResult
    options: SkillsOptions

    @property
    def consensus(self) -> pd.DataFrame:
        """One row per task: ``task, label, confidence, n_labels, fallback``."""
        return self.tables["consensus"]

    @property
    def skills(self) -> pd.DataFrame:
        """One row per worker: ``worker, skill, accuracy, vote_weight, n_labels, …, status, identifiable``."""
        return self.tables["skills"]

    @property
    def components(self) -> pd.DataFrame:
        """One row per component of the worker graph: sizes, bipartiteness, spectral diagnostics."""
        return self.tables["components"]


def skills(
    labels: pd.DataFrame,
    truth: pd.DataFrame | None = None,
    *,
    options: SkillsOptions | None = None,
    checks: Checks = None,
    columns: Columns = None,
    **overrides: Any,
) -> SkillsFit:
    """Worker skills and consensus labels from a labels DataFrame: the skills job, as a pipeline runs it.

    Parameters
    ----------
    labels : pandas.DataFrame
        One row per answer: ``task, worker, label`` (Crowd-Kit's names), or other names mapped by ``columns``.
        Ids are kept as text (``007`` and ``7`` are different workers).
    truth : pandas.DataFrame, optional
        Gold labels ``task, label``: the metrics then hold the accuracy.
    options : SkillsOptions, optional
        The job's options (the ``skills:`` section of a spec); default: the pipeline's defaults.
    checks : {"block", "warn"} or mapping, optional
        Policy of the pre-fit checks (``validation``, ``identifiability``, ``isolated_workers``), as a spec's
        ``checks:`` section; default: the pipeline's (block, block, warn).
    columns : mapping, optional
        Canonical column → your column name, e.g. ``{"task": "item_id"}`` (the labels table), or per table
        ``{"labels": {...}, "truth": {...}}``.
    **overrides
        Fields of :class:`~crowdflow.skills.SkillsOptions` (``method="ds"``, ``tie_break="smallest"``, …),
        validated like the spec.

    Returns
    -------
    SkillsFit
        ``.consensus``, ``.skills``, ``.components``, ``.tables`` (all three), ``.metrics``.

    Raises
    ------
    pydantic.ValidationError
        An unknown option or a value outside its range.
    crowdflow.contracts.errors.InputError
        A missing column, values of the wrong type, labels the fit cannot use.
    crowdflow.contracts.errors.ValidationFailed
        The table breaks its contract (null ids, a repeated (task, worker) pair, one label class …) and
        ``validation`` blocks.
    crowdflow.contracts.errors.GraphCheckFailed
        A bipartite component (skills not identifiable: blocks only ``method="pgd"``, as in the pipeline) or
        an isolated worker under a blocking policy.

    Examples
    --------
    >>> import pandas as pd
    >>> import crowdflow as cf
    >>> labels = pd.DataFrame({
    ...     "task": ["t1", "t1", "t1", "t2", "t2", "t2"],
    ...     "worker": ["a", "b", "c", "a", "b", "c"],
    ...     "label": ["x", "x", "y", "y", "y", "y"],
    ... })
    >>> fit = cf.skills(labels, method="mv")
    >>> fit.consensus[["task", "label"]].to_dict("records")
    [{'task': 't1', 'label': 'x'}, {'task': 't2', 'label': 'y'}]
    """
    o = SkillsOptions.resolve(options, **overrides)
    if o.gold_in_fit and truth is None:
        raise ValueError("gold_in_fit=True uses the known answers: pass them as truth (a DataFrame task, label)")
    modes = check_modes("skills", checks)
    if not o.needs_identifiable_skills:  # the pipeline's rule, from the same property
        modes["identifiability"] = "warn"
    dropped = 0

    def dedupe(table: LoadedTable) -> LoadedTable:
        nonlocal dropped
        if o.duplicates == "error":
            return table
        df, dropped = deduplicate(table.df, o.duplicates)
        return replace(table, df=df.reset_index(drop=True))

    allowed = {"label": o.classes} if o.classes else None
    lab = read_input(
        labels,
        "labels",
        columns_for("labels", columns, "labels"),
        validation=modes["validation"],
        allowed=allowed,
        prepare=dedupe,
    )
    gold = None
    if truth is not None:
        gold = read_input(truth, "truth", columns_for("truth", columns, "labels"), validation=modes["validation"]).df
    with input_errors(lab.source):
        lm = encode_labels(answered(lab.df), o.classes)
    graph = check_worker_graph(lm, modes["identifiability"], modes["isolated_workers"])
    for text in graph.warnings:
        log.warning("%s", text)
    graph.raise_if_blocking(lab.source)
    with input_errors(lab.source):
        if o.gold_in_fit and gold is not None:
            result = cross_fit(lm, o, gold, graph_report=graph.report)
        else:
            result = fit_skills(lm, o, graph_report=graph.report)
    review = review_skills(lab.df, result.consensus, gold, coded=lm)
    tables = written_tables("skills", output_tables(result, graph.report, review))
    baseline = majority_vote(lm, o.tie_break, o.seed).consensus if gold is not None else None
    metrics = output_metrics(result, gold, dropped, list(lm.classes), baseline) | review.metrics
    return SkillsFit(tables, metrics, graph, result, o)
