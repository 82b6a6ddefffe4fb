"""crowdflow: worker skills, consensus labels, rankings and assignments from crowdsourcing data (the pure library).

The Python front door (:mod:`crowdflow.frontdoor.api`; docs/how-to/notebook.md)::

    import crowdflow as cf
    fit = cf.skills(labels)                      # consensus, skills, components: the tables a run writes
    cf.rank(comparisons, outliers="lbi").ranking
    cf.DawidSkene(n_iter=100).fit_predict(labels)  # Crowd-Kit's interface
    run = cf.latest_run("crowdflow-out", "rte-skills")

``cf.skills``, ``cf.personal_rankings`` and ``cf.personal_models`` are the job packages, callable as their job
(``cf.skills.fit_skills`` is still there). Everything but ``__version__`` and the error classes is imported on
first use, so ``import crowdflow`` stays light (the command line imports the package for every command).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from crowdflow._version import __version__
from crowdflow.contracts.errors import DegenerateInput, GraphCheckFailed, InputError, SpecError, ValidationFailed

if TYPE_CHECKING:  # what the lazy names below are, for type checkers and IDEs
    from crowdflow.assignment import AssignmentOptions
    from crowdflow.frontdoor.api import (
        AssignmentFit,
        DawidSkene,
        MajorityVote,
        OneCoinDawidSkene,
        PersonalModelsFit,
        PersonalRankingsFit,
        RankingFit,
        RankOneSkills,
        Run,
        SkillsFit,
        assign,
        forget,
        latest_run,
        rank,
        read_run,
    )
    from crowdflow.frontdoor.estimators import EBCC
    from crowdflow.personal_models import PersonalModelsOptions
    from crowdflow.personal_rankings import PersonalRankingsOptions
    from crowdflow.ranking import RankingOptions
    from crowdflow.skills import SkillsOptions

# name → (module, attribute); attribute None: the module itself (a job package, callable as its job)
_LAZY: dict[str, tuple[str, str | None]] = {
    "skills": ("crowdflow.skills", None),
    "personal_rankings": ("crowdflow.personal_rankings", None),
    "personal_models": ("crowdflow.personal_models", None),
    **{
        name: ("crowdflow.frontdoor.api", name)
        for name in (
            "rank",
            "assign",
            "forget",
            "read_run",
            "latest_run",
            "Run",
            "SkillsFit",
            "RankingFit",
            "PersonalRankingsFit",
            "PersonalModelsFit",
            "AssignmentFit",
            "MajorityVote",
            "DawidSkene",
            "OneCoinDawidSkene",
            "RankOneSkills",
        )
    },
    "EBCC": ("crowdflow.frontdoor.estimators", "EBCC"),
    "SkillsOptions": ("crowdflow.skills", "SkillsOptions"),
    "RankingOptions": ("crowdflow.ranking", "RankingOptions"),
    "PersonalRankingsOptions": ("crowdflow.personal_rankings", "PersonalRankingsOptions"),
    "PersonalModelsOptions": ("crowdflow.personal_models", "PersonalModelsOptions"),
    "AssignmentOptions": ("crowdflow.assignment", "AssignmentOptions"),
}

__all__ = [
    "EBCC",
    "AssignmentFit",
    "AssignmentOptions",
    "DawidSkene",
    "DegenerateInput",
    "GraphCheckFailed",
    "InputError",
    "MajorityVote",
    "OneCoinDawidSkene",
    "PersonalModelsFit",
    "PersonalModelsOptions",
    "PersonalRankingsFit",
    "PersonalRankingsOptions",
    "RankOneSkills",
    "RankingFit",
    "RankingOptions",
    "Run",
    "SkillsFit",
    "SkillsOptions",
    "SpecError",
    "ValidationFailed",
    "__version__",
    "assign",
    "forget",
    "latest_run",
    "personal_models",
    "personal_rankings",
    "rank",
    "read_run",
    "skills",
]


def __getattr__(name: str) -> Any:
    """Import a front-door name on first use (PEP 562)."""
    try:
        module_name, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'crowdflow' has no attribute {name!r}") from None
    module = importlib.import_module(module_name)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
