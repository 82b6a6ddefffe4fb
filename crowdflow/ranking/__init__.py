"""Robust global rankings from pairwise comparisons: HodgeRank, Hodge diagnostics, outliers.

The job's entry point is :func:`fit_ranking` with :class:`RankingOptions` (the ``ranking:`` section of a
pipeline spec); it runs :func:`fit_lbi` (Linearized Bregman Iterations), :func:`fit_hlasso`
(Huber-LASSO) or :func:`fit_hodgerank` (least squares per connected component), which take the same
options. The building blocks they use are exported for simulations and benchmarks. See
docs/methods/ranking.md.

The job's front door is :func:`rank` (``crowdflow.rank(comparisons)``: a DataFrame in, the tables a ranking run
writes out); :func:`output_tables` gives those tables from a fit, for the pipeline and the front door alike.
"""

from crowdflow.contracts.comparisons import canonical_comparisons, comparisons_from_winners
from crowdflow.ranking.door import RankingFit, output_tables, rank
from crowdflow.ranking.fit import fit_hlasso, fit_hodgerank, fit_lbi, fit_ranking
from crowdflow.ranking.graph import (
    ComparisonGraph,
    build_comparison_graph,
    check_comparison_graph,
    group_identical_rows,
)
from crowdflow.ranking.hlasso import LassoFit, LassoPath, hlasso, hlasso_path
from crowdflow.ranking.hodge import HodgeDecomposition, hodge_decomposition, undetectable_rows
from crowdflow.ranking.identifiability import Identifiability, identifiability
from crowdflow.ranking.intervals import score_intervals
from crowdflow.ranking.lbi import lbi_alg2, lbi_alg3, sync_lbi
from crowdflow.ranking.lbi_path import LBIPath
from crowdflow.ranking.least_squares import LaplacianSolver, hodgerank_scores, laplacian_lambda_max, refit_without
from crowdflow.ranking.numerics import shrink
from crowdflow.ranking.options import RankingOptions
from crowdflow.ranking.scale import ScaleEstimate, huber_concomitant_scale
from crowdflow.ranking.types import GraphReport, RankingResult, RobustRankingResult

__all__ = [
    "ComparisonGraph",
    "GraphReport",
    "HodgeDecomposition",
    "Identifiability",
    "LBIPath",
    "LaplacianSolver",
    "LassoFit",
    "LassoPath",
    "RankingFit",
    "RankingOptions",
    "RankingResult",
    "RobustRankingResult",
    "ScaleEstimate",
    "build_comparison_graph",
    "canonical_comparisons",
    "check_comparison_graph",
    "comparisons_from_winners",
    "fit_hlasso",
    "fit_hodgerank",
    "fit_lbi",
    "fit_ranking",
    "group_identical_rows",
    "hlasso",
    "hlasso_path",
    "hodge_decomposition",
    "hodgerank_scores",
    "huber_concomitant_scale",
    "identifiability",
    "laplacian_lambda_max",
    "lbi_alg2",
    "lbi_alg3",
    "output_tables",
    "rank",
    "refit_without",
    "score_intervals",
    "shrink",
    "sync_lbi",
    "undetectable_rows",
]
