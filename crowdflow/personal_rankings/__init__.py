"""Per-user rankings from pairwise comparisons by low-rank Bradley-Terry-Luce.

See docs/methods/personal_rankings.md.
"""

from crowdflow.personal_rankings.fit import (
    ConvexBaselineResult,
    GlobalBTLResult,
    PairData,
    PersonalComparisons,
    PersonalRankingDiagnostics,
    PersonalRankingResult,
    SyntheticPersonalComparisons,
    borda_scores,
    encode_personal_comparisons,
    fit_convex_baseline,
    fit_convex_spg,
    fit_global_btl,
    fit_low_rank_btl,
    fit_personal_rankings,
    mean_kendall_tau,
    rankings_from_scores,
    relative_error,
    select_rank,
    split_holdout,
    synthetic_personal_comparisons,
)

__all__ = [
    "ConvexBaselineResult",
    "GlobalBTLResult",
    "PairData",
    "PersonalComparisons",
    "PersonalRankingDiagnostics",
    "PersonalRankingResult",
    "SyntheticPersonalComparisons",
    "borda_scores",
    "encode_personal_comparisons",
    "fit_convex_baseline",
    "fit_convex_spg",
    "fit_global_btl",
    "fit_low_rank_btl",
    "fit_personal_rankings",
    "mean_kendall_tau",
    "rankings_from_scores",
    "relative_error",
    "select_rank",
    "split_holdout",
    "synthetic_personal_comparisons",
]
