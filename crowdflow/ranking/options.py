"""The options of the ranking job, declared once: :class:`RankingOptions`.

The same frozen model is the ``ranking:`` section of a pipeline spec (and the Prefect form), the
``options=`` argument of :func:`crowdflow.ranking.fit_ranking`, :func:`~crowdflow.ranking.fit_hodgerank`,
:func:`~crowdflow.ranking.fit_hlasso` and :func:`~crowdflow.ranking.fit_lbi`, and the source of the
defaults of the lower-level algorithm functions (the constants below), so a notebook call and a pipeline
run with defaults are the same fit. Every number is finite and range-checked; combinations the fit cannot
run are refused when the model is built (a spec error, exit 2). What each option does, and why its
default, is in docs/methods/ranking.md §6.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, model_validator

from crowdflow.contracts.options import Options, backfill_field, incremental_field

__all__ = [
    "FDR_Q",
    "HLASSO_MAX_ITER",
    "HUBER_A",
    "HUBER_M",
    "LBI_MAX_ITER",
    "T_MIN",
    "LambdaRule",
    "OutlierMethod",
    "RankingOptions",
    "SolverMethod",
    "StopRule",
]

OutlierMethod = Literal["lbi", "hlasso", "trimmed", "none"]
StopRule = Literal["adaptive", "budget", "time", "discrepancy", "none"]
LambdaRule = Literal["adaptive", "budget", "concomitant", "fixed", "magnitude"]
SolverMethod = Literal["auto", "splu", "cg"]

#: Huber's constant M (about 95 % efficiency under Gaussian noise), docs/methods/ranking.md §3.4.1.
HUBER_M = 1.35
#: Huber's Fisher-consistent constant E[min(Z², M²)] for M = 1.35, Z ~ N(0, 1) (docs/methods/ranking.md §3.4.1).
HUBER_A = 0.7126
#: Target false discovery rate of the adaptive rule (docs/methods/ranking.md §3.4.2).
FDR_Q = 0.1
#: Floor of the adaptive threshold in noise levels: Φ̄⁻¹(0.005), at most 1 % of clean rows beyond it.
T_MIN = 2.576
#: FISTA iteration cap per λ of the HLASSO solver when ``max_iter`` is not set.
HLASSO_MAX_ITER = 20_000
#: LBI iteration cap per algorithm when ``max_iter`` is not set (Algorithm 3 needs far fewer steps).
LBI_MAX_ITER: dict[int, int] = {2: 200_000, 3: 100_000, 4: 200_000}


class RankingOptions(Options):
    """Scores items from pairwise comparisons and flags the comparisons that contradict the overall ranking.

    Scores are only comparable between items that are linked by a chain of comparisons.
    """

    outliers: OutlierMethod = Field(
        "lbi",
        description="How to find comparisons that disagree with the ranking: lbi follows the outliers' entry "
        "order along one iterative path, hlasso solves a robust (Huber) regression, trimmed thresholds one "
        "trimmed least-squares fit (what runs when Dask workers read the comparisons), none skips the search.",
    )
    fdr_q: float = Field(
        FDR_Q,
        gt=0.0,
        le=0.5,
        description="Adaptive rule (the default): the share of false alarms accepted among the flagged "
        "comparisons; on data without outliers nothing is flagged in about 1 - fdr_q of the cases.",
    )
    t_min: float = Field(
        T_MIN,
        ge=1.0,
        le=10.0,
        description="Adaptive rule: the smallest outlier threshold, in estimated noise levels; 2.576 keeps false "
        "alarms below one in a hundred clean comparisons however many outliers there are.",
    )
    binary_rule: Literal["upset_gap", "law"] = Field(
        "upset_gap",
        description="Adaptive rule on win/loss (and tie) outcomes: upset_gap flags upsets between items far apart "
        "in the fitted ranking; law flags outcomes improbable under a Bradley-Terry (Rao-Kupper with ties) model "
        "fitted robustly once a held-out test finds reversals: more precise and no false alarms on clean data, but "
        "missing most outliers on sparse graphs (about 8 comparisons per item) and 13-76x slower "
        "(docs/methods/ranking.md).",
    )
    budget: float = Field(
        0.05,
        gt=0.0,
        lt=1.0,
        description="Share of the comparisons (by weight) flagged as outliers by the budget rule (lambda_rule or "
        "stop_rule budget), whatever the data; 0.05 flags the most inconsistent twentieth.",
    )
    allow_disconnected: bool = Field(
        True,
        description="Rank every group of connected items on its own when the comparisons do not link all "
        "items (each item then carries its group id); off refuses such data.",
    )
    group_identical: bool = Field(
        True,
        description="Merge comparisons of the same pair with the same outcome into one weighted row before "
        "fitting; the result is identical and the fit is faster.",
    )
    debias: bool = Field(
        True,
        description="Report scores refitted without the flagged comparisons, which removes the shrinkage a "
        "robust fit puts on the scores.",
    )
    diagnostics: bool = Field(
        True,
        description="Compute the per-group inconsistency table (how much of the data no ranking explains, "
        "cyclic triangles, conditioning).",
    )
    solver: SolverMethod = Field(
        "auto",
        description="Linear solver for the score equations: splu factorises once (best up to a few thousand "
        "items), cg iterates (large item sets), auto picks by size.",
    )
    seed: int = Field(
        0,
        ge=0,
        le=2**63 - 1,
        description="Random seed; no ranking rule draws random numbers since the cross-validation rules were "
        "removed, so it changes nothing (kept so that specs which set it stay valid).",
    )
    max_iter: int | None = Field(
        None,
        ge=1,
        le=10_000_000,
        description="Iteration cap of the outlier search; empty uses the method's default (LBI 100,000 for "
        "algorithm 3 and 200,000 otherwise, HLASSO 20,000 per threshold). A fit that hits it is marked "
        "as not converged.",
    )
    huber_m: float = Field(
        HUBER_M,
        ge=0.1,
        le=10.0,
        description="Huber's constant M: residuals above M noise levels count as outliers when the noise level "
        "is estimated from the data (HLASSO lambda_rule concomitant, LBI stop_rule discrepancy).",
    )
    scale_a: float = Field(
        HUBER_A,
        gt=0.0,
        le=1.0,
        description="Constant of the noise-level estimate: 0.7126 makes it unbiased for Gaussian noise, 1 is "
        "the paper's literal formula (it underestimates the noise by about a third).",
    )
    # LBI
    algorithm: Literal[2, 3, 4] = Field(
        3,
        description="LBI variant: 3 solves the scores exactly at every step (fewest steps), 2 takes gradient "
        "steps on the scores, 4 is variant 2 run on several threads.",
    )
    kappa: float = Field(
        100.0,
        ge=0.01,
        le=1e5,
        description="LBI damping: larger values follow the ideal unbiased path more closely but need more "
        "steps per unit of path time.",
    )
    dt: float | None = Field(
        None,
        ge=1e-12,
        le=200.0,
        description="LBI step size; empty uses 1/kappa for algorithm 3 and the largest safe step for 2 and 4. "
        "kappa times dt must stay below 2.",
    )
    stop_rule: StopRule = Field(
        "adaptive",
        description="When LBI stops: adaptive (where the path reaches the adaptive rule's threshold, "
        "t = 1/lambda*), budget (the outlier budget is reached), time (at t_stop), discrepancy "
        "(the residual matches the noise level sigma) or "
        "none (run to t_max or the iteration cap).",
    )
    t_stop: float | None = Field(
        None,
        ge=0.0,
        le=1e6,
        description="Path time at which stop_rule time stops LBI (required by that rule).",
    )
    t_max: float | None = Field(
        None,
        gt=0.0,
        le=1e6,
        description="Path time LBI runs to after stopping, so more comparisons get an entry time.",
    )
    sigma: float | None = Field(
        None,
        ge=1e-6,
        le=1e6,
        description="Noise level of the outcomes, in outcome units, for stop_rule discrepancy; empty estimates "
        "it from the data.",
    )
    theta0: Literal["ls", "zero"] = Field(
        "ls",
        description="Starting scores of LBI algorithms 2 and 4: the least-squares scores (ls) or all zero.",
    )
    n_workers: int = Field(2, ge=1, le=64, description="Threads used by LBI algorithm 4.")
    checkpoint_every: int | None = Field(
        None,
        ge=1,
        le=10_000_000,
        description="Store the outlier values every this many LBI steps in the path table; empty stores about "
        "50 snapshots up to t_max, otherwise one every 100 steps.",
    )
    # HLASSO
    lambda_rule: LambdaRule = Field(
        "adaptive",
        description="How HLASSO picks its outlier threshold: adaptive (a number of robustly estimated noise "
        "levels set by a false-discovery-rate cut, for graded outcomes; an upset-curve cut for +-1 "
        "outcomes), budget (flag the budget share first on the path), "
        "concomitant (M times an estimated noise level), fixed (the value lam) or "
        "magnitude (1, for ±1 outcomes).",
    )
    lam: float | None = Field(
        None,
        ge=1e-8,
        le=1e8,
        description="Outlier threshold in outcome units for lambda_rule fixed: a comparison whose residual "
        "exceeds it is flagged (required by that rule).",
    )
    n_lambdas: int = Field(
        100,
        ge=2,
        le=10_000,
        description="Number of thresholds on the HLASSO path from the largest residual down.",
    )
    lambda_min_ratio: float = Field(
        0.01,
        ge=1e-8,
        lt=1.0,
        description="Smallest threshold of the HLASSO path as a fraction of the largest one.",
    )
    tol: float = Field(
        1e-10,
        ge=1e-15,
        le=1e-3,
        description="Accuracy at which the HLASSO solver stops at each threshold, relative to the largest outcome.",
    )
    incremental: bool = incremental_field()
    backfill: list[str] = backfill_field()

    @model_validator(mode="after")
    def _runnable(self) -> Self:
        """Refuse the combinations the fit cannot run (docs/methods/ranking.md §6.5)."""
        if self.stop_rule == "time" and self.t_stop is None:
            raise ValueError("stop_rule 'time' needs t_stop (the path time at which LBI stops)")
        if self.lambda_rule == "fixed" and self.lam is None:
            raise ValueError("lambda_rule 'fixed' needs lam (the outlier threshold)")
        if self.dt is not None and self.kappa * self.dt >= 2.0:
            raise ValueError(
                f"kappa * dt = {self.kappa * self.dt:.4g} >= 2: LBI diverges; use dt < {2.0 / self.kappa:.4g} "
                "or leave dt empty"
            )
        if self.scale_a >= self.huber_m**2:
            raise ValueError(
                f"scale_a = {self.scale_a:g} must be below huber_m² = {self.huber_m**2:.4g}, or the noise-level "
                "estimate is always 0"
            )
        return self

    def lbi_max_iter(self) -> int:
        """The LBI iteration cap: ``max_iter`` or the algorithm's default."""
        return self.max_iter if self.max_iter is not None else LBI_MAX_ITER[self.algorithm]

    def hlasso_max_iter(self) -> int:
        """The HLASSO iteration cap per threshold: ``max_iter`` or its default."""
        return self.max_iter if self.max_iter is not None else HLASSO_MAX_ITER
