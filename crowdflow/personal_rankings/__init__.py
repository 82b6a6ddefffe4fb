"""Per-user rankings from pairwise comparisons by low-rank Bradley-Terry-Luce.

Entry point :func:`fit_personal_rankings` → :class:`PersonalRankingResult`; the comparison-table
encoding (:func:`encode_personal_comparisons`), the one-rank fit and held-out rank selection
(:func:`fit_low_rank_btl`, :func:`select_rank`), the baselines (convex nuclear-norm MLE, global BTL)
and the metrics. Synthetic instances: :mod:`crowdflow.synth.personal_rankings`.

See docs/methods/personal_rankings.md.

The package is also the job's front door: ``crowdflow.personal_rankings(comparisons, rank=3)`` is
:func:`crowdflow.personal_rankings.door.personal_rankings`; :func:`output_tables` gives a run's tables from a fit.
"""

from crowdflow._modules import callable_package
from crowdflow.personal_rankings.baselines import (
    ConvexBaselineResult,
    GlobalBTLResult,
    fit_convex_baseline,
    fit_convex_spg,
    fit_global_btl,
)
from crowdflow.personal_rankings.btl import fit_low_rank_btl, select_rank, split_holdout
from crowdflow.personal_rankings.door import PersonalRankingsFit, output_tables
from crowdflow.personal_rankings.door import personal_rankings as _front_door
from crowdflow.personal_rankings.encoding import PersonalComparisons, encode_personal_comparisons
from crowdflow.personal_rankings.fit import PersonalRankingDiagnostics, PersonalRankingResult, fit_personal_rankings
from crowdflow.personal_rankings.metrics import borda_scores, mean_kendall_tau, rankings_from_scores, relative_error
from crowdflow.personal_rankings.options import PersonalRankingsOptions
from crowdflow.personal_rankings.types import PairData

__all__ = [
    "ConvexBaselineResult",
    "GlobalBTLResult",
    "PairData",
    "PersonalComparisons",
    "PersonalRankingDiagnostics",
    "PersonalRankingResult",
    "PersonalRankingsFit",
    "PersonalRankingsOptions",
    "borda_scores",
    "encode_personal_comparisons",
    "fit_convex_baseline",
    "fit_convex_spg",
    "fit_global_btl",
    "fit_low_rank_btl",
    "fit_personal_rankings",
    "mean_kendall_tau",
    "output_tables",
    "rankings_from_scores",
    "relative_error",
    "select_rank",
    "split_holdout",
]

# crowdflow.personal_rankings(...) runs the job (the package stays a package)
callable_package(__name__, _front_door)
