"""The options of the personal-models fit, declared once.

:class:`PersonalModelsOptions` is the ``options=`` argument of
:func:`crowdflow.personal_models.fit_personal_models`, the ``personal_models:`` section of a pipeline
spec (:mod:`crowdflow.spec`) and the Prefect form of the personal-models deployment, so a default, a
range or a choice is the same for a notebook call and a pipeline run. The ranges are the ones the
numerics honour (docs/methods/personal_models.md §8.3); combinations the fit cannot run are refused when the spec is
parsed (docs/methods/personal_models.md §8.4).
"""

from __future__ import annotations

from typing import Any, Literal, Self, get_args

from pydantic import Field, ValidationInfo, field_validator, model_validator

from crowdflow.contracts.options import Options
from crowdflow.personal_models.problem import DEFAULT_REG, RESERVED_COLUMNS

Loss = Literal["quadratic", "ridge", "huber", "logistic"]
Method = Literal["djam", "centralized", "cl_admm", "djam_blocked"]
EngineOption = Literal["matching", "simulation"]

#: Losses that are strongly convex only through the prior: they need ``reg > 0`` (docs/methods/personal_models.md §1.4).
NEEDS_REG = ("ridge", "huber", "logistic")
_CHOICES: dict[str, tuple[str, ...]] = {
    "loss": get_args(Loss),
    "method": get_args(Method),
    "engine": get_args(EngineOption),
}


class PersonalModelsOptions(Options):
    """Fit one model per agent that is pulled towards the models of similar agents. The defaults fit
    a least-squares model with a light ridge penalty per agent with DJAM and certify its accuracy."""

    loss: Loss = Field(
        "quadratic",
        description="The loss of each agent's data: quadratic (least squares), ridge (least squares that "
        "requires a positive reg), huber (one robust value per agent, outliers count less) or logistic "
        "(yes/no targets such as pairwise preferences).",
    )
    method: Method = Field(
        "djam",
        description="How the models are computed: djam (agents exchange models edge by edge), centralized "
        "(the exact optimum in one solve), cl_admm (the ADMM method DJAM is compared with) or djam_blocked "
        "(DJAM on blocks of the graph that can run in parallel).",
    )
    reg: float | None = Field(
        None,
        ge=0.0,
        le=1e12,
        description=f"How strongly each agent's model is pulled towards its prior mean (a ridge penalty); "
        f"empty means {DEFAULT_REG}, and a reg column in the agents table sets it per agent.",
    )
    prior_mean: float = Field(
        0.0,
        ge=-1e100,
        le=1e100,
        description="The value every parameter of an agent's model is pulled towards by reg; a prior_mean "
        "column in the agents table sets it per agent.",
    )
    huber_c: float = Field(
        1.0,
        ge=1e-6,
        le=1e6,
        description="Huber loss only: the weight of an agent's own observations against its prior "
        "(larger trusts the data more).",
    )
    huber_kappa: float = Field(
        1.345,
        ge=1e-6,
        le=1e6,
        description="Huber loss only: the size of a residual, in the units of y, beyond which an "
        "observation counts as an outlier and loses influence.",
    )
    tol: float = Field(
        1e-8,
        ge=1e-12,
        lt=1.0,
        description="Stop when the guaranteed (certified) relative error of the models is below this value; "
        "smaller is more accurate and takes more rounds.",
    )
    max_rounds: int | None = Field(
        None,
        ge=1,
        le=10**12,
        description="The most rounds, each one exchange between two neighbouring agents, before a run stops "
        "with a warning without reaching tol (empty: 500 times the number of edges).",
    )
    rho: float = Field(
        0.316,
        ge=1e-4,
        le=1e4,
        description="cl_admm only: the ADMM penalty; its best value depends on the data, which is why "
        "DJAM, which has no such setting, is the default.",
    )
    n_blocks: int = Field(
        4,
        ge=1,
        le=1_000_000,
        description="djam_blocked only: the number of blocks the agent graph is cut into; each block is "
        "one work item that can run in parallel.",
    )
    engine: EngineOption = Field(
        "matching",
        description="matching applies the exchanges between agents in batches where no agent appears twice "
        "(the same result, much faster); simulation applies them one at a time (the reference).",
    )
    executor: Literal["inline", "dask"] = Field(
        "inline",
        description="djam_blocked only: run the blocks in this process or as Dask tasks; this changes "
        "where the fit runs, not its result.",
    )
    dask_address: str | None = Field(
        None,
        description="The Dask scheduler address for executor dask (empty: start a local cluster); this "
        "changes where the fit runs, not its result.",
    )
    features: list[str] | None = Field(
        None,
        description="The numeric columns of the agents table used as features (empty: every numeric "
        "column except agent, y and the per-agent settings; with none left, one value per agent).",
    )
    seed: int = Field(
        0,
        ge=0,
        le=2**63 - 1,
        description="Seed of the random order in which neighbouring agents exchange models; the same seed "
        "gives the same result.",
    )

    @field_validator("loss", "method", "engine", mode="before")
    @classmethod
    def _known_choice(cls, value: Any, info: ValidationInfo) -> Any:
        """Name the field and its choices (``unknown method 'x' (djam | ...)``) instead of a bare literal error."""
        choices = _CHOICES[str(info.field_name)]
        if isinstance(value, str) and value not in choices:
            raise ValueError(f"unknown {info.field_name} '{value}' ({' | '.join(choices)})")
        return value

    @field_validator("features")
    @classmethod
    def _usable_features(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        dup = sorted({c for c in value if value.count(c) > 1})
        if dup:
            raise ValueError(f"features: {dup} listed more than once")
        reserved = [c for c in value if c in RESERVED_COLUMNS or not c.strip()]
        if reserved:
            raise ValueError(
                f"features: {reserved} cannot be features (agent, y, x, weight and the per-agent settings "
                "reg, prior_mean, huber_c, huber_kappa have their own meaning; names must not be empty)"
            )
        return value

    @model_validator(mode="after")
    def _runnable(self) -> Self:
        if self.loss in NEEDS_REG and self.reg == 0:
            raise ValueError(
                f"reg: 0 with loss {self.loss}: the loss is not strongly convex without a prior, so the fit "
                f"has no unique solution; leave reg empty ({DEFAULT_REG}) or set it > 0"
            )
        if self.loss == "huber" and self.features:
            raise ValueError(
                "features with loss huber: the Huber model is one value per agent and uses no features; "
                "remove features or choose loss quadratic or logistic"
            )
        return self

    @property
    def parallel_blocks(self) -> bool:
        """True when the fit has independent blocks that an executor (e.g. Dask) can run in parallel."""
        return self.method == "djam_blocked"
