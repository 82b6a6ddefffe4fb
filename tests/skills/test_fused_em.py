"""The fused EM sweep (crowdflow/skills/fused_em.py) against the reference kernels it replaces, bit for bit (issue #36).

The accelerated in-memory Dawid–Skene fit evaluates its EM map with one fused sweep over the labels. The reference
is the map as it was built before, from the kernels the plain loop ``_em`` still runs (``_e_step`` class by class,
``_full_m_step`` / ``_one_coin_sums``, ``_class_prior``, ``EMParameters.tables``, the gold pin). Over a generated
family of crowds (2–8 classes, so the specialised sweeps M = 2..6 and the generic one; 1–300 workers; sparse and
dense assignments; workers and tasks with a single label; tied tasks; declared classes nobody uses; gold answers;
both models, β = 0 and 1, α = 0.01 and 0) the two maps must give the same F(θ), objective and log-likelihood, bit for bit, at the
start and at drawn points, the same final posteriors, and whole accelerated fits must be identical.
"""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pandas as pd
import pytest

from crowdflow.labels import LabelMatrix, encode_labels

ds = importlib.import_module("crowdflow.skills.dawid_skene")


class _ReferenceMap:
    """The in-memory EM map as built from the reference kernels (the plain loop's), F(θ) → (F, Φ, ℓ)."""

    def __init__(self, lm: LabelMatrix, one_coin: bool, alpha: float, beta: float, gold: np.ndarray | None = None):
        self.indptr, self.task, self.worker, self.given, self.rows = ds._label_arrays(lm)
        known = np.zeros(lm.n_tasks, dtype=bool) if gold is None else np.asarray(gold) >= 0
        self.gold_tasks = np.flatnonzero(known)
        self.gold_labels = np.asarray(gold, dtype=np.int64)[known] if gold is not None else np.empty(0, np.int64)
        self.par = ds.EMParameters(lm.n_workers, lm.n_classes, one_coin, alpha, beta, lm.labels_per_worker())
        self.table = np.empty((lm.n_classes, lm.n_workers * lm.n_classes))
        self.log_q = np.empty(lm.n_classes)
        self.post_t = np.empty((lm.n_classes, lm.n_tasks))

    def m_step(self, out: np.ndarray) -> None:
        par = self.par
        pi, q = par.split(out)
        if par.one_coin:
            ds._one_coin_sums(self.task, self.worker, self.given, self.post_t, pi)
            ds._one_coin_accuracy(par.n_i, par.alpha, pi)
        else:
            ds._full_m_step(self.task, self.rows, self.post_t, par.alpha, par.beta, self.table, pi)
        ds._class_prior(self.post_t, par.alpha, q)

    def __call__(self, theta: np.ndarray) -> tuple[np.ndarray, float, float]:
        prior = self.par.tables(theta, self.table, self.log_q)
        ll = float(ds._e_step(self.indptr, self.rows, self.table, self.log_q, self.post_t)) + self.pin()
        out = np.empty_like(theta)
        self.m_step(out)
        return out, ll + prior, ll

    def pin(self) -> float:
        if not self.gold_tasks.size:
            return 0.0
        hit = self.post_t[self.gold_labels, self.gold_tasks]
        self.post_t[:, self.gold_tasks] = 0.0
        self.post_t[self.gold_labels, self.gold_tasks] = 1.0
        return float(np.log(np.maximum(hit, 1e-300)).sum())

    def start(self, post: np.ndarray) -> np.ndarray:
        theta = np.empty(self.par.n_pi + self.par.m)
        self.post_t[:] = post.T
        self.pin()
        self.m_step(theta)
        return theta

    def posteriors(self, theta: np.ndarray) -> tuple[np.ndarray, float]:
        self.par.tables(theta, self.table, self.log_q)
        ll = float(ds._e_step(self.indptr, self.rows, self.table, self.log_q, self.post_t)) + self.pin()
        return np.ascontiguousarray(self.post_t.T), ll


def _crowd(seed: int) -> tuple[LabelMatrix, np.ndarray | None, dict[str, object]]:
    """One member of the family: (encoded labels, gold codes or None, what was drawn)."""
    rng = np.random.default_rng(seed)
    m = 2 + seed % 7  # every specialised sweep (M = 2..6) and the generic one
    n_workers = int(rng.choice([1, 4, 30, 300]))
    n_tasks = int(rng.choice([20, 150, 900]))
    k_max = int(rng.choice([1, 3, 10]))
    dense = bool(rng.random() < 0.2)
    acc = rng.uniform(0.3, 0.95, n_workers)
    truth = rng.integers(0, m, n_tasks)
    activity = rng.pareto(1.0, n_workers) + 0.05
    task, worker = [], []
    for t in range(n_tasks):
        k = n_workers if dense else int(min(n_workers, rng.integers(1, k_max + 1)))
        task += [t] * k
        worker += list(rng.choice(n_workers, k, replace=False, p=activity / activity.sum()))
    task_a, worker_a = np.asarray(task), np.asarray(worker)
    right = rng.random(task_a.size) < acc[worker_a]
    label = np.where(right, truth[task_a], rng.integers(0, m, task_a.size))
    if rng.random() < 0.3:  # ties: a block of tasks copied with the labels of two workers swapped between classes
        ties = task_a < n_tasks // 4
        label[ties] = np.where(worker_a[ties] % 2 == 0, 0, 1)
    df = pd.DataFrame({"task": [f"t{t}" for t in task_a], "worker": [f"w{w}" for w in worker_a], "label": label})
    df["label"] = df["label"].astype(str)
    unused = bool(rng.random() < 0.3)  # declared classes nobody uses (their columns are all smoothing)
    classes = [str(c) for c in range(m + (2 if unused else 0))] if unused else None
    lm = encode_labels(df, classes=classes)
    gold = None
    if rng.random() < 0.3:
        gold = np.full(lm.n_tasks, -1, dtype=np.int64)
        pick = rng.random(lm.n_tasks) < 0.2
        gold[pick] = rng.integers(0, lm.n_classes, int(pick.sum()))
    drawn = {"m": lm.n_classes, "workers": lm.n_workers, "tasks": lm.n_tasks, "k_max": k_max, "dense": dense}
    return lm, gold, {**drawn, "gold": gold is not None, "unused": unused}


def _points(map_start: np.ndarray, par: object, rng: np.random.Generator) -> list[np.ndarray]:
    """θ₀ and two drawn feasible points (Dirichlet rows, drawn q; one-coin p in (0, 1))."""
    pts = [map_start]
    w, m, one_coin = par.w, par.m, par.one_coin  # type: ignore[attr-defined]
    for _ in range(2):
        pi = rng.uniform(0.02, 0.98, w) if one_coin else rng.dirichlet(np.ones(m) * 0.8, size=(w, m)).ravel()
        pts.append(np.concatenate([pi, rng.dirichlet(np.ones(m))]))
    return pts


#: 14 draws (every class count twice) in the default run, the other 26 in the slow tier
FAMILY = [s if s < 14 else pytest.param(s, marks=pytest.mark.slow) for s in range(40)]

pytestmark = pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")


@pytest.mark.parametrize("seed", FAMILY)
def test_fused_map_is_the_reference_map_bit_for_bit(seed: int) -> None:
    lm, gold, drawn = _crowd(seed)
    rng = np.random.default_rng(seed)
    # α = 0 leaves zero confusion entries after the start (log π = −∞, tasks whose every class is impossible: NaN)
    for one_coin, beta, alpha in ((False, 0.0, 0.01), (False, 1.0, 0.01), (True, 0.0, 0.01), (False, 0.0, 0.0)):
        where = f"seed {seed} {drawn} one_coin={one_coin} beta={beta} alpha={alpha}"
        new, ref = ds._EMMap(lm, one_coin, alpha, beta, gold), _ReferenceMap(lm, one_coin, alpha, beta, gold)
        post0 = ds._mv_init(lm)
        t_new, t_ref = new.start(post0), ref.start(post0)
        assert np.array_equal(t_new, t_ref), where
        for theta in _points(t_ref, ref.par, rng):
            f_new, obj_new, ll_new = new(theta.copy())
            f_ref, obj_ref, ll_ref = ref(theta.copy())
            assert np.array_equal(f_new, f_ref, equal_nan=True), where
            assert (obj_new == obj_ref or (np.isnan(obj_new) and np.isnan(obj_ref))) and ll_new == ll_ref, where
            p_new, e_new = new.posteriors(theta)
            p_ref, e_ref = ref.posteriors(theta)
            assert np.array_equal(p_new, p_ref, equal_nan=True) and e_new == e_ref, where


@pytest.mark.parametrize("seed", [s if s < 6 else pytest.param(s, marks=pytest.mark.slow) for s in range(12)])
def test_accelerated_fits_are_unchanged_bit_for_bit(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    lm, gold, drawn = _crowd(1000 + seed)
    fits = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for name in ("fused", "reference"):
            if name == "reference":
                monkeypatch.setattr(ds, "_EMMap", _ReferenceMap)
            fits[name] = (
                ds.dawid_skene(lm, prior=float(seed % 2), gold=gold, max_iter=400),
                ds.one_coin_dawid_skene(lm, gold=gold, max_iter=400),
            )
    for new, ref in zip(fits["fused"], fits["reference"], strict=True):
        where = f"seed {1000 + seed} {drawn} {new.method}"
        assert new.iterations == ref.iterations and new.converged == ref.converged, where
        for key in ("posteriors", "confusion", "class_prior", "log_likelihood"):
            assert np.array_equal(getattr(new, key), getattr(ref, key)), (where, key)
        pd.testing.assert_frame_equal(new.consensus, ref.consensus)
        pd.testing.assert_frame_equal(new.workers, ref.workers)


def test_the_reference_map_is_not_the_fused_one() -> None:
    """The comparison above compares two implementations: the fused map calls the sweep, the reference does not."""
    lm, gold, _ = _crowd(3)
    new = ds._EMMap(lm, False, 0.01, 1.0, gold)
    assert hasattr(new, "lp") and not hasattr(new, "table")
    assert hasattr(_ReferenceMap(lm, False, 0.01, 1.0, gold), "table")
