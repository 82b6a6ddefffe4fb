"""Robust global rankings from pairwise comparisons: HodgeRank, Hodge diagnostics, outliers.

See docs/methods/ranking.md.
"""

from crowdflow.ranking.fit import fit_robust_hodgerank
from crowdflow.ranking.hodge import (
    ComparisonGraph,
    GraphReport,
    LaplacianSolver,
    RankingResult,
    RobustRankingResult,
    build_comparison_graph,
    canonical_comparisons,
    check_comparison_graph,
    comparisons_from_winners,
    fit_hlasso,
    fit_hodgerank,
    group_identical_rows,
    hlasso_path,
    hodgerank_scores,
    laplacian_lambda_max,
    shrink,
)
from crowdflow.ranking.lbi import LBIPath, fit_lbi, lbi_alg2, lbi_alg3, sync_lbi

__all__ = [
    "ComparisonGraph",
    "GraphReport",
    "LBIPath",
    "LaplacianSolver",
    "RankingResult",
    "RobustRankingResult",
    "build_comparison_graph",
    "canonical_comparisons",
    "check_comparison_graph",
    "comparisons_from_winners",
    "fit_hlasso",
    "fit_hodgerank",
    "fit_lbi",
    "fit_robust_hodgerank",
    "group_identical_rows",
    "hlasso_path",
    "hodgerank_scores",
    "laplacian_lambda_max",
    "lbi_alg2",
    "lbi_alg3",
    "shrink",
    "sync_lbi",
]
