"""Seeded synthetic pairwise comparisons with planted outliers and their ground truth (ranking job).

The instances of the method's papers and of its acceptance tests (docs/methods/ranking.md §8):

- :func:`mm13_instance`: the MM13 protocol — a random total order of n items, SN uniform ±1 comparisons
  (a multigraph), a random fraction OP of them reversed (the outliers); docs/methods/ranking.md §8.2;
- :func:`gaussian_outliers_instance`: scores ``θ* ~ N(0, 1)``, outcomes ``θ*_i − θ*_j + N(0, σ²)``, a set
  of rows shifted by a random sign times a fixed or uniform magnitude, with the two settings the tests
  use, :func:`huber_instance` (n = 30, m = 600, σ = 0.2, 30 rows ±4) and :func:`continuous_instance`
  (n = 100, m = 3,000, σ = 0.1, 150 rows ±U(3, 5));
- :func:`erdos_renyi_flips`: one ±1 comparison per pair of an Erdős–Rényi graph G(n, q), a random
  fraction reversed;
- :func:`planted_instance`: the planted family of the outlier rule's tests and benchmark
  (docs/methods/ranking.md §3.4.2, §8.6): :class:`PlantedSpec` sets the size (10²–10⁴ items), the rows per
  item, the pair design (uniform, band, Zipf), the number of connected pieces, the outcome type (graded,
  graded with ties, Student-t noise, ±1 BTL, ±1 Thurstone with ties), the noise level, the share and size
  of planted row outliers and the share of annotators who flip most of their answers;
- :func:`issue_instance`: the instance of crowdflow issue #20 (60 items, 3,000 graded rows, σ = 0.3,
  10 % of the rows replaced by sign-flipped outcomes of size 2–4).

Pairs are drawn by :func:`random_pairs` (uniform over ordered pairs of distinct items). Every generator
takes a seed and draws from ``numpy.random.default_rng(seed)`` in a fixed order, so an instance is the
same on every run. Items are the integers ``0 … n−1`` (ids ``"0" … "n−1"`` in the graph);
:func:`comparison_table` turns index arrays into an input table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
from scipy.special import ndtr

from crowdflow.ranking import ComparisonGraph, LaplacianSolver

__all__ = [
    "PlantedComparisons",
    "PlantedInstance",
    "PlantedSpec",
    "comparison_table",
    "continuous_instance",
    "erdos_renyi_flips",
    "gaussian_outliers_instance",
    "huber_instance",
    "issue_instance",
    "mm13_instance",
    "planted_instance",
    "random_pairs",
]


@dataclass(frozen=True)
class PlantedComparisons:
    """A synthetic comparison set with its ground truth.

    Attributes
    ----------
    graph : ComparisonGraph
        The comparisons (row k compares ``graph.i[k]`` with ``graph.j[k]``, outcome ``graph.y[k]``).
    outlier : numpy.ndarray
        (m,) bool, the planted outliers (reversed or shifted rows).
    theta : numpy.ndarray or None
        (n,) true scores for score-based instances.
    position : numpy.ndarray or None
        (n,) true rank position of every item (0 = best) for order-based instances.
    """

    graph: ComparisonGraph
    outlier: np.ndarray
    theta: np.ndarray | None = None
    position: np.ndarray | None = None


def random_pairs(rng: np.random.Generator, n: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """``m`` ordered pairs ``(i, j)`` of distinct items, uniform over the n(n−1) choices.

    Draws ``i`` uniform on ``0 … n−1``, then ``j`` uniform on the other ``n − 1`` items.
    """
    i = rng.integers(0, n, m)
    j = rng.integers(0, n - 1, m)
    j[j >= i] += 1
    return i, j


def mm13_instance(seed: int, sn: int = 2000, op: float = 0.05, n: int = 16) -> PlantedComparisons:
    """The MM13 simulation: a random total order, ``sn`` uniform ±1 comparisons, a fraction ``op`` reversed.

    Parameters
    ----------
    seed : int
    sn : int
        Number of comparisons (rows; pairs repeat).
    op : float
        Share of rows reversed (``round(op·sn)`` of them): the outliers.
    n : int
        Number of items.
    """
    rng = np.random.default_rng(seed)
    pos = rng.permutation(n)  # pos[item] = true rank position (0 = best)
    i, j = random_pairs(rng, n, sn)
    y = np.where(pos[i] < pos[j], 1.0, -1.0)
    flip = np.zeros(sn, dtype=bool)
    flip[rng.choice(sn, round(op * sn), replace=False)] = True
    y[flip] *= -1
    return PlantedComparisons(ComparisonGraph.from_arrays(i, j, y, n=n), flip, position=pos)


def gaussian_outliers_instance(
    seed: int, n: int, m: int, sigma: float, n_outliers: int, shift: float | tuple[float, float]
) -> PlantedComparisons:
    """Outcomes ``θ*_i − θ*_j + N(0, σ²)`` with ``θ* ~ N(0, 1)``; ``n_outliers`` rows shifted.

    Each shifted row moves by a random sign times ``shift`` (a number) or times ``U(lo, hi)`` (a pair
    ``(lo, hi)``).
    """
    rng = np.random.default_rng(seed)
    i, j = random_pairs(rng, n, m)
    theta = rng.standard_normal(n)
    y = theta[i] - theta[j] + sigma * rng.standard_normal(m)
    rows = rng.choice(m, n_outliers, replace=False)
    if isinstance(shift, tuple):
        y[rows] += rng.choice([-1.0, 1.0], n_outliers) * rng.uniform(shift[0], shift[1], n_outliers)
    else:
        y[rows] += shift * rng.choice([-1.0, 1.0], n_outliers)
    truth = np.zeros(m, dtype=bool)
    truth[rows] = True
    return PlantedComparisons(ComparisonGraph.from_arrays(i, j, y, n=n), truth, theta=theta)


def huber_instance(seed: int = 1) -> PlantedComparisons:
    """n = 30 items, m = 600 uniform pairs, σ = 0.2, 30 rows shifted by ±4 (acceptance test 9's setting)."""
    return gaussian_outliers_instance(seed, n=30, m=600, sigma=0.2, n_outliers=30, shift=4.0)


def continuous_instance(seed: int) -> PlantedComparisons:
    """n = 100, m = 3,000, σ = 0.1, 5 % of the rows shifted by ±U(3, 5) (acceptance test 16's setting)."""
    return gaussian_outliers_instance(seed, n=100, m=3000, sigma=0.1, n_outliers=150, shift=(3.0, 5.0))


def erdos_renyi_flips(seed: int, q: float, n: int = 100, frac: float = 0.1) -> PlantedComparisons:
    """One ±1 comparison per pair of G(n, q) (random orientation), true order random, ``frac`` reversed."""
    rng = np.random.default_rng(seed)
    iu, ju = np.triu_indices(n, 1)
    keep = rng.random(iu.size) < q
    i, j = iu[keep], ju[keep]
    sw = rng.random(i.size) < 0.5
    i, j = np.where(sw, j, i), np.where(sw, i, j)
    pos = rng.permutation(n)
    y = np.where(pos[i] < pos[j], 1.0, -1.0)
    m = y.size
    s = round(frac * m)
    rows = rng.choice(m, s, replace=False)
    y[rows] *= -1
    truth = np.zeros(m, dtype=bool)
    truth[rows] = True
    return PlantedComparisons(ComparisonGraph.from_arrays(i, j, y, n=n), truth, position=pos)


def comparison_table(
    i: np.ndarray,
    j: np.ndarray,
    y: np.ndarray,
    w: np.ndarray | None = None,
    annotator: list[str] | np.ndarray | None = None,
) -> pd.DataFrame:
    """A canonical comparison table ``annotator, item_a, item_b, outcome [, weight]`` from index arrays.

    Items ``k`` are named ``"it<k>"``; without ``annotator`` the rows are dealt round-robin to seven
    annotators ``a0 … a6``.
    """
    df = pd.DataFrame(
        {
            "annotator": annotator if annotator is not None else [f"a{k % 7}" for k in range(len(y))],
            "item_a": [f"it{v}" for v in i],
            "item_b": [f"it{v}" for v in j],
            "outcome": np.asarray(y, dtype=float),
        }
    )
    if w is not None:
        df["weight"] = w
    return df


Outcome = Literal["graded", "graded_ties", "graded_t5", "pm1_btl", "pm1_thurstone"]
Design = Literal["uniform", "band", "zipf"]


@dataclass(frozen=True)
class PlantedSpec:
    """One cell of the planted family (docs/methods/ranking.md §8.6).

    Model: ``θ* ~ N(0, 1)``; row k compares ``(i, j)`` with true gap ``d_k = θ*_i − θ*_j``.

    * graded: ``y = d + γ* + ε``, ``ε ~ N(0, σ²)``; ``graded_t5``: ε is Student-t with 5 degrees of
      freedom scaled to variance σ²; ``graded_ties``: y rounded to the grid ``σℤ`` (a tie is 0; the
      noise level is then ``σ_eff = σ√(13/12)``). A **row outlier of size a** has
      ``γ*_k = −sign(d_k)·a·σ_eff``: a shift against the true order, a noise levels long.
    * ±1: ``pm1_btl`` draws ``y = +1`` with probability ``1/(1 + e^{−d/σ})``; ``pm1_thurstone`` takes the
      sign of ``d + σε`` and a tie (0) when ``|d + σε| ≤ tie_width·σ`` (default σ/4). A row outlier
      is set against the true order, ``y = −sign(d)``. The least-squares model is misspecified for
      such data, so an outlier's **size** is measured in the model the method fits:
      ``|y − δ| / σ_lin`` with δ the least-squares fit of the expected outcomes on the same graph and
      ``σ_lin`` the rms of the clean residuals about it. A flip between items close in the ranking is
      small and no rule can tell it from a natural upset.
    * **Flippers**: a share ``flipper_frac`` of the annotators reverse each answer with probability
      ``flip_prob`` (graded: ``y = −d + ε``, an outlier of size ``2|d|/σ_eff``); their reversed rows
      are outliers.

    Attributes
    ----------
    n : int
        Items.
    rows_per_item : float
        Mean rows per item (``m = round(rows_per_item·n/2)``).
    design : {'uniform', 'band', 'zipf'}
        Uniform random pairs; pairs of items close in the true order (offset geometric with mean
        ``max(2, n/20)``: adaptive and Swiss designs); or item popularity ∝ 1/rank (many items with one
        or two rows, bridges, rows no method can check).
    n_components : int
        Disconnected pieces (items split at random, rows in proportion).
    outcome : str
        See above.
    sigma : float
        Noise level (graded: sd; ±1: BTL temperature or Thurstone sd), against sd(θ*) = 1.
    frac : float
        Share of rows made row outliers.
    size : float
        Row outlier size a (graded only; ±1 flips have their own sizes).
    flipper_frac, flip_prob : float
        Flipping annotators (see above).
    n_annotators : int, optional
        Default ``max(10, m // 40)``; activity ∝ rank^−0.7.
    outlier_gap : float
        Row outliers are drawn only among rows whose true gap is at least this many noise levels,
        ``|d_k| ≥ outlier_gap·σ`` (0: every row; crowdflow issue #35's ±1 instance: flips among
        far-apart pairs).
    tie_width : float
        ``pm1_thurstone``: a tie when ``|d + σε| ≤ tie_width·σ`` (0: binary Thurstone outcomes, no ties).
    """

    n: int = 100
    rows_per_item: float = 20.0
    design: Design = "uniform"
    n_components: int = 1
    outcome: Outcome = "graded"
    sigma: float = 0.3
    frac: float = 0.1
    size: float = 3.0
    flipper_frac: float = 0.0
    flip_prob: float = 0.8
    n_annotators: int | None = None
    outlier_gap: float = 0.0
    tie_width: float = 0.25


@dataclass(frozen=True)
class PlantedInstance:
    """A draw from the planted family with its truth.

    Attributes
    ----------
    graph : ComparisonGraph
        The rows (annotator ids ``"a<k>"``).
    outlier : numpy.ndarray
        (m,) bool, planted outliers (row outliers and flipped rows).
    size : numpy.ndarray
        (m,) outlier size in noise levels (0 for clean rows).
    theta : numpy.ndarray
        (n,) true scores.
    sigma_eff : float
        The noise level sizes are measured in (σ_eff, or σ_lin for ±1 outcomes).
    flipper : numpy.ndarray
        (A,) bool per annotator.
    spec : PlantedSpec
    seed : int
    """

    graph: ComparisonGraph
    outlier: np.ndarray
    size: np.ndarray
    theta: np.ndarray
    sigma_eff: float
    flipper: np.ndarray
    spec: PlantedSpec
    seed: int


def _design_pairs(
    rng: np.random.Generator, items: np.ndarray, theta: np.ndarray, m: int, design: Design
) -> tuple[np.ndarray, np.ndarray]:
    """``m`` pairs of distinct items among ``items`` drawn by ``design`` (see :class:`PlantedSpec`)."""
    nc = items.size
    if nc < 2 or m == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if design == "uniform":
        a, b = random_pairs(rng, nc, m)
    elif design == "band":
        order = np.argsort(theta[items])
        pa = rng.integers(0, nc, m)
        off = np.minimum(rng.geometric(1.0 / max(2.0, nc / 20.0), m), nc - 1)
        pb = pa + np.where(rng.random(m) < 0.5, off, -off)
        pb = np.where((pb < 0) | (pb >= nc), 2 * pa - pb, pb)  # reflect at the ends
        pb = np.clip(pb, 0, nc - 1)
        pb = np.where(pb == pa, (pa + 1) % nc, pb)
        a, b = order[pa], order[pb]
    elif design == "zipf":
        p = 1.0 / np.arange(1, nc + 1)
        p = p[rng.permutation(nc)] / p.sum()
        a, b = rng.choice(nc, m, p=p), rng.choice(nc, m, p=p)
        while (same := a == b).any():
            b[same] = rng.choice(nc, int(same.sum()), p=p)
    else:
        raise ValueError(f"unknown design {design!r}")
    return items[a], items[b]


def planted_instance(spec: PlantedSpec, seed: int) -> PlantedInstance:
    """One seeded draw from the planted family (the model and the size of an outlier: :class:`PlantedSpec`)."""
    rng = np.random.default_rng(seed)
    n, sig = int(spec.n), float(spec.sigma)
    theta = rng.standard_normal(n)
    m_total = round(spec.rows_per_item * n / 2)
    comp = rng.integers(0, spec.n_components, n) if spec.n_components > 1 else np.zeros(n, np.int64)
    pieces = [
        _design_pairs(rng, np.flatnonzero(comp == c), theta, round(m_total * np.mean(comp == c)), spec.design)
        for c in range(spec.n_components)
    ]
    perm = rng.permutation(sum(p[0].size for p in pieces))
    i = np.concatenate([p[0] for p in pieces])[perm]
    j = np.concatenate([p[1] for p in pieces])[perm]
    m = i.size
    d = theta[i] - theta[j]
    n_ann = spec.n_annotators or max(10, m // 40)
    activity = 1.0 / np.arange(1, n_ann + 1) ** 0.7
    ann = rng.choice(n_ann, m, p=activity / activity.sum())
    flipper = np.zeros(n_ann, dtype=bool)
    if spec.flipper_frac > 0:
        flipper[rng.choice(n_ann, max(1, round(spec.flipper_frac * n_ann)), replace=False)] = True
    flips = flipper[ann] & (rng.random(m) < spec.flip_prob)
    planted = np.zeros(m, dtype=bool)
    free = np.flatnonzero(~flips & (np.abs(d) >= spec.outlier_gap * sig))
    planted[rng.choice(free, min(round(spec.frac * m), free.size), replace=False)] = True
    toward = np.where(d == 0, rng.choice([-1.0, 1.0], m), np.sign(d))
    if not spec.outcome.startswith("pm1"):
        if spec.outcome == "graded_t5":
            eps = sig * rng.standard_t(5, m) / np.sqrt(5.0 / 3.0)
        else:
            eps = sig * rng.standard_normal(m)
        s_eff = sig * np.sqrt(13.0 / 12.0) if spec.outcome == "graded_ties" else sig
        gam = np.where(planted, -toward * spec.size * s_eff, 0.0)
        gam[flips] = -2.0 * d[flips]
        y = d + gam + eps
        if spec.outcome == "graded_ties":
            y = np.round(y / sig) * sig
        outlier = gam != 0
        size = np.abs(gam) / s_eff
    else:
        if spec.outcome == "pm1_btl":
            y = np.where(rng.random(m) < 1.0 / (1.0 + np.exp(-d / sig)), 1.0, -1.0)
            mu, ey2 = np.tanh(d / (2.0 * sig)), np.ones(m)
        else:
            u = d + sig * rng.standard_normal(m)
            tw = float(spec.tie_width)
            y = np.where(np.abs(u) > tw * sig, np.sign(u), 0.0)
            p_pos, p_neg = ndtr((d - tw * sig) / sig), ndtr((-d - tw * sig) / sig)
            mu, ey2 = p_pos - p_neg, p_pos + p_neg
        y[flips] = -y[flips]
        y[planted] = -toward[planted]
        outlier = (planted | flips) & (y == -toward)
        g0 = ComparisonGraph.from_arrays(i, j, mu, n=n)
        fit = LaplacianSolver.from_graph(g0).solve(g0.divergence(mu))
        delta = fit[i] - fit[j]
        s_eff = float(np.sqrt(np.mean(ey2 - 2.0 * mu * delta + delta**2)))
        size = np.where(outlier, np.abs(y - delta) / s_eff, 0.0)
    annotator = np.array([f"a{a}" for a in ann], dtype=object)
    graph = ComparisonGraph.from_arrays(i, j, y, n=n, annotator=annotator)
    return PlantedInstance(graph, outlier, size, theta, float(s_eff), flipper, spec, seed)


def issue_instance(seed: int) -> PlantedComparisons:
    """Crowdflow issue #20's instance: 60 items, 3,000 uniform rows, ``y = d + N(0, 0.3²)``, 10 % replaced.

    A replaced row's outcome is ``−sign(d)·U(2, 4)``: against the true order, 2 to 4 outcome units long.
    """
    rng = np.random.default_rng(seed)
    n, m = 60, 3000
    i, j = random_pairs(rng, n, m)
    theta = rng.standard_normal(n)
    d = theta[i] - theta[j]
    y = d + 0.3 * rng.standard_normal(m)
    rows = rng.choice(m, m // 10, replace=False)
    y[rows] = -np.where(d[rows] == 0, 1.0, np.sign(d[rows])) * rng.uniform(2.0, 4.0, rows.size)
    truth = np.zeros(m, dtype=bool)
    truth[rows] = True
    return PlantedComparisons(ComparisonGraph.from_arrays(i, j, y, n=n), truth, theta=theta)


def oracle_pvalues(inst: PlantedInstance) -> np.ndarray:
    """Per-row p-values under the true scores and the true clean law of the draw (the oracle's evidence).

    Graded outcomes: ``2Φ̄(|y − d|/σ_eff)`` (Student-t5: the t5 tail of the standardised residual);
    ±1 outcomes: ``Σ_{y: P(y) ≤ P(y_obs)} P(y)`` under the generating law (BTL: logit link at ``d/σ``;
    Thurstone: probit link at ``d/σ`` with tie threshold ``tie_width``), as
    :func:`crowdflow.ranking.laws.law_pvalues`. The oracle flags the Benjamini–Hochberg set of these at the
    rule's ``fdr_q`` with the rule's floor (:func:`crowdflow.ranking.laws.bh_reject`).
    """
    from scipy.stats import t as student_t

    from crowdflow.ranking.laws import law_pvalues

    g, spec = inst.graph, inst.spec
    d = inst.theta[g.i] - inst.theta[g.j]
    if spec.outcome == "pm1_btl":
        return law_pvalues(np.sign(g.y), d / spec.sigma, 0.0, "logit")
    if spec.outcome == "pm1_thurstone":
        return law_pvalues(np.sign(g.y), d / spec.sigma, float(spec.tie_width), "probit")
    z = np.abs(g.y - d) / inst.sigma_eff
    if spec.outcome == "graded_t5":
        return np.asarray(2.0 * student_t.sf(z * np.sqrt(5.0 / 3.0), 5))
    return np.asarray(2.0 * ndtr(-z))
