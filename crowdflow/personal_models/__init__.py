"""Personal models coupled over an agent graph, fitted by DJAM (see docs/methods/personal_models.md).

Entry point: :func:`fit_personal_models` (``agents`` + ``edges`` tables → one model per agent), its
options :class:`PersonalModelsOptions` (also the ``personal_models:`` section of a pipeline spec). The
solvers it dispatches to are public too, for notebooks and benchmarks: :func:`djam`,
:func:`djam_blocked`, :func:`centralized` and the CL-ADMM baseline :func:`cl_admm`, all on a
:class:`PersonalProblem` built by :func:`build_problem`.

The package is also the job's front door: ``crowdflow.personal_models(agents, edges)`` is
:func:`crowdflow.personal_models.door.personal_models`; :func:`output_tables` gives a run's tables from a fit.
"""

from crowdflow._modules import callable_package
from crowdflow.personal_models.baselines import RHO_GRID, cl_admm, cl_admm_monte_carlo, rounds_to
from crowdflow.personal_models.blocked import djam_blocked, partition_agents
from crowdflow.personal_models.centralized import centralized
from crowdflow.personal_models.djam import djam, djam_monte_carlo
from crowdflow.personal_models.door import PersonalModelsFit, output_tables
from crowdflow.personal_models.door import personal_models as _front_door
from crowdflow.personal_models.fit import fit_personal_models
from crowdflow.personal_models.options import PersonalModelsOptions
from crowdflow.personal_models.problem import PersonalProblem, build_problem
from crowdflow.personal_models.result import PersonalModelsResult, certificate, rel_errors
from crowdflow.personal_models.schedule import matching_batches

__all__ = [
    "RHO_GRID",
    "PersonalModelsFit",
    "PersonalModelsOptions",
    "PersonalModelsResult",
    "PersonalProblem",
    "build_problem",
    "centralized",
    "certificate",
    "cl_admm",
    "cl_admm_monte_carlo",
    "djam",
    "djam_blocked",
    "djam_monte_carlo",
    "fit_personal_models",
    "matching_batches",
    "output_tables",
    "partition_agents",
    "rel_errors",
    "rounds_to",
]

# crowdflow.personal_models(...) runs the job (the package stays a package)
callable_package(__name__, _front_door)
