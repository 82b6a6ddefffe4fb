"""Seeded personal-models instances with their ground truth (docs/methods/personal_models.md).

- :func:`field_estimation_instance`: the field-estimation experiment of the DJAM paper (Section IV) with
  our default generator (docs/methods/personal_models.md §5.1: n = 30 agents, Huber losses, a Gaussian field on a
  geometric graph);
- :func:`field_estimation_instance_scaled`: the same model at n = 10⁴ and beyond (docs/methods/personal_models.md §5.2),
  with :func:`geometric_radius` choosing the radius for a mean degree;
- :func:`worker_calibration_tables`: per-worker accuracy or bias from a few gold answers, smoothed over a
  worker-similarity graph (docs/methods/personal_models.md §1.4 A);
- :func:`preference_tables`: personalised Bradley–Terry samples from comparisons
  (docs/methods/personal_models.md §1.4 B).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, cast

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components
from scipy.sparse.linalg import spsolve

from crowdflow.personal_models import PersonalProblem, build_problem
from crowdflow.personal_models.helpers import format_ids

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FieldInstance:
    """The generator output of docs/methods/personal_models.md §5.1: tables, the latent field and the geometry."""

    agents: pd.DataFrame
    edges: pd.DataFrame
    field: np.ndarray
    positions: np.ndarray
    outlier: np.ndarray
    huber_c: float
    huber_kappa: float
    s: float
    mu0: float
    radius: float = 0.3
    bridges: int = 0

    def problem(self) -> PersonalProblem:
        return build_problem(
            self.agents,
            self.edges,
            loss="huber",
            reg=self.s,
            prior_mean=self.mu0,
            huber_c=self.huber_c,
            huber_kappa=self.huber_kappa,
        )


def field_estimation_instance(
    seed: int,
    n: int = 30,
    radius: float = 0.3,
    weight_range: tuple[float, float] = (0.5, 1.5),
    s: float = 0.1,
    mu0: float = 0.0,
    sigma_nu: float = 0.5,
    p_out: float = 0.1,
    max_tries: int = 1000,
) -> FieldInstance:
    """The paper's field-estimation experiment (its Section IV), generator of docs/methods/personal_models.md §5.1.

    Draws, in this order from ``numpy.random.default_rng(seed)``: positions U[0,1]² until the
    radius-``radius`` geometric graph is connected; edge weights σ_ij ~ U[0.5, 1.5] in row-major order
    over the edges i < j; the field θ = μ0 + R^{-T}z with ``Q = L_σ + s I = R Rᵀ``; Gaussian noise
    σ_ν·N(0, 1), replaced with probability ``p_out`` by an outlier 10σ_ν·N(0, 1). Huber ``c = 1/σ_ν²``,
    ``κ = 1.345σ_ν``. Agents are ``a000, a001, ...`` (sorted = generation order).
    """
    rng = np.random.default_rng(seed)
    iu, ju = np.triu_indices(n, 1)
    for _ in range(max_tries):
        pos = rng.random((n, 2))
        d = np.linalg.norm(pos[iu] - pos[ju], axis=1)
        keep = d <= radius
        adj = sp.csr_matrix((np.ones(int(keep.sum())), (iu[keep], ju[keep])), shape=(n, n))
        if connected_components(adj, directed=False)[0] == 1:
            break
    else:
        raise ValueError(f"no connected radius-{radius} graph on {n} points after {max_tries} draws")
    u, v = iu[keep], ju[keep]
    w = rng.uniform(weight_range[0], weight_range[1], size=u.size)
    W = sp.csr_matrix((w, (u, v)), shape=(n, n))
    W = W + W.T
    Q = cast(sp.csr_matrix, sp.diags(np.asarray(W.sum(axis=1)).ravel()) - W + s * sp.identity(n)).toarray()
    R = np.linalg.cholesky(Q)
    z = rng.standard_normal(n)
    field_ = mu0 + np.linalg.solve(R.T, z)
    noise = sigma_nu * rng.standard_normal(n)
    out = rng.random(n) < p_out
    big = 10 * sigma_nu * rng.standard_normal(n)
    noise = np.where(out, big, noise)
    ids = np.array([f"a{k:03d}" for k in range(n)], dtype=object)
    agents = pd.DataFrame({"agent": ids, "y": field_ + noise})
    edges = pd.DataFrame({"source": ids[u], "target": ids[v], "weight": w})
    return FieldInstance(
        agents=agents,
        edges=edges,
        field=field_,
        positions=pos,
        outlier=out,
        huber_c=1.0 / sigma_nu**2,
        huber_kappa=1.345 * sigma_nu,
        s=s,
        mu0=mu0,
        radius=radius,
    )


def geometric_radius(n: int, mean_degree: float) -> float:
    """Radius r at which the geometric graph on n uniform points of [0,1]² has the given expected degree.

    Solves ``(n − 1)·P(‖U − U'‖ ≤ r) = mean_degree`` with the exact unit-square probability
    ``P = πr² − 8r³/3 + r⁴/2`` (r ≤ 1; boundary effects included) by bisection.
    """
    if not 0 < mean_degree < n - 1:
        raise ValueError(f"mean_degree must lie in (0, n − 1), got {mean_degree} for n = {n}")
    lo, hi = 0.0, 1.0
    for _ in range(100):
        r = 0.5 * (lo + hi)
        if (n - 1) * (math.pi * r * r - 8 * r**3 / 3 + r**4 / 2) < mean_degree:
            lo = r
        else:
            hi = r
    return 0.5 * (lo + hi)


def field_estimation_instance_scaled(
    seed: int,
    n: int = 10_000,
    mean_degree: float = 6.23,
    weight_range: tuple[float, float] = (0.5, 1.5),
    s: float = 0.1,
    mu0: float = 0.0,
    sigma_nu: float = 0.5,
    p_out: float = 0.1,
) -> FieldInstance:
    """The field-estimation generator scaled to large n (sparse, O(n log n); docs/methods/personal_models.md §5.2).

    Same model as :func:`field_estimation_instance` (σ_ij ~ U[0.5, 1.5], σ_ii = s, Gaussian field with
    precision ``Q = L_σ + sI``, σ_ν noise with ``p_out`` outliers of 10σ_ν, Huber ``c = 1/σ_ν²``,
    ``κ = 1.345σ_ν``), with three changes that make n = 10⁴…10⁵ cheap:

    1. **Radius from the mean degree.** ``r = geometric_radius(n, mean_degree)``; the default 6.23 is the
       expected degree of the n = 30, r = 0.3 setup (``29·(π·0.09 − 8·0.027/3 + 0.0081/2)``), so the
       local graph looks like the paper's at any n. Pairs come from a k-d tree, not all n² distances.
    2. **Bridging instead of redrawing.** At degree ≈ 6 a large geometric graph is almost never
       connected (a few dozen isolated points), so positions are drawn once and every component other
       than the largest is joined to the largest by one edge: its point nearest to the largest component
       and that nearest point (components in order of their smallest agent). ``bridges`` counts them.
    3. **Field sampler.** ``θ = μ0 + Q⁻¹(Bᵀ diag(√σ) z₁ + √s z₂)`` with B the edge–agent incidence matrix
       and z₁ ∈ R^|E|, z₂ ∈ R^n standard normal: covariance ``Q⁻¹(BᵀΣB + sI)Q⁻¹ = Q⁻¹``, the same law as the
       ``R⁻ᵀz`` of the n = 30 generator but with one sparse solve instead of a dense Cholesky (the numbers differ).

    Draw order from ``numpy.random.default_rng(seed)``: positions, weights (edges sorted i < j, row-major,
    bridges included), z₁, z₂, noise, outlier flags, outlier values. Agents ``a00000, ...``.
    """
    from scipy.spatial import cKDTree

    rng = np.random.default_rng(seed)
    radius = geometric_radius(n, mean_degree)
    pos = rng.random((n, 2))
    pairs = cKDTree(pos).query_pairs(radius, output_type="ndarray").astype(np.int64)
    u, v = pairs[:, 0], pairs[:, 1]
    adj = sp.csr_matrix((np.ones(u.size), (u, v)), shape=(n, n))
    ncomp, lab = connected_components(adj, directed=False)
    extra_u: list[int] = []
    extra_v: list[int] = []
    if ncomp > 1:
        sizes = np.bincount(lab)
        giant = int(np.argmax(sizes))
        in_giant = np.flatnonzero(lab == giant)
        tree = cKDTree(pos[in_giant])
        first = np.full(ncomp, n, dtype=np.int64)
        np.minimum.at(first, lab, np.arange(n))
        for c in np.argsort(first, kind="stable"):
            if c == giant:
                continue
            members = np.flatnonzero(lab == c)
            dist, near = tree.query(pos[members], k=1)
            k = int(np.argmin(dist))
            a, b = int(members[k]), int(in_giant[np.atleast_1d(near)[k]])
            extra_u.append(min(a, b))
            extra_v.append(max(a, b))
    u = np.concatenate([u, np.asarray(extra_u, dtype=np.int64)])
    v = np.concatenate([v, np.asarray(extra_v, dtype=np.int64)])
    order = np.lexsort((v, u))
    u, v = u[order], v[order]
    w = rng.uniform(weight_range[0], weight_range[1], size=u.size)
    W = sp.csr_matrix((w, (u, v)), shape=(n, n))
    W = W + W.T
    Q = (sp.diags(np.asarray(W.sum(axis=1)).ravel()) - W + s * sp.identity(n)).tocsc()
    m = u.size
    B = sp.csr_matrix(
        (np.concatenate([np.ones(m), -np.ones(m)]), (np.tile(np.arange(m), 2), np.concatenate([u, v]))),
        shape=(m, n),
    )
    z1 = rng.standard_normal(m)
    z2 = rng.standard_normal(n)
    rhs = B.T @ (np.sqrt(w) * z1) + math.sqrt(s) * z2
    field_ = mu0 + np.asarray(spsolve(Q, rhs))
    noise = sigma_nu * rng.standard_normal(n)
    out = rng.random(n) < p_out
    big = 10 * sigma_nu * rng.standard_normal(n)
    noise = np.where(out, big, noise)
    width = max(3, len(str(n - 1)))
    ids = np.array([f"a{k:0{width}d}" for k in range(n)], dtype=object)
    agents = pd.DataFrame({"agent": ids, "y": field_ + noise})
    edges = pd.DataFrame({"source": ids[u], "target": ids[v], "weight": w})
    log.info("scaled field instance: n=%d, |E|=%d, r=%.4g, %d bridge edge(s)", n, m, radius, len(extra_u))
    return FieldInstance(
        agents=agents,
        edges=edges,
        field=field_,
        positions=pos,
        outlier=out,
        huber_c=1.0 / sigma_nu**2,
        huber_kappa=1.345 * sigma_nu,
        s=s,
        mu0=mu0,
        radius=radius,
        bridges=len(extra_u),
    )


def worker_calibration_tables(
    labels: pd.DataFrame,
    truth: pd.DataFrame,
    *,
    target: Literal["accuracy", "bias"] = "accuracy",
    k: int = 5,
    min_overlap: int = 3,
    strength: float = 1.0,
    reg: float = 1.0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``agents``/``edges`` tables for per-worker calibration smoothed over a worker-similarity graph.

    docs/methods/personal_models.md §1.4 A for crowdsourcing: each worker i has a parameter θ_i estimated from the
    few gold tasks it labelled, and borrows strength from workers that behave like it on all tasks.

    - ``target="accuracy"`` (categorical labels, ``loss="logistic"``): one sample per gold task the
      worker labelled, ``y = 1[label == gold]``, intercept feature; θ_i is the worker's log-odds of
      being right. Prior mean = pooled log-odds of all gold answers, precision ``reg``.
    - ``target="bias"`` (numeric labels, ``loss="quadratic"``): ``y = label − gold``, intercept
      feature; θ_i is the worker's additive bias. Prior mean 0, precision ``reg``.

    Edges: for workers with at least ``min_overlap`` co-labelled tasks (all tasks, gold or not), the
    similarity is the agreement rate (accuracy: share of co-labelled tasks with equal labels) or
    ``1/(1 + RMS label difference/σ)`` (bias; σ = std of all labels); each worker keeps its ``k`` most
    similar partners (union of the k-NN lists, so the graph is symmetric) and the weight is
    ``strength·similarity``. Co-label counts and agreements are sparse products (no dense W×W).
    Workers without gold get a prior-only row (``y`` NaN) and are estimated through the graph.
    The graph may be disconnected (e.g. workers sharing no task): check or fit with
    ``allow_disconnected=True``.

    Parameters
    ----------
    labels : pandas.DataFrame
        ``task, worker, label``.
    truth : pandas.DataFrame
        ``task, label`` (gold; may cover a few tasks only).
    target : {"accuracy", "bias"}
    k, min_overlap : int
    strength : float
        Multiplier of all edge weights (how much a worker borrows from its neighbours).
    reg : float
        Prior precision λ of every worker.

    Returns
    -------
    agents : pandas.DataFrame
        ``agent, y, intercept, reg, prior_mean``.
    edges : pandas.DataFrame
        ``source, target, weight``.

    Examples
    --------
    >>> from pathlib import Path
    >>> import pandas as pd
    >>> from crowdflow.personal_models.fit import fit_personal_models
    >>> d = Path(__file__).resolve().parents[1] / "data" / "snow_temp"
    >>> labels, truth = pd.read_csv(d / "labels.csv"), pd.read_csv(d / "truth.csv")
    >>> gold = truth.sample(40, random_state=0)               # pretend only 40 tasks have gold
    >>> agents, edges = worker_calibration_tables(labels, gold, k=5)
    >>> res = fit_personal_models(agents, edges, loss="logistic", method="centralized",
    ...                           allow_disconnected=True)
    >>> acc = 1 / (1 + np.exp(-res.personal_models["theta_intercept"]))   # smoothed accuracy
    >>> bool(acc.between(0, 1).all())
    True
    """
    for colname in ("task", "worker", "label"):
        if colname not in labels.columns:
            raise ValueError(f"labels: missing column '{colname}'")
    for colname in ("task", "label"):
        if colname not in truth.columns:
            raise ValueError(f"truth: missing column '{colname}'")
    lab = labels[["task", "worker", "label"]].copy()
    lab["task"] = lab["task"].astype(str)
    lab["worker"] = lab["worker"].astype(str)
    gold = truth[["task", "label"]].copy()
    gold["task"] = gold["task"].astype(str)
    gold = gold.drop_duplicates("task", keep="last").rename(columns={"label": "gold"})
    workers = np.array(sorted(lab["worker"].unique()), dtype=object)
    tasks = np.array(sorted(lab["task"].unique()), dtype=object)
    wi = pd.Index(workers).get_indexer(lab["worker"])
    ti = pd.Index(tasks).get_indexer(lab["task"])
    nw, nt = workers.size, tasks.size
    B = sp.csr_matrix((np.ones(len(lab)), (wi, ti)), shape=(nw, nt))
    N = (B @ B.T).tocoo()
    if target == "accuracy":
        codes, _ = pd.factorize(lab["label"].astype(str))
        agree = sp.csr_matrix((nw, nw))
        for code in range(int(codes.max(initial=-1)) + 1):
            sel = codes == code
            Bc = sp.csr_matrix((np.ones(int(sel.sum())), (wi[sel], ti[sel])), shape=(nw, nt))
            agree = agree + Bc @ Bc.T
        sim_num = agree.tocsr()
    elif target == "bias":
        val = pd.to_numeric(lab["label"], errors="coerce").to_numpy(dtype=np.float64)
        if not np.all(np.isfinite(val)):
            raise ValueError("labels: target='bias' needs numeric labels")
        Bv = sp.csr_matrix((val, (wi, ti)), shape=(nw, nt))
        Bv2 = sp.csr_matrix((val * val, (wi, ti)), shape=(nw, nt))
        ssd = (Bv2 @ B.T + B @ Bv2.T - 2 * (Bv @ Bv.T)).tocsr()  # Σ over co-labelled tasks of (l_i − l_j)²
        sim_num = ssd
        scale = float(np.std(val)) or 1.0
    else:
        raise ValueError(f"unknown target '{target}' (accuracy | bias)")
    r, c, cnt = N.row, N.col, N.data
    ok = (r != c) & (cnt >= min_overlap)
    r, c, cnt = r[ok], c[ok], cnt[ok]
    num = np.asarray(sim_num[r, c]).ravel()
    if target == "accuracy":
        sim = num / cnt
    else:
        sim = 1.0 / (1.0 + np.sqrt(np.maximum(num, 0.0) / cnt) / scale)
    order = np.lexsort((-cnt, -sim, r))
    r, c, sim = r[order], c[order], sim[order]
    first = np.searchsorted(r, r, side="left")
    rank = np.arange(r.size) - first
    keep = (rank < k) & (sim > 0)
    lo, hi = np.minimum(r[keep], c[keep]), np.maximum(r[keep], c[keep])
    e = pd.DataFrame({"lo": lo, "hi": hi, "weight": strength * sim[keep]}).drop_duplicates(["lo", "hi"])
    edges = pd.DataFrame(
        {
            "source": workers[e["lo"].to_numpy()],
            "target": workers[e["hi"].to_numpy()],
            "weight": e["weight"].to_numpy(),
        }
    )
    g = lab.merge(gold, on="task", how="inner")
    if target == "accuracy":
        y = (g["label"].astype(str) == g["gold"].astype(str)).astype(np.float64)
        pooled = float(np.clip(y.mean(), 0.02, 0.98)) if len(y) else 0.5
        prior = math.log(pooled / (1 - pooled))
    else:
        y = pd.to_numeric(g["label"], errors="coerce") - pd.to_numeric(g["gold"], errors="coerce")
        prior = 0.0
    rows = pd.DataFrame({"agent": g["worker"].to_numpy(), "y": y.to_numpy(dtype=np.float64)})
    no_gold = np.setdiff1d(workers, rows["agent"].unique())
    rows = pd.concat([rows, pd.DataFrame({"agent": no_gold, "y": np.nan})], ignore_index=True)
    rows["intercept"] = 1.0
    rows["reg"] = float(reg)
    rows["prior_mean"] = prior
    return rows.sort_values("agent", kind="stable").reset_index(drop=True), edges


def preference_tables(
    comparisons: pd.DataFrame,
    items: pd.DataFrame,
    *,
    feature_cols: Sequence[str] | None = None,
) -> pd.DataFrame:
    """``agents`` table of personalised Bradley–Terry preferences (docs/methods/personal_models.md §1.4 B).

    Each comparison of user i between items a and b becomes one local sample with ``x = x_a − x_b``
    and ``y = 1`` if a was preferred (``outcome > 0``), ``0`` if b was (``outcome < 0``). A tie
    (``outcome == 0``) becomes two samples, y = 1 and y = 0, each with half the weight (its expected
    Bradley–Terry log-likelihood). Pair it with a user-similarity ``edges`` table and fit with
    ``fit_personal_models(agents, edges, loss="logistic", reg=λ)``; θ_i scores item x as xᵀθ_i.

    Parameters
    ----------
    comparisons : pandas.DataFrame
        ``annotator, item_a, item_b, outcome`` (docs/reference/spec.md; ``worker``/``user`` accepted for
        ``annotator``), optional ``weight``.
    items : pandas.DataFrame
        ``item`` (or ``item_id``) and numeric feature columns.
    feature_cols : sequence of str, optional
        Item features to use (default: every numeric column but the id).

    Returns
    -------
    pandas.DataFrame
        ``agent, x, y, weight``.

    Examples
    --------
    >>> comps = pd.DataFrame({"annotator": ["u1", "u1", "u2"], "item_a": ["p", "q", "p"],
    ...                       "item_b": ["q", "r", "r"], "outcome": [1, -1, 0]})
    >>> items = pd.DataFrame({"item": ["p", "q", "r"], "price": [1.0, 2.0, 3.0], "size": [0.0, 1.0, 0.0]})
    >>> preference_tables(comps, items)[["agent", "y", "weight"]].to_dict("list")
    {'agent': ['u1', 'u1', 'u2', 'u2'], 'y': [1.0, 0.0, 1.0, 0.0], 'weight': [1.0, 1.0, 0.5, 0.5]}
    """
    comps = comparisons.copy()
    for alias in ("worker", "user", "agent"):
        if "annotator" not in comps.columns and alias in comps.columns:
            comps = comps.rename(columns={alias: "annotator"})
    for c in ("annotator", "item_a", "item_b", "outcome"):
        if c not in comps.columns:
            raise ValueError(f"comparisons: missing column '{c}'")
    it = items.rename(columns={"item_id": "item"}) if "item" not in items.columns else items
    if "item" not in it.columns:
        raise ValueError("items: missing column 'item'")
    if feature_cols is None:
        feature_cols = [c for c in it.columns if c != "item" and pd.api.types.is_numeric_dtype(it[c])]
    if not feature_cols:
        raise ValueError("items: no numeric feature columns")
    if it["item"].astype(str).duplicated().any():
        raise ValueError("items: duplicate item ids")
    feats = it[list(feature_cols)].to_numpy(dtype=np.float64)
    if not np.all(np.isfinite(feats)):
        raise ValueError("items: non-finite features")
    index = pd.Index(it["item"].astype(str))
    ia = index.get_indexer(pd.Index(comps["item_a"].astype(str)))
    ib = index.get_indexer(pd.Index(comps["item_b"].astype(str)))
    missing = sorted(set(comps["item_a"].astype(str)[ia < 0]) | set(comps["item_b"].astype(str)[ib < 0]))
    if missing:
        raise ValueError(f"comparisons: unknown item id(s) {format_ids(missing)}")
    out = pd.to_numeric(comps["outcome"], errors="coerce").to_numpy(dtype=np.float64)
    if not np.all(np.isfinite(out)):
        raise ValueError("comparisons: non-finite outcome")
    if "weight" in comps.columns:
        w = pd.to_numeric(comps["weight"], errors="coerce").to_numpy(dtype=np.float64)
        if not np.all(np.isfinite(w) & (w >= 0)):
            raise ValueError("comparisons: non-finite or negative weight")
    else:
        w = np.ones(len(comps))
    d = feats[ia] - feats[ib]
    tie = out == 0
    agent = comps["annotator"].astype(str).to_numpy()
    y = (out > 0).astype(np.float64)
    rows_idx = np.concatenate([np.flatnonzero(~tie), np.flatnonzero(tie), np.flatnonzero(tie)])
    y_all = np.concatenate([y[~tie], np.ones(int(tie.sum())), np.zeros(int(tie.sum()))])
    w_all = np.concatenate([w[~tie], 0.5 * w[tie], 0.5 * w[tie]])
    res = pd.DataFrame({"agent": agent[rows_idx], "x": list(d[rows_idx]), "y": y_all, "weight": w_all, "_o": rows_idx})
    res = res.sort_values(["agent", "_o", "y"], ascending=[True, True, False], kind="stable")
    return res.drop(columns="_o").reset_index(drop=True)
