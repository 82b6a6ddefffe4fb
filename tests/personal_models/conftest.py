"""Shared instances of the personal-models tests: the n = 30 field instance, a scaled one, table factories.

Helpers are fixtures (pytest imports test files with ``--import-mode=importlib``, so a test module
cannot import a sibling module): a test asks for ``quadratic_tables`` and calls it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest

from crowdflow.personal_models import centralized
from crowdflow.synth.personal_models import field_estimation_instance, field_estimation_instance_scaled


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(*args, **kwargs)


def _quadratic_tables(seed: int, n: int = 30, p: int = 3, radius: float = 0.3, lo: int = 2, hi: int = 7):
    """AT-6 instance: the graph of docs/methods/personal_models.md §5.1, p-dim ridge regression, lo..hi samples per agent."""
    inst = field_estimation_instance(seed, n=n, radius=radius)
    rng = np.random.default_rng(seed + 1000)
    base = rng.standard_normal(p)
    rows = []
    for a in inst.agents["agent"]:
        th = base + 0.5 * rng.standard_normal(p)
        for _ in range(int(rng.integers(lo, hi + 1))):
            x = rng.standard_normal(p)
            rows.append(
                {"agent": a, **{f"f{k}": x[k] for k in range(p)}, "y": float(x @ th + 0.1 * rng.standard_normal())}
            )
    return pd.DataFrame(rows), inst.edges


def _bt_tables(seed: int, n: int = 20, p: int = 4, n_items: int = 12):
    """AT-16 instance: personalised Bradley–Terry, r = 0.35 graph, 5–15 comparisons per agent."""
    inst = field_estimation_instance(seed, n=n, radius=0.35)
    rng = np.random.default_rng(seed + 2000)
    items = rng.standard_normal((n_items, p))
    base = rng.standard_normal(p)
    rows = []
    for a in inst.agents["agent"]:
        th = base + 0.3 * rng.standard_normal(p)
        for _ in range(int(rng.integers(5, 16))):
            i, j = rng.choice(n_items, 2, replace=False)
            d = items[i] - items[j]
            rows.append({"agent": a, "x": list(d), "y": float(rng.random() < 1 / (1 + np.exp(-d @ th)))})
    return pd.DataFrame(rows), inst.edges


@pytest.fixture
def quiet() -> Callable[..., Any]:
    """``quiet(fn, *args, **kwargs)``: call ``fn`` with RuntimeWarnings (unconverged runs) silenced."""
    return _quiet


@pytest.fixture
def quadratic_tables() -> Callable[..., Any]:
    """Factory of AT-6 instances (agents with features f0.., edges)."""
    return _quadratic_tables


@pytest.fixture
def bt_tables() -> Callable[..., Any]:
    """Factory of AT-16 instances (agents with an ``x`` list column, edges)."""
    return _bt_tables


@pytest.fixture(scope="session")
def field():
    """The n = 30 field instance (seed 3), its problem and the exact optimum."""
    inst = field_estimation_instance(3)
    prob = inst.problem()
    ref = centralized(prob)
    return inst, prob, ref.theta


@pytest.fixture(scope="session")
def scaled():
    """The scaled generator at n = 400 (seed 5), its problem and the exact optimum."""
    inst = field_estimation_instance_scaled(5, n=400)
    prob = inst.problem()
    return inst, prob, centralized(prob).theta
