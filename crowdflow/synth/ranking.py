"""Seeded synthetic pairwise comparisons with planted outliers and their ground truth (ranking job).

The instances of the method's papers and of its acceptance tests (docs/methods/ranking.md §8):

- :func:`mm13_instance`: the MM13 protocol — a random total order of n items, SN uniform ±1 comparisons
  (a multigraph), a random fraction OP of them reversed (the outliers); docs/methods/ranking.md §8.2;
- :func:`gaussian_outliers_instance`: scores ``θ* ~ N(0, 1)``, outcomes ``θ*_i − θ*_j + N(0, σ²)``, a set
  of rows shifted by a random sign times a fixed or uniform magnitude, with the two settings the tests
  use, :func:`huber_instance` (n = 30, m = 600, σ = 0.2, 30 rows ±4) and :func:`continuous_instance`
  (n = 100, m = 3,000, σ = 0.1, 150 rows ±U(3, 5));
- :func:`erdos_renyi_flips`: one ±1 comparison per pair of an Erdős–Rényi graph G(n, q), a random
  fraction reversed.

Pairs are drawn by :func:`random_pairs` (uniform over ordered pairs of distinct items). Every generator
takes a seed and draws from ``numpy.random.default_rng(seed)`` in a fixed order, so an instance is the
same on every run. Items are the integers ``0 … n−1`` (ids ``"0" … "n−1"`` in the graph);
:func:`comparison_table` turns index arrays into an input table.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from crowdflow.ranking import ComparisonGraph

__all__ = [
    "PlantedComparisons",
    "comparison_table",
    "continuous_instance",
    "erdos_renyi_flips",
    "gaussian_outliers_instance",
    "huber_instance",
    "mm13_instance",
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
