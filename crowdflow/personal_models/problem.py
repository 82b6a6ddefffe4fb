"""A validated personal-models problem and its builder (docs/methods/personal_models.md §1, §3.2).

:func:`build_problem` checks the ``agents`` and ``edges`` tables and builds the losses and the agent
graph; :class:`PersonalProblem` evaluates the objective

    J(Θ) = ½ Σ_{{i,j}∈E} W_ij ‖θ_i − θ_j‖² + Σ_i f_i(θ_i)      (every unordered edge once)

and its KKT residual ``r_i = ∇f_i(θ_i) + Σ_j W_ij (θ_i − θ_j)``, and gives the epoch contraction bound
``β = max_i w_i/(m_i + w_i)`` (docs/methods/personal_models.md §3.1).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from crowdflow.contracts.errors import DegenerateInput
from crowdflow.graphs import agent_graph_report
from crowdflow.personal_models.graph import AgentGraph
from crowdflow.personal_models.helpers import format_ids, segsum
from crowdflow.personal_models.losses import HuberLosses, LogisticLosses, QuadraticLosses

log = logging.getLogger(__name__)

LossName = Literal["quadratic", "ridge", "huber", "huber_scalar", "logistic"]

_LOSS_ALIASES = {
    "quadratic": "quadratic",
    "ridge": "quadratic",
    "least_squares": "quadratic",
    "huber": "huber",
    "huber_scalar": "huber",
    "logistic": "logistic",
}
#: Columns of the agents table with a meaning of their own: never taken as features.
RESERVED_COLUMNS = frozenset({"agent", "y", "x", "weight", "reg", "prior_mean", "huber_c", "huber_kappa"})
#: Prior precision λ_i when neither the ``reg`` argument nor a ``reg`` column gives one.
DEFAULT_REG = 0.1
#: Largest magnitude of a target, feature or sample weight (the bound of the agents table contract).
MAX_ABS = 1e150
_SC_RTOL = 1e-10  # docs/methods/personal_models.md §3.2: quadratic strong convexity λ_min(A_i) > 1e-10·‖A_i‖


@dataclass(frozen=True)
class PersonalProblem:
    """A validated personal-models problem (agents, losses, graph), dense ids by sorted agent id.

    Attributes
    ----------
    agents : numpy.ndarray
        Agent ids (str), sorted; row i of every array is agent ``agents[i]``.
    param_names : tuple of str
        Names of the p parameters (feature names, ``x_0..`` for an ``x`` list column, ``theta`` for Huber).
    loss : str
        ``quadratic`` | ``huber`` | ``logistic``.
    losses : QuadraticLosses | HuberLosses | LogisticLosses
    graph : AgentGraph
    n_samples : numpy.ndarray
        Local samples per agent.
    component : numpy.ndarray
        Connected component of every agent (0..).
    """

    agents: np.ndarray
    param_names: tuple[str, ...]
    loss: str
    losses: Any
    graph: AgentGraph
    n_samples: np.ndarray
    component: np.ndarray

    @property
    def n(self) -> int:
        return int(self.agents.size)

    @property
    def p(self) -> int:
        return len(self.param_names)

    @property
    def m(self) -> np.ndarray:
        """Strong-convexity moduli m_i."""
        return cast(np.ndarray, self.losses.strong_convexity())

    @property
    def beta(self) -> float:
        """Epoch contraction bound β = max_i w_i/(m_i + w_i) (docs/methods/personal_models.md §3.1)."""
        w = self.graph.degree
        return float(np.max(w / (self.m + w))) if self.n else 0.0

    def objective(self, theta: np.ndarray) -> float:
        """J(Θ) = ½ Σ_{edges} W_ij‖θ_i − θ_j‖² + Σ f_i(θ_i), each edge once (docs/methods/personal_models.md §1.2)."""
        g = self.graph
        diff = theta[g.u] - theta[g.v]
        return float(0.5 * np.sum(g.w * np.sum(diff * diff, axis=1)) + np.sum(self.losses.value(theta)))

    def kkt(self, theta: np.ndarray, grad: np.ndarray | None = None) -> np.ndarray:
        """KKT residuals r_i = ∇f_i(θ_i) + Σ_j W_ij(θ_i − θ_j), shape (n, p) (docs/methods/personal_models.md §2.6).

        ``grad`` gives ∇f_i(θ_i) when the losses live elsewhere (the Dask workers of a partitioned run).
        """
        g = self.losses.grad(np.arange(self.n), theta) if grad is None else grad
        return cast(np.ndarray, g + self.graph.laplacian() @ theta)


def _per_agent(
    name: str,
    arg: float | Mapping[str, Any] | None,
    rows: pd.DataFrame,
    agents: np.ndarray,
    default: float | None,
) -> np.ndarray:
    """Per-agent scalar parameter: a column of ``rows`` (constant per agent) or a scalar / mapping."""
    if name in rows.columns:
        g = rows.groupby("agent", sort=True)[name]
        if (g.nunique(dropna=False) > 1).any():
            bad = g.nunique(dropna=False)
            raise DegenerateInput(
                f"agents: column '{name}' varies within agent(s) {format_ids(bad[bad > 1].index)}", "bad_agent_setting"
            )
        vals = pd.to_numeric(g.first(), errors="coerce").reindex(agents)
        out = vals.to_numpy(dtype=np.float64)
        if not np.all(np.isfinite(out)):
            raise DegenerateInput(
                f"agents: column '{name}': missing or non-finite value for agent(s) "
                f"{format_ids(agents[~np.isfinite(out)])}",
                "bad_agent_setting",
            )
    elif isinstance(arg, Mapping):
        missing = [a for a in agents if a not in arg]
        if missing:
            raise ValueError(f"{name}: no value for agent(s) {format_ids(missing)}")
        out = np.array([float(arg[a]) for a in agents], dtype=np.float64)
    else:
        val = default if arg is None else arg
        out = np.full(agents.size, np.nan if val is None else float(val), dtype=np.float64)
    if not np.all(np.isfinite(out)):
        raise ValueError(f"{name}: missing or non-finite value for agent(s) {format_ids(agents[~np.isfinite(out)])}")
    return out


def _features(rows: pd.DataFrame, feature_cols: Sequence[str] | None, loss: str) -> tuple[np.ndarray, tuple[str, ...]]:
    """Feature matrix (N, p) from an ``x`` list column or feature columns."""
    if loss == "huber":
        if feature_cols:
            raise ValueError("huber loss is scalar (p = 1): feature columns are not used; drop feature_cols")
        if "x" in rows.columns:
            raise DegenerateInput("huber loss is scalar (p = 1): drop the 'x' column (column 'x')", "bad_features")
        return np.ones((len(rows), 1)), ("theta",)
    if feature_cols is None and "x" in rows.columns:
        # pandas-stubs cannot type a lambda over an object column (values are lists here)
        lens = rows["x"].map(lambda v: -1 if v is None or (np.isscalar(v) and pd.isna(v)) else len(v))  # type: ignore[misc, arg-type]
        obs = rows["y"].notna().to_numpy()
        lens_obs = lens[obs]
        if lens_obs.size and ((lens_obs < 0).any() or lens_obs.nunique() != 1):
            raise DegenerateInput(
                "observations: inconsistent dimension of 'x' (lengths "
                f"{sorted(set(lens_obs.tolist()))[:5]}); p must be the same for every sample (column 'x')",
                "bad_features",
            )
        p = int(lens_obs.iloc[0]) if lens_obs.size else int(lens.max())
        if p <= 0:
            raise DegenerateInput("observations: empty feature vectors in 'x' (column 'x')", "bad_features")
        x = np.zeros((len(rows), p))
        if obs.any():
            x[obs] = np.array([np.asarray(v, dtype=np.float64) for v in rows.loc[obs, "x"]])
        return x, tuple(f"x_{k}" for k in range(p))
    if feature_cols is None:
        feature_cols = [c for c in rows.columns if c not in RESERVED_COLUMNS and pd.api.types.is_numeric_dtype(rows[c])]
    if not feature_cols:
        log.info("no feature columns: intercept-only personal models")
        return np.ones((len(rows), 1)), ("intercept",)
    missing = [c for c in feature_cols if c not in rows.columns]
    if missing:
        raise DegenerateInput(
            f"agents: missing feature column(s) {missing}; the table has {format_ids(rows.columns)}", "bad_features"
        )
    x = rows[list(feature_cols)].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=np.float64)
    return x, tuple(str(c) for c in feature_cols)


def _check_features(
    x: np.ndarray, obs: np.ndarray, names: tuple[str, ...], ids: np.ndarray, codes: np.ndarray, list_column: bool
) -> None:
    """Features of the observed rows must be finite and within ±MAX_ABS; the error names the column."""
    if not obs.any():
        return
    xo = x[obs]
    bad = ~np.isfinite(xo) | (np.abs(np.nan_to_num(xo)) > MAX_ABS)
    if not bad.any():
        return
    rows_bad = np.flatnonzero(obs)[bad.any(axis=1)]
    cols = ["x"] if list_column else [names[k] for k in np.flatnonzero(bad.any(axis=0))]
    what = "non-finite" if not np.all(np.isfinite(xo)) else "too large"
    raise DegenerateInput(
        f"observations: {what} features for agent(s) {format_ids(ids[np.unique(codes[rows_bad])])} "
        f"(column(s) {', '.join(repr(c) for c in cols)}: values must be finite and within ±{MAX_ABS:g})",
        "bad_features",
    )


def _validate_edges(
    edges: pd.DataFrame, agents: np.ndarray, allow_disconnected: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The edge checks of docs/methods/personal_models.md §3.2: dense (u, v, w) with u < v, one row per pair."""
    for c in ("source", "target", "weight"):
        if c not in edges.columns:
            raise ValueError(f"edges: missing column '{c}' (need source, target, weight)")
    e = pd.DataFrame(
        {
            "source": edges["source"].astype(str).to_numpy(),
            "target": edges["target"].astype(str).to_numpy(),
            "weight": pd.to_numeric(edges["weight"], errors="coerce").to_numpy(dtype=np.float64),
        }
    )
    if edges["source"].isna().any() or edges["target"].isna().any():
        raise ValueError("edges: null source/target")
    loops = e[e["source"] == e["target"]]
    if len(loops):
        raise ValueError(f"edges: self-loop on {format_ids(loops['source'].unique())}")
    w = e["weight"].to_numpy()
    bad = ~np.isfinite(w) | (w < 0)
    if bad.any():
        ex = e[bad].head(5)
        pairs = ", ".join(f"({r.source}, {r.target}, {r.weight})" for r in ex.itertuples())
        raise ValueError(f"edges: non-positive or non-finite weight on {int(bad.sum())} edge(s), e.g. {pairs}")
    zero = w == 0
    if zero.any():
        ex = e[zero].head(5)
        warnings.warn(
            f"edges: dropping {int(zero.sum())} zero-weight edge(s), e.g. "
            + ", ".join(f"({r.source}, {r.target})" for r in ex.itertuples()),
            RuntimeWarning,
            stacklevel=3,
        )
        e = e[~zero].reset_index(drop=True)
    rep = agent_graph_report(e, agents)
    if rep.unknown_agents:
        raise ValueError(f"edges: unknown agent id(s) {format_ids(rep.unknown_agents)}")
    if not rep.nonpositive_weights.empty:  # pragma: no cover - excluded above
        raise ValueError("edges: non-positive or non-finite weight")
    asym = e.merge(
        e.rename(columns={"source": "target", "target": "source", "weight": "reverse_weight"}),
        on=["source", "target"],
    )
    asym = asym[asym["source"] < asym["target"]]
    tol = 1e-9 * np.maximum(asym["weight"], asym["reverse_weight"])
    asym = asym[np.abs(asym["weight"] - asym["reverse_weight"]) > tol]
    if len(asym):
        pairs = ", ".join(
            f"({r.source}, {r.target}: {r.weight} vs {r.reverse_weight})" for r in asym.head(5).itertuples()
        )
        raise ValueError(f"edges: asymmetric weights for pairs [{pairs}]")
    index = pd.Index(agents)
    i = index.get_indexer(e["source"].to_numpy())
    j = index.get_indexer(e["target"].to_numpy())
    lo, hi = np.minimum(i, j), np.maximum(i, j)
    key = pd.DataFrame({"lo": lo, "hi": hi, "d": i < j, "w": e["weight"].to_numpy()})
    dup = key.duplicated(["lo", "hi", "d"], keep=False)
    if dup.any():
        ex = key[dup].drop_duplicates(["lo", "hi"]).head(5)
        pairs = ", ".join(f"({agents[r.lo]}, {agents[r.hi]})" for r in ex.itertuples())  # type: ignore[index]
        raise ValueError(f"edges: duplicate pair {pairs}")
    key = key.drop_duplicates(["lo", "hi"])  # both directions with equal weight: keep one
    u, v, w = key["lo"].to_numpy(), key["hi"].to_numpy(), key["w"].to_numpy()
    if rep.n_components > 1 and not allow_disconnected:
        adj = sp.csr_matrix((np.ones(u.size), (u, v)), shape=(agents.size, agents.size))
        _, lab = connected_components(adj, directed=False)
        sizes = np.bincount(lab)
        order = np.argsort(-sizes, kind="stable")
        examples = "; ".join(f"component of {sizes[c]}: {format_ids(agents[lab == c], 3)}" for c in order[1:4])
        raise ValueError(
            f"graph is not connected: {rep.n_components} components (sizes "
            f"{sorted(sizes.tolist(), reverse=True)[:10]}; e.g. agents {examples}); "
            "pass allow_disconnected=True to solve each component separately"
        )
    return u.astype(np.int64), v.astype(np.int64), w.astype(np.float64)


@dataclass(frozen=True)
class AgentLosses:
    """The agents table turned into losses (:func:`build_losses`): everything of a problem but the graph.

    Attributes
    ----------
    agents : numpy.ndarray
        Agent ids (str), sorted.
    param_names : tuple of str
    loss : str
        ``quadratic`` | ``huber`` | ``logistic``.
    losses : QuadraticLosses | HuberLosses | LogisticLosses
    n_samples : numpy.ndarray
        Observed samples per agent.
    targets : frozenset of float
        The distinct observed targets of a logistic loss (empty for the others): the 0/1 or ±1 rule is checked on
        their union when the table is built in pieces (docs/scale.md).
    """

    agents: np.ndarray
    param_names: tuple[str, ...]
    loss: str
    losses: Any
    n_samples: np.ndarray
    targets: frozenset[float] = frozenset()


def build_losses(
    agents: pd.DataFrame,
    *,
    loss: LossName = "quadratic",
    reg: float | Mapping[str, float] | None = None,
    prior_mean: float | Sequence[float] | np.ndarray | Mapping[str, Any] = 0.0,
    huber_c: float | Mapping[str, float] = 1.0,
    huber_kappa: float | Mapping[str, float] = 1.345,
    feature_cols: Sequence[str] | None = None,
) -> AgentLosses:
    """Check the ``agents`` table and build each agent's loss f_i (docs/methods/personal_models.md §1.3, §1.4, §3.2).

    Every check is per agent except the feature names and the logistic target coding, so a table split by agent
    (the blocks of a partitioned run) gives each agent the same loss as the whole table; the caller checks the
    union of ``targets`` and equal ``param_names`` across the pieces. Arguments and errors as :func:`build_problem`.
    """
    name = _LOSS_ALIASES.get(str(loss))
    targets: frozenset[float] = frozenset()
    if name is None:
        raise ValueError(f"unknown loss '{loss}'; expected one of {sorted(_LOSS_ALIASES)}")
    rows = agents.copy()
    if "agent" not in rows.columns and "agent_id" in rows.columns:
        rows = rows.rename(columns={"agent_id": "agent"})
    for colname in ("agent", "y"):
        if colname not in rows.columns:
            raise ValueError(f"agents: missing column '{colname}' (need agent, y and features)")
    if rows["agent"].isna().any():
        bad_rows = np.flatnonzero(rows["agent"].isna().to_numpy())
        raise ValueError(f"agents: duplicate/null agent_id: null agent id on rows {format_ids(bad_rows)}")
    rows["agent"] = rows["agent"].astype(str)
    ids = np.array(sorted(rows["agent"].unique()), dtype=object)
    n = ids.size
    if n == 0:
        raise ValueError("agents: empty table")
    rows = rows.sort_values("agent", kind="stable").reset_index(drop=True)
    codes = pd.Index(ids).get_indexer(rows["agent"].to_numpy())
    y = pd.to_numeric(rows["y"], errors="coerce").to_numpy(dtype=np.float64)
    bad_y = np.isinf(y) | (np.abs(np.nan_to_num(y)) > MAX_ABS)
    if bad_y.any():
        bad_ids = ids[np.unique(codes[bad_y])]
        raise DegenerateInput(
            f"observations: non-finite or too large target y for agent(s) {format_ids(bad_ids)} (column 'y': "
            f"values must be finite and within ±{MAX_ABS:g})",
            "bad_target",
        )
    x, names = _features(rows, feature_cols, name)
    obs = ~np.isnan(y)
    _check_features(x, obs, names, ids, codes, list_column="x" in rows.columns and feature_cols is None)
    if "weight" in rows.columns:
        om = pd.to_numeric(rows["weight"], errors="coerce").to_numpy(dtype=np.float64)
        badw = obs & (~np.isfinite(om) | (om < 0) | (om > MAX_ABS))
        if badw.any():
            bad_ids = ids[np.unique(codes[badw])]
            raise DegenerateInput(
                f"observations: non-finite or negative sample weight for agent(s) {format_ids(bad_ids)} "
                f"(column 'weight': values must lie in [0, {MAX_ABS:g}])",
                "bad_weight",
            )
    else:
        om = np.ones(len(rows))
    p = len(names)
    lam = _per_agent("reg", reg, rows, ids, DEFAULT_REG)
    if (lam < 0).any():
        raise DegenerateInput(f"reg: negative ridge for agent(s) {format_ids(ids[lam < 0])}", "bad_agent_setting")
    # prior mean θ̄_i (n, p)
    if "prior_mean" in rows.columns:
        prior = np.repeat(_per_agent("prior_mean", None, rows, ids, None)[:, None], p, axis=1)
    elif isinstance(prior_mean, Mapping):
        missing = [a for a in ids if a not in prior_mean]
        if missing:
            raise ValueError(f"prior_mean: no value for agent(s) {format_ids(missing)}")
        prior = np.array([np.broadcast_to(np.asarray(prior_mean[a], dtype=np.float64), (p,)) for a in ids])
    else:
        prior = np.broadcast_to(np.asarray(prior_mean, dtype=np.float64), (n, p)).copy()
    if not np.all(np.isfinite(prior)):
        raise ValueError("prior_mean: non-finite values")

    # keep only real samples, CSR by agent
    xs, ys, ws, cs = x[obs], y[obs], om[obs], codes[obs]
    if name != "huber":
        # ω‖x‖² summed per agent bounds XᵀΩX (quadratic) and the logistic curvature: it must be a float64
        with np.errstate(over="ignore"):
            scale = np.bincount(cs, weights=ws * np.sum(xs * xs, axis=1), minlength=n)
        if not np.all(np.isfinite(scale)):
            raise DegenerateInput(
                f"observations: features × sample weights overflow float64 for agent(s) "
                f"{format_ids(ids[~np.isfinite(scale)])} (columns {list(names)}"
                + (", 'weight'" if "weight" in rows.columns else "")
                + "); rescale them",
                "bad_features",
            )
    n_samples = np.bincount(cs, minlength=n)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(n_samples, out=ptr[1:])
    no_prior = (n_samples == 0) & (lam <= 0)
    if no_prior.any():
        raise DegenerateInput(
            f"agent(s) {format_ids(ids[no_prior])}: no data and no prior (reg = 0): loss not strongly convex; "
            "give these agents data or set reg > 0",
            "no_data_no_prior",
        )

    if name == "quadratic":
        outer = ws[:, None, None] * xs[:, :, None] * xs[:, None, :]
        A = segsum(outer, cs, n) + lam[:, None, None] * np.eye(p)[None]
        e = segsum(ws[:, None] * ys[:, None] * xs, cs, n) + lam[:, None] * prior
        const = 0.5 * np.bincount(cs, weights=ws * ys * ys, minlength=n) + 0.5 * lam * np.sum(prior**2, axis=1)
        if str(loss) == "ridge" and (lam <= 0).any():
            raise DegenerateInput(
                f"agent(s) {format_ids(ids[lam <= 0])}: loss not strongly convex (ridge needs reg > 0)",
                "not_strongly_convex",
            )
        ev = np.linalg.eigvalsh(A)
        weak = ev[:, 0] <= _SC_RTOL * np.maximum(ev[:, -1], 0.0)
        if weak.any():
            k = int(np.flatnonzero(weak)[0])
            raise DegenerateInput(
                f"agent {ids[k]}: loss not strongly convex (λ_min(XᵀΩX + λI) = {ev[k, 0]:.3g} with "
                f"{int(n_samples[k])} samples for p = {p}, reg = {lam[k]:.3g}); "
                f"{int(weak.sum())} agent(s) affected: {format_ids(ids[weak])}. Use reg > 0.",
                "not_strongly_convex",
            )
        losses: Any = QuadraticLosses(A=A, e=e, const=const)
    elif name == "huber":
        c = _per_agent("huber_c", huber_c, rows, ids, None)
        kap = _per_agent("huber_kappa", huber_kappa, rows, ids, None)
        bad = (lam <= 0) | (c <= 0) | (kap <= 0)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise DegenerateInput(
                f"agent {ids[k]}: loss not strongly convex (huber needs s = reg > 0, c > 0, κ > 0; got "
                f"s = {lam[k]:.3g}, c = {c[k]:.3g}, κ = {kap[k]:.3g}); agent(s) {format_ids(ids[bad])}",
                "not_strongly_convex",
            )
        losses = HuberLosses.build(ptr, ys, c[cs] * ws, kap, lam, prior[:, 0].copy())
    else:
        if (lam <= 0).any():
            raise DegenerateInput(
                f"agent(s) {format_ids(ids[lam <= 0])}: loss not strongly convex (logistic needs reg > 0)",
                "not_strongly_convex",
            )
        vals = set(np.unique(ys).tolist())
        if vals <= {0.0, 1.0}:
            z = 2.0 * ys - 1.0
        elif vals <= {-1.0, 1.0}:
            z = ys.copy()
        else:
            raise DegenerateInput(
                f"observations: logistic targets must be 0/1 or ±1, got {sorted(vals)[:5]} (column 'y'); "
                "use loss quadratic for real-valued targets",
                "bad_target",
            )
        losses = LogisticLosses(ptr=ptr, d=xs, z=z, w=ws, lam=lam, prior=prior)
        targets = frozenset(float(t) for t in vals)

    return AgentLosses(ids, names, name, losses, n_samples.astype(np.int64), targets)


def build_problem(
    agents: pd.DataFrame,
    edges: pd.DataFrame,
    *,
    loss: LossName = "quadratic",
    reg: float | Mapping[str, float] | None = None,
    prior_mean: float | Sequence[float] | np.ndarray | Mapping[str, Any] = 0.0,
    huber_c: float | Mapping[str, float] = 1.0,
    huber_kappa: float | Mapping[str, float] = 1.345,
    feature_cols: Sequence[str] | None = None,
    allow_disconnected: bool = False,
) -> PersonalProblem:
    """Validate the ``agents``/``edges`` tables and build the losses and the agent graph.

    Tables and losses: docs/methods/personal_models.md §1.3, §1.4; the checks: docs/methods/personal_models.md §3.2.

    Parameters
    ----------
    agents : pandas.DataFrame
        One row per local sample: ``agent`` (id), ``y`` (target), features as numeric columns or one
        ``x`` list column, optional ``weight`` (sample weight ω ≥ 0, default 1). A row with ``y`` NaN
        declares an agent without data (it then needs a prior, ``reg > 0``). Optional per-agent
        columns (constant within an agent) override the arguments of the same name: ``reg``,
        ``prior_mean`` (scalar), ``huber_c``, ``huber_kappa``. ``agent_id`` is accepted for ``agent``.
    edges : pandas.DataFrame
        ``source, target, weight`` (``u, v`` accepted), undirected; both directions allowed if equal.
    loss : {"quadratic", "ridge", "huber", "logistic"}
        ``ridge`` is ``quadratic`` with ``reg > 0`` required for every agent. ``logistic`` targets are
        ``{0, 1}`` or ``{−1, +1}``. ``huber`` is the scalar robust estimate (p = 1; features unused).
    reg : float or mapping agent → float, optional
        Ridge/prior precision λ_i (Huber: ``s_i``). Default 0.1 (quadratic, logistic) and 0.1 (huber).
        Strong convexity is checked, never silently enforced: quadratic agents need
        ``λ_min(X_iᵀΩ_iX_i + λ_iI) > 1e-10·‖·‖``; logistic and huber agents need ``λ_i > 0``.
    prior_mean : float, array (p,) or mapping agent → array
        θ̄_i in ``(λ_i/2)‖θ − θ̄_i‖²``.
    huber_c, huber_kappa : float or mapping
        Huber scale c_i > 0 and threshold κ_i > 0.
    feature_cols : sequence of str, optional
        Feature columns; default: every numeric column outside the reserved names (intercept-only
        model when there is none).
    allow_disconnected : bool
        Solve each connected component separately instead of rejecting a disconnected graph.

    Returns
    -------
    PersonalProblem

    Raises
    ------
    crowdflow.contracts.errors.DegenerateInput
        Tables that admit no fit, naming the column: non-finite or too large targets, features or sample
        weights (``|value| ≤ 1e150``, the agents table contract) or products of them that overflow,
        logistic targets that are not 0/1 or ±1, an ``x`` list column of varying length, a per-agent
        setting column that varies within an agent, an agent whose loss is not strongly convex
        (``agent X: loss not strongly convex (...)``) or without data and prior. A ``ValueError`` too.
    ValueError
        Bad arguments and malformed edges, with the message prefixes of docs/methods/personal_models.md §3.2
        (``edges: unknown agent id(s) [...]``, ``graph is not connected: K components ...``, ...).
    """
    built = build_losses(
        agents,
        loss=loss,
        reg=reg,
        prior_mean=prior_mean,
        huber_c=huber_c,
        huber_kappa=huber_kappa,
        feature_cols=feature_cols,
    )
    edges = edges.rename(columns={"u": "source", "v": "target"}) if "u" in edges.columns else edges
    u, v, w = _validate_edges(edges, built.agents, allow_disconnected)
    graph = AgentGraph.build(built.agents.size, u, v, w)
    comp = _canonical_components(graph.components())
    return PersonalProblem(
        agents=built.agents,
        param_names=built.param_names,
        loss=built.loss,
        losses=built.losses,
        graph=graph,
        n_samples=built.n_samples,
        component=comp,
    )


def _canonical_components(lab: np.ndarray) -> np.ndarray:
    first = np.full(lab.max(initial=-1) + 1, lab.size, dtype=np.int64)
    np.minimum.at(first, lab, np.arange(lab.size))
    remap = np.empty_like(first)
    remap[np.argsort(first, kind="stable")] = np.arange(first.size)
    return cast(np.ndarray, remap[lab])
