"""The one-call entry point of the personal-models job: validate, build and fit (spec §3).

:func:`fit_personal_models` builds the problem from the ``agents``/``edges`` tables
(:func:`crowdflow.personal_models.problem.build_problem`) and runs the chosen solver: DJAM, blocked DJAM,
the centralised optimum or the CL-ADMM baseline. It imports the algorithms; none of them imports it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd

from crowdflow.personal_models.baselines import cl_admm
from crowdflow.personal_models.blocked import djam_blocked
from crowdflow.personal_models.centralized import centralized
from crowdflow.personal_models.djam import djam
from crowdflow.personal_models.problem import LossName, build_problem
from crowdflow.personal_models.result import PersonalModelsResult
from crowdflow.progress import IterationProgress, ProgressFn

Method = Literal["djam", "centralized", "cl_admm", "djam_blocked"]


def fit_personal_models(
    agents: pd.DataFrame,
    edges: pd.DataFrame,
    *,
    loss: LossName = "quadratic",
    method: Method = "djam",
    reg: float | Mapping[str, float] | None = None,
    prior_mean: float | Sequence[float] | np.ndarray | Mapping[str, Any] = 0.0,
    huber_c: float | Mapping[str, float] = 1.0,
    huber_kappa: float | Mapping[str, float] = 1.345,
    feature_cols: Sequence[str] | None = None,
    allow_disconnected: bool = False,
    seed: int = 0,
    tol: float = 1e-8,
    max_rounds: int | None = None,
    rho: float = 0.316,
    n_blocks: int = 4,
    executor: Any = None,
    progress: ProgressFn | None = None,
    **kwargs: Any,
) -> PersonalModelsResult:
    """Validate, build and fit personal models on an agent graph (the pipeline entry point).

    Parameters
    ----------
    agents, edges, loss, reg, prior_mean, huber_c, huber_kappa, feature_cols, allow_disconnected
        See :func:`build_problem`.
    method : {"djam", "centralized", "cl_admm", "djam_blocked"}
        ``centralized`` is the exact batch solver (spec §4.1); ``djam`` the simulation engine;
        ``djam_blocked`` the partitioned mode; ``cl_admm`` the baseline (penalty ``rho``).
    seed, tol, max_rounds, rho, n_blocks, executor
        Passed to the chosen solver; extra ``kwargs`` too.
    progress : callable, optional
        ``progress(fraction)`` during DJAM rounds / blocked sweeps (certificate bound against ``tol``);
        the other methods report 1.0 when done.

    Returns
    -------
    PersonalModelsResult

    Examples
    --------
    >>> import pandas as pd
    >>> agents = pd.DataFrame({"agent": ["a", "a", "b", "c"], "y": [1.0, 1.2, 0.0, 3.0]})
    >>> edges = pd.DataFrame({"source": ["a", "b"], "target": ["b", "c"], "weight": [1.0, 0.5]})
    >>> res = fit_personal_models(agents, edges, loss="quadratic", reg=0.1)
    >>> res.converged, list(res.personal_models.columns)
    (True, ['agent', 'theta_intercept', 'residual', 'component', 'n_samples'])
    """
    problem = build_problem(
        agents,
        edges,
        loss=loss,
        reg=reg,
        prior_mean=prior_mean,
        huber_c=huber_c,
        huber_kappa=huber_kappa,
        feature_cols=feature_cols,
        allow_disconnected=allow_disconnected,
    )
    if method == "djam":
        return djam(problem, seed=seed, tol=tol, max_rounds=max_rounds, progress=progress, **kwargs)
    if method == "djam_blocked":
        return djam_blocked(
            problem, n_blocks=n_blocks, executor=executor, seed=seed, tol=tol, progress=progress, **kwargs
        )
    if method in ("centralized", "cl_admm"):
        if method == "centralized":
            result = centralized(problem, **kwargs)
        else:
            result = cl_admm(problem, rho=rho, seed=seed, tol=tol, max_rounds=max_rounds, **kwargs)
        IterationProgress(progress, 1).done()
        return result
    raise ValueError(f"unknown method '{method}' (djam | centralized | cl_admm | djam_blocked)")
