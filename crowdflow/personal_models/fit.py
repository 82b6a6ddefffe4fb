"""The one-call entry point of the personal-models job: validate, build and fit.

:func:`fit_personal_models` builds the problem from the ``agents``/``edges`` tables
(:func:`crowdflow.personal_models.problem.build_problem`, with the input checks of
docs/methods/personal_models.md §3.2) and runs the method the options name (§8 there): DJAM, blocked
DJAM, the centralised optimum or the CL-ADMM baseline. It is the only place that knows which method
takes which option; it imports the algorithms and none of them imports it.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from crowdflow.personal_models.baselines import cl_admm
from crowdflow.personal_models.blocked import djam_blocked
from crowdflow.personal_models.centralized import centralized
from crowdflow.personal_models.djam import djam
from crowdflow.personal_models.options import PersonalModelsOptions
from crowdflow.personal_models.problem import build_problem
from crowdflow.personal_models.result import PersonalModelsResult
from crowdflow.progress import IterationProgress, ProgressFn


def fit_personal_models(
    agents: pd.DataFrame,
    edges: pd.DataFrame,
    options: PersonalModelsOptions | None = None,
    *,
    allow_disconnected: bool = False,
    block_executor: Any = None,
    progress: ProgressFn | None = None,
    **overrides: Any,
) -> PersonalModelsResult:
    """Validate, build and fit personal models on an agent graph (the pipeline entry point).

    ``fit_personal_models(agents, edges, method="cl_admm")`` and
    ``fit_personal_models(agents, edges, PersonalModelsOptions(method="cl_admm"))`` are the same call,
    and the same fit as a pipeline spec with ``personal_models: {method: cl_admm}``.

    Parameters
    ----------
    agents, edges : pandas.DataFrame
        The input tables (see :func:`~crowdflow.personal_models.problem.build_problem`): one row per local
        sample (``agent``, ``y``, features, optional ``weight`` and per-agent ``reg``, ``prior_mean``,
        ``huber_c``, ``huber_kappa`` columns) and the undirected weighted agent graph.
    options : PersonalModelsOptions, optional
        What to fit and how (loss, method, reg, tol, ...); ``None`` means the defaults.
    allow_disconnected : bool
        Fit each connected component of the agent graph on its own instead of refusing a disconnected
        graph (the pipeline passes ``True`` when its connectivity check is ``warn``).
    block_executor : None, an object with ``.map(fn, items)``, or a callable ``(fn, items) -> results``
        Where ``djam_blocked`` runs its blocks (``None``: in this process); the result does not depend on it.
    progress : callable, optional
        ``progress(fraction)`` during DJAM rounds / blocked sweeps (certificate bound against ``tol``);
        the other methods report 1.0 when done.
    **overrides
        Option fields, validated like the spec (``method="centralized"``, ``reg=0.5``, ...).

    Returns
    -------
    PersonalModelsResult

    Raises
    ------
    pydantic.ValidationError
        An unknown option or a value outside its range (a ``ValueError``).
    crowdflow.contracts.errors.DegenerateInput
        Tables that admit no fit (non-finite or too large values, naming the column; logistic targets
        that are not 0/1; an agent whose loss is not strongly convex). Also a ``ValueError``.
    ValueError
        Malformed edges or a disconnected graph without ``allow_disconnected``.

    Examples
    --------
    >>> import pandas as pd
    >>> agents = pd.DataFrame({"agent": ["a", "a", "b", "c"], "y": [1.0, 1.2, 0.0, 3.0]})
    >>> edges = pd.DataFrame({"source": ["a", "b"], "target": ["b", "c"], "weight": [1.0, 0.5]})
    >>> res = fit_personal_models(agents, edges, loss="quadratic", reg=0.1)
    >>> res.converged, list(res.personal_models.columns)
    (True, ['agent', 'theta_intercept', 'residual', 'component', 'n_samples'])
    """
    o = PersonalModelsOptions.resolve(options, **overrides)
    problem = build_problem(
        agents,
        edges,
        loss=o.loss,
        reg=o.reg,
        prior_mean=o.prior_mean,
        huber_c=o.huber_c,
        huber_kappa=o.huber_kappa,
        feature_cols=o.features,
        allow_disconnected=allow_disconnected,
    )
    if o.method == "djam":
        return djam(problem, seed=o.seed, tol=o.tol, max_rounds=o.max_rounds, engine=o.engine, progress=progress)
    if o.method == "djam_blocked":
        return djam_blocked(
            problem,
            n_blocks=o.n_blocks,
            executor=block_executor,
            seed=o.seed,
            tol=o.tol,
            max_rounds=o.max_rounds,
            engine=o.engine,
            progress=progress,
        )
    if o.method == "cl_admm":
        result = cl_admm(problem, rho=o.rho, seed=o.seed, tol=o.tol, max_rounds=o.max_rounds, engine=o.engine)
    else:  # centralized: an exact solve, no rounds, no engine
        result = centralized(problem)
    IterationProgress(progress, 1).done()
    return result
