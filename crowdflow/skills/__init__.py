"""Worker skills and consensus labels from sparse worker x task labels (see docs/methods/skills.md).

The entry point is :func:`fit_skills` (rank-one PGD, Dawid–Skene EM or majority vote on a labels table),
configured by one :class:`SkillsOptions` object (the ``skills:`` section of a pipeline spec);
:func:`fit_skills_partitioned` fits a Parquet dataset larger than memory in passes over task buckets (in this
process or on a Dask cluster; docs/scale.md), and :func:`write_label_partitions` / :func:`partition_pair_counts` /
:func:`moments_from_partitions` compute the co-label statistics of labels held in memory on a cluster. The
lower-level steps (moments, solver, signs, vote, identifiability diagnostics) are exported for notebooks and
benchmarks.

The package is also the job's front door: ``crowdflow.skills(labels, ...)`` is :func:`crowdflow.skills.door.skills`
(a labels DataFrame in, the tables a skills run writes out); :func:`output_tables` assembles those tables from
a fit for the pipeline and the front door alike.
"""

from crowdflow._modules import callable_package
from crowdflow.skills.consensus import (
    ConsensusOutput,
    prediction_error,
    resolve_signs,
    skill_box,
    vote_weights,
    weighted_consensus,
)
from crowdflow.skills.dawid_skene import DawidSkeneResult, dawid_skene, one_coin_dawid_skene
from crowdflow.skills.door import SkillsFit, output_metrics, output_tables
from crowdflow.skills.door import skills as _front_door
from crowdflow.skills.fit import SkillsResult, fit_skills
from crowdflow.skills.identifiability import (
    active_workers,
    component_diagnostics,
    odd_cycle_witnesses,
    theorem12_error_bound,
)
from crowdflow.skills.inputs import canonical_label_matrix, prepare_labels
from crowdflow.skills.majority import ConsensusResult, majority_vote, weighted_vote
from crowdflow.skills.moments import LabelMoments, edge_weights, label_moments, moments_from_counts, prune_spammer_edges
from crowdflow.skills.options import SkillsOptions
from crowdflow.skills.partitioned import PartitionedSkills, fit_skills_partitioned
from crowdflow.skills.partitions import (
    moments_from_partitions,
    partition_pair_counts,
    partitioned_moments,
    write_label_partitions,
)
from crowdflow.skills.rank_one import RankOneFit, fit_active, fit_rank_one, rank_one_gradient, rank_one_loss
from crowdflow.skills.spectra import signless_lambda_min, signless_laplacian

__all__ = [
    "ConsensusOutput",
    "ConsensusResult",
    "DawidSkeneResult",
    "LabelMoments",
    "PartitionedSkills",
    "RankOneFit",
    "SkillsFit",
    "SkillsOptions",
    "SkillsResult",
    "active_workers",
    "canonical_label_matrix",
    "component_diagnostics",
    "dawid_skene",
    "edge_weights",
    "fit_active",
    "fit_rank_one",
    "fit_skills",
    "fit_skills_partitioned",
    "label_moments",
    "majority_vote",
    "moments_from_counts",
    "moments_from_partitions",
    "odd_cycle_witnesses",
    "one_coin_dawid_skene",
    "output_metrics",
    "output_tables",
    "partition_pair_counts",
    "partitioned_moments",
    "prediction_error",
    "prepare_labels",
    "prune_spammer_edges",
    "rank_one_gradient",
    "rank_one_loss",
    "resolve_signs",
    "signless_lambda_min",
    "signless_laplacian",
    "skill_box",
    "theorem12_error_bound",
    "vote_weights",
    "weighted_consensus",
    "weighted_vote",
    "write_label_partitions",
]

# crowdflow.skills(labels, ...) runs the job (the package stays a package: crowdflow.skills.fit_skills works)
callable_package(__name__, _front_door)
