"""The per-file sums each input kind keeps in the increment store (issue #38): one table, used by every caller.

``labels`` → per-task class counts (:data:`crowdflow.skills.increments.LABEL_COUNTS`, majority vote);
``comparisons`` → per-pair sums (:data:`crowdflow.ranking.increments.PAIR_SUMS`, HodgeRank least squares).
:func:`crowdflow.storage.increments.forget` takes this table so an erasure updates the stored folds at once.
"""

from __future__ import annotations

from crowdflow.ranking.increments import PAIR_SUMS
from crowdflow.skills.increments import LABEL_COUNTS
from crowdflow.storage.increments import SumsRule

__all__ = ["RULES"]

RULES: dict[str, SumsRule] = {"labels": LABEL_COUNTS, "comparisons": PAIR_SUMS}
