"""Robust global rankings from pairwise comparisons: HodgeRank, Hodge diagnostics, outliers.

See docs/methods/ranking.md.
"""
