"""Per-user rankings from pairwise comparisons by low-rank Bradley-Terry-Luce.

See docs/methods/personal_rankings.md.
"""
