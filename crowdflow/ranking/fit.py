"""Entry points of the ranking job: the dispatch over the robust methods.

This module imports the algorithm modules; none of them imports it back.
"""

from __future__ import annotations

from typing import Any, Literal

import pandas as pd

from crowdflow.ranking.hodge import ComparisonGraph, RobustRankingResult, fit_hlasso
from crowdflow.ranking.lbi import fit_lbi

__all__ = ["fit_robust_hodgerank"]


def fit_robust_hodgerank(
    comparisons: pd.DataFrame | ComparisonGraph, *, method: Literal["lbi", "hlasso"] = "lbi", **kwargs: Any
) -> RobustRankingResult:
    """Dispatch to :func:`crowdflow.ranking.lbi.fit_lbi` (default) or :func:`fit_hlasso`."""
    if method == "hlasso":
        return fit_hlasso(comparisons, **kwargs)
    if method == "lbi":
        return fit_lbi(comparisons, **kwargs)
    raise ValueError(f"unknown robust ranking method {method!r} (use 'lbi' or 'hlasso')")
