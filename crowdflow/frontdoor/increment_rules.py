"""The per-file sums each input kind keeps in the increment store (issue #38): one table, used by every caller.

``labels`` → per-task class counts (:data:`crowdflow.skills.increments.LABEL_COUNTS`, majority vote);
``comparisons`` → per-pair sums (:data:`crowdflow.ranking.increments.PAIR_SUMS`, HodgeRank least squares).
:func:`crowdflow.storage.increments.forget` takes this table so an erasure updates the stored folds at once.
"""

from __future__ import annotations

import os

from crowdflow.ranking.increments import PAIR_SUMS
from crowdflow.skills.increments import LABEL_COUNTS
from crowdflow.storage.increments import Erasure, SumsRule
from crowdflow.storage.increments import forget as forget_in_store

__all__ = ["RULES", "forget"]

RULES: dict[str, SumsRule] = {"labels": LABEL_COUNTS, "comparisons": PAIR_SUMS}


def forget(out_dir: str | os.PathLike[str], pipeline: str, worker: str, timeout: float = 600.0) -> Erasure:
    """Erase ``worker`` from pipeline ``pipeline`` (``crowdflow forget``, ``cf.forget``), folds updated at once.

    :func:`crowdflow.storage.increments.forget` with every input kind's sums rule (:data:`RULES`): the stored rows
    of the files that held the worker are rewritten, their sums re-derived from those rows alone, and each stored
    fold has the old sums subtracted and the new added. Every later run, folded, incremental or full, leaves the
    worker's rows out; the store records a salted hash and counts, never the id.
    """
    return forget_in_store(out_dir, pipeline, worker, timeout, RULES)
