"""The options of the personal-rankings job, declared once.

:class:`PersonalRankingsOptions` is the ``personal_rankings:`` block of a pipeline spec (and of the
Prefect form), the ``options=`` argument of :func:`~crowdflow.personal_rankings.fit_personal_rankings`
and the keyword overrides of a notebook call, so a default, a range or a choice is the same through
every door. Each numeric field carries the range the method's numerics honour (measured on the
synthetic instances; docs/methods/personal_rankings.md §4 gives each option, its default and why), and
combinations the fit cannot use are refused here, at spec parse time (exit 2), not inside the fit.
"""

from __future__ import annotations

from typing import Self

from pydantic import Field, ValidationInfo, field_validator, model_validator

from crowdflow.contracts.options import Options
from crowdflow.personal_rankings.types import (
    DEFAULT_ALPHA,
    DEFAULT_GTOL,
    DEFAULT_MU,
    DEFAULT_SIGMA,
    InvalidPolicy,
    Method,
    RankCriterion,
)

__all__ = ["MAX_RANK", "MAX_RANK_GRID", "PersonalRankingsOptions"]

MAX_RANK = 1000  # the fit costs O(m n r) per evaluation and needs r <= min(users, items)
MAX_RANK_GRID = 20  # each candidate rank of a grid is one more full fit


class PersonalRankingsOptions(Options):
    """Scores and a ranking of the items for every annotator, learned from their pairwise comparisons.

    Annotators' scores are modelled as a low-rank matrix, so an annotator who compared few items
    borrows information from annotators with similar taste.
    """

    rank: int | list[int] = Field(
        5,
        description="Number of hidden taste dimensions shared by the annotators; give a list (e.g. [1, 2, 3]) to "
        "pick the best one on held-out comparisons.",
    )
    method: Method = Field(
        "lbfgs",
        description="Optimizer: lbfgs (L-BFGS, the fastest) or rtr (Riemannian trust region, slower but drives "
        "the gradient to a certified tiny value).",
    )
    sigma: float = Field(
        DEFAULT_SIGMA,
        ge=0.01,
        le=100.0,
        description="Temperature of the comparison model: smaller values make outcomes more deterministic for a "
        "given score difference (0.01 to 100).",
    )
    lambda_: float | None = Field(
        None,
        ge=0.0,
        le=1e8,
        description="Strength of the penalty that keeps scores from growing without bound; empty uses the "
        "paper's rule rank² · √K · ln K, 0 turns the penalty off.",
    )
    lambda_scale: float = Field(
        1.0,
        ge=0.0,
        le=1000.0,
        description="Multiplier applied to the paper's penalty rule when lambda_ is empty (1 = the paper's value).",
    )
    K: int | None = Field(
        None,
        ge=1,
        le=10**9,
        description="Size used by the penalty rule; empty means the larger of the numbers of annotators and items.",
    )
    mu: float = Field(
        DEFAULT_MU,
        ge=0.01,
        le=100.0,
        description="Smoothing of the penalty's soft maximum: smaller values follow the largest score more "
        "closely (0.01 to 100; the paper uses 1).",
    )
    alpha: float = Field(
        DEFAULT_ALPHA,
        ge=1e-6,
        le=1e6,
        description="Largest absolute value of the exported scores (they are rescaled to it; rankings do not change).",
    )
    max_iter: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="Maximum number of optimizer iterations; empty means 2000 for lbfgs and 500 for rtr.",
    )
    gtol: float = Field(
        DEFAULT_GTOL,
        ge=1e-12,
        le=1e-2,
        description="The fit counts as converged once the gradient is smaller than this (1e-12 to 1e-2).",
    )
    time_limit: float | None = Field(
        None,
        gt=0.0,
        le=86_400.0,
        description="Stop the optimizer after this many seconds (reported as not converged); empty means no limit.",
    )
    seed: int = Field(0, ge=0, description="Seed of the random starting point, so that a rerun gives the same result.")
    on_invalid: InvalidPolicy = Field(
        "raise",
        description="What to do with unusable rows (missing ids, an item compared with itself, a bad outcome or "
        "weight): raise stops with an error naming the rows, drop skips and counts them.",
    )
    holdout_fraction: float = Field(
        0.2,
        ge=0.01,
        le=0.5,
        description="Share of the comparisons set aside to choose the rank when rank is a list (0.01 to 0.5).",
    )
    rank_criterion: RankCriterion = Field(
        "nll",
        description="How a rank list is judged on the held-out comparisons: nll (how well the predicted "
        "probabilities fit) or accuracy (how often the predicted winner won).",
    )

    @field_validator("rank", "K", "max_iter", "seed", mode="before")
    @classmethod
    def _no_booleans(cls, v: object, info: ValidationInfo) -> object:
        # YAML reads yes / true as a boolean, which pydantic would quietly take as the number 1
        if isinstance(v, bool) or (isinstance(v, list) and any(isinstance(x, bool) for x in v)):
            raise ValueError(f"{info.field_name} must be a whole number, got {v!r}")
        return v

    @field_validator("rank")
    @classmethod
    def _ranks_in_range(cls, v: int | list[int]) -> int | list[int]:
        ranks = v if isinstance(v, list) else [v]
        if not ranks or any(r < 1 or r > MAX_RANK for r in ranks):
            raise ValueError(
                f"rank must be between 1 and {MAX_RANK} (a whole number, or a non-empty list of them), got {v}"
            )
        if len(set(ranks)) > MAX_RANK_GRID:
            raise ValueError(
                f"a rank list holds at most {MAX_RANK_GRID} different ranks (one fit each), got {len(set(ranks))}"
            )
        return v

    @model_validator(mode="after")
    def _lambda_rule_or_value(self) -> Self:
        if self.lambda_ is not None:
            shaped = [k for k in ("lambda_scale", "K") if k in self.model_fields_set]
            if shaped:
                raise ValueError(
                    f"{' and '.join(shaped)} only {'shape' if len(shaped) > 1 else 'shapes'} the default penalty "
                    "rule, which is not used when lambda_ is given; set either lambda_ or the rule's lambda_scale / K"
                )
        return self
