"""Names shared by the modules of the skills package: the choices of the fit and the worker statuses.

The algorithm modules and the options model (:mod:`crowdflow.skills.options`) use these ``Literal`` types,
so a choice is spelled the same way everywhere. What each choice does: docs/methods/skills.md §8.
"""

from __future__ import annotations

from typing import Literal

#: edge weights w_ij = B(N_ij) of the objective (docs/methods/skills.md §2.2)
Weighting = Literal["count", "binary", "square"]
#: rank-one solvers (docs/methods/skills.md §2.3 gd, §2.9 scaled, §2.5 eg)
Solver = Literal["scaled", "gd", "eg"]
#: sign resolution per component (docs/methods/skills.md §2.4)
SignMode = Literal["sum_rule", "bfs"]
#: what an unidentifiable component does to the fit: raise, or fit the rest and flag it (docs/methods/skills.md §3.3)
Policy = Literal["raise", "flag"]
#: tasks none of whose labellers is identified: majority vote, or zero weights (docs/methods/skills.md §3.3)
Fallback = Literal["mv", "zero"]
#: crowdflow's own aggregation methods
NativeMethod = Literal["pgd", "onecoin_ds", "ds", "mv", "ebcc"]
#: Crowd-Kit's classification aggregators, run by crowd-kit itself (an optional extra;
#: crowdflow/skills/crowdkit_adapter.py, docs/methods/skills.md §7.7)
CrowdkitMethod = Literal[
    "crowdkit:DawidSkene",
    "crowdkit:OneCoinDawidSkene",
    "crowdkit:GLAD",
    "crowdkit:KOS",
    "crowdkit:MACE",
    "crowdkit:MajorityVote",
    "crowdkit:MMSR",
    "crowdkit:Wawa",
    "crowdkit:ZeroBasedSkill",
]
#: the aggregation method of ``fit_skills``
Method = Literal["auto", NativeMethod, CrowdkitMethod]
#: the candidates of ``method: auto`` (the keys of ``crowdflow.skills.auto.CANDIDATES``, which a test keeps equal)
AutoCandidate = Literal["ds", "ds_classic", "onecoin_ds", "mv", "ebcc"]
#: ties among the top classes of a vote: a seeded random draw, or the first class in label order
#: (docs/methods/skills.md §2.7)
TieBreak = Literal["random", "smallest"]

#: worker statuses of the skills table (docs/methods/skills.md §3.3)
STATUSES = ("ok", "isolated", "bipartite_component", "too_few_labels")
