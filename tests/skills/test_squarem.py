"""SQUAREM-accelerated Dawid–Skene EM against the plain EM loop it accelerates (docs/methods/skills.md §7.2).

The plain compiled loop (``acceleration="none"``) is the reference. Over a generated family of crowds (2–6
classes, a handful to hundreds of workers, 1–12 labels per task, sparse and dense assignments, good workers,
spammers, adversarial workers who answer a fixed wrong class, class-biased confusions, two-label ties, one
worker, declared classes nobody uses, with and without the diagonal prior) both are run to a tight tolerance
(1e-10, up to 200,000 steps: plain EM needs up to ~164,000 on three-worker crowds, SQUAREM ~2,500) and must
reach the same fixed point:

- π, q: within 5e-6 (sup norm); posteriors within 5e-6; the same labels on every task whose top two
  posteriors are more than 1e-5 apart (a step of 1e-10 leaves a fit tol/(1 − ρ) from the fixed point,
  ~1e-6 when plain EM's rate ρ is 1 − 10⁻⁴);
- the objective EM increases (log-likelihood + the M-step's log prior) at least the reference's − 1e-9 · |it|
  (the only check where the reference does not converge: one worker under the one-coin model, whose
  maximisers form a ridge that EM creeps along).

At the default tolerance (1e-6) the accelerated fit must be about as close to the converged fixed point as
plain EM's (within 1.1× its distance, or 1e-5; measured: 2–10× closer, except one worker under the one-coin
model where both stop ~4e-3 away), and the unextrapolated first two steps are plain EM's bit for bit.
"""

from __future__ import annotations

import functools
import importlib
import warnings

import numpy as np
import pandas as pd
import pytest

from crowdflow.labels import encode_labels
from crowdflow.skills import fit_skills
from crowdflow.skills.dawid_skene import EMParameters, dawid_skene, one_coin_dawid_skene
from crowdflow.skills.squarem import squarem

ds_module = importlib.import_module("crowdflow.skills.dawid_skene")
TIGHT = {"tol": 1e-10, "max_iter": 200_000}


def _crowd(seed: int) -> tuple[pd.DataFrame, list[str] | None, dict[str, object]]:
    """One member of the family: (labels, declared classes or None, what was drawn)."""
    rng = np.random.default_rng(seed)
    m = int(rng.integers(2, 7))
    n_workers = int(rng.choice([1, 3, 12, 60, 250]))
    n_tasks = int(rng.choice([15, 80, 400, 1500]))
    k_max = int(rng.choice([1, 2, 4, 12]))
    dense = bool(rng.random() < 0.25)
    kinds = rng.choice(["good", "spammer", "adversarial", "biased"], size=n_workers, p=[0.55, 0.2, 0.1, 0.15])
    acc = rng.uniform(0.5, 0.98, n_workers)
    pi = np.empty((n_workers, m, m))
    for i in range(n_workers):
        if kinds[i] == "spammer":
            pi[i] = np.full((m, m), 1 / m)
        elif kinds[i] == "adversarial":  # always answers the next class
            pi[i] = np.roll(np.eye(m), 1, axis=1) * acc[i] + (1 - acc[i]) / m
        elif kinds[i] == "biased":
            pi[i] = rng.dirichlet(np.ones(m) * 0.7, size=m) * 0.5 + np.eye(m) * 0.5
        else:
            pi[i] = np.eye(m) * acc[i] + (1 - acc[i]) * (1 - np.eye(m)) / (m - 1)
    prior = rng.dirichlet(np.ones(m) * 2)
    truth = rng.choice(m, n_tasks, p=prior)
    activity = rng.pareto(1.1, n_workers) + 0.1
    rows = []
    for t in range(n_tasks):
        k = n_workers if dense else int(min(n_workers, rng.integers(1, k_max + 1)))
        for w in rng.choice(n_workers, k, replace=False, p=activity / activity.sum()):
            rows.append((f"t{t}", f"w{w}", int(rng.choice(m, p=pi[w, truth[t]]))))
    df = pd.DataFrame(rows, columns=["task", "worker", "label"])
    classes = None
    if rng.random() < 0.25:  # a declared class nobody uses
        classes = [str(c) for c in range(m + 1)]
    df["label"] = df["label"].astype(str)
    drawn = {"m": m, "workers": n_workers, "tasks": n_tasks, "k_max": k_max, "dense": dense}
    return df, classes, drawn


def _objective(res, smoothing: float, prior: float, one_coin: bool) -> float:
    """Observed-data log-likelihood + the log prior whose mode the M-step computes (constants dropped)."""
    q, pi = res.class_prior, res.confusion
    ll = float(res.log_likelihood[-1])
    if one_coin:
        p = pi[:, 0, 0]
        return ll + smoothing * float(np.log(p).sum() + np.log1p(-p).sum() + np.log(q).sum())
    m = q.size
    pseudo = smoothing + prior * np.eye(m)[None, :, :]
    return ll + float((pseudo * np.log(pi)).sum()) + smoothing * float(np.log(q).sum())


def _fits(lm, one_coin: bool, prior: float, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if one_coin:
            return (one_coin_dawid_skene(lm, **kw), one_coin_dawid_skene(lm, acceleration="none", **kw))
        return dawid_skene(lm, prior=prior, **kw), dawid_skene(lm, prior=prior, acceleration="none", **kw)


FAMILY = [*range(24), *(pytest.param(s, marks=pytest.mark.slow) for s in range(24, 80))]


@pytest.mark.parametrize("seed", FAMILY)
def test_accelerated_em_reaches_the_plain_em_fixed_point(seed: int) -> None:
    df, classes, drawn = _crowd(seed)
    lm = encode_labels(df, classes=classes)
    for one_coin in (False, True):
        prior = 0.0 if one_coin else float([0.0, 1.0][seed % 2])
        fast, ref = _fits(lm, one_coin, prior, **TIGHT)
        where = f"seed {seed} {drawn} one_coin={one_coin} prior={prior}"
        obj_fast, obj_ref = (_objective(r, 0.01, prior, one_coin) for r in (fast, ref))
        assert obj_fast >= obj_ref - 1e-9 * abs(obj_ref), where
        if not ref.converged:  # a ridge of maximisers (one worker, one coin: p and q trade off): EM creeps on it
            assert drawn["workers"] == 1 and fast.iterations <= ref.iterations, where
            continue
        assert fast.converged and fast.iterations <= ref.iterations, where
        np.testing.assert_allclose(fast.confusion, ref.confusion, rtol=0, atol=5e-6, err_msg=where)
        np.testing.assert_allclose(fast.class_prior, ref.class_prior, rtol=0, atol=5e-6, err_msg=where)
        np.testing.assert_allclose(fast.posteriors, ref.posteriors, rtol=0, atol=5e-6, err_msg=where)
        top2 = np.sort(ref.posteriors, axis=1)[:, -2:] if lm.n_classes > 1 else None
        clear = (top2[:, 1] - top2[:, 0]) > 1e-5
        assert (fast.consensus["label"][clear] == ref.consensus["label"][clear]).all(), where


@pytest.mark.parametrize("seed", range(8))
def test_at_the_default_tolerance_no_farther_from_the_fixed_point_than_plain_em(seed: int) -> None:
    df, classes, drawn = _crowd(100 + seed)
    lm = encode_labels(df, classes=classes)
    for one_coin in (False, True):
        _, tight = _fits(lm, one_coin, 1.0, **TIGHT)
        fast, plain = _fits(lm, one_coin, 1.0, max_iter=200_000)
        if not tight.converged:  # the one-worker ridge (see the module docstring)
            assert drawn["workers"] == 1
            continue
        assert fast.converged and plain.converged
        d_fast = np.abs(fast.confusion - tight.confusion).max()
        d_plain = np.abs(plain.confusion - tight.confusion).max()
        assert d_fast <= max(1.1 * d_plain, 1e-5)  # one worker, one coin: 4.0e-3 vs 3.7e-3 (531 vs 14,389 steps)
        assert fast.iterations <= plain.iterations


@pytest.mark.parametrize("one_coin", [False, True])
def test_the_first_two_steps_are_plain_em_bit_for_bit(one_coin: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Extrapolation starts after two EM steps (its first step bound is 1): until then the accelerated fit runs
    the plain loop's kernels in the plain loop's order, bit for bit with libm's exp (``exact=True``), within a few
    ulps with the default vectorised one (docs/methods/skills.md §7.2)."""
    df, classes, _ = _crowd(3)
    lm = encode_labels(df, classes=classes)
    for k in (1, 2):
        fast, ref = _fits(lm, one_coin, 1.0, max_iter=k)
        assert fast.iterations == ref.iterations == k and not fast.converged
        for a, b in ((fast.posteriors, ref.posteriors), (fast.confusion, ref.confusion)):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(fast.log_likelihood, ref.log_likelihood, rtol=1e-13)
    monkeypatch.setattr(ds_module, "_EMMap", functools.partial(ds_module._EMMap, exact=True))
    for k in (1, 2):
        fast, ref = _fits(lm, one_coin, 1.0, max_iter=k)
        for a, b in ((fast.posteriors, ref.posteriors), (fast.confusion, ref.confusion)):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(fast.log_likelihood, ref.log_likelihood)


def test_the_chain_never_lowers_the_objective_and_passes_are_capped() -> None:
    """The trace holds the E-step values of the kept points (the log posterior's chain, here without a prior:
    the log-likelihood) and never falls; ``max_iter`` caps the EM passes, extrapolations' included."""
    df, classes, _ = _crowd(7)
    lm = encode_labels(df, classes=classes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = dawid_skene(lm, smoothing=0.0, prior=0.0, tol=1e-12, max_iter=300)
        for cap in (3, 4, 7, 20):
            capped = dawid_skene(lm, tol=1e-12, max_iter=cap)
            assert capped.iterations == cap and not capped.converged
    ll = res.log_likelihood
    assert np.all(np.diff(ll) >= -1e-10 * np.abs(ll).max())


def test_squarem_driver_on_a_linear_map_and_its_box() -> None:
    """On a linear contraction F(θ) = A θ + b (objective −‖θ − θ*‖²) SQUAREM reaches θ* in far fewer passes
    than the plain iteration; a box that excludes the extrapolated points falls back to plain steps and still
    converges; a map that raises the objective only at θ* is never left."""
    rng = np.random.default_rng(0)
    d = 30
    a = np.diag(np.linspace(0.5, 0.995, d))
    star = rng.uniform(0.2, 0.8, d)

    def step(theta: np.ndarray) -> tuple[np.ndarray, float, float]:
        val = -float(((theta - star) ** 2).sum())
        return a @ (theta - star) + star, val, val

    run = squarem(step, np.zeros(d), 1e-10, 10_000)
    assert run.converged and np.abs(run.theta - star).max() < 1e-7
    assert run.evaluations < 300  # plain: log(1e-10)/log(0.995) ≈ 4600
    boxed = squarem(step, np.zeros(d), 1e-10, 100_000, lower=0.0, upper=0.5)  # θ* is outside: only plain steps fit
    assert boxed.converged and np.abs(boxed.theta - star).max() < 1e-7 and boxed.extrapolations == 0
    assert squarem(step, star.copy(), 1e-10, 10).evaluations == 1


def test_em_parameters_round_trip() -> None:
    par = EMParameters(3, 4, False, 0.01, 1.0, np.array([5.0, 2.0, 7.0]))
    rng = np.random.default_rng(1)
    pi = rng.dirichlet(np.ones(4), size=(3, 4))
    q = rng.dirichlet(np.ones(4))
    theta = np.concatenate([pi.ravel(), q])
    got_pi, got_q = par.split(theta)
    np.testing.assert_array_equal(got_pi, pi)
    np.testing.assert_array_equal(got_q, q)
    table, log_q = np.empty((4, 12)), np.empty(4)
    prior = par.tables(theta, table, log_q)
    pseudo = 0.01 + np.eye(4)[None]
    assert prior == pytest.approx(float((pseudo * np.log(pi)).sum()) + 0.01 * float(np.log(q).sum()), rel=1e-12)
    lower, upper = par.bounds()  # the full model's box is [0, 1] for every θ: two scalars, no W·M² arrays
    assert np.shape(lower) == () and np.shape(upper) == () and lower == 0 and upper == 1
    one = EMParameters(3, 4, True, 0.01, 0.0, np.array([5.0, 2.0, 7.0]))
    lo, hi = one.bounds()  # one-coin: p in [eps, 1 - eps], q in [0, 1]
    assert np.shape(lo) == (3 + 4,) and (lo[:3] > 0).all() and (hi[:3] < 1).all()
    assert (lo[3:] == 0).all() and (hi[3:] == 1).all()


def test_fit_skills_reports_the_accelerated_fit() -> None:
    df, classes, _ = _crowd(5)
    lm = encode_labels(df, classes=classes)
    res = fit_skills(df, classes=classes, method="ds", tie_break="smallest", witness=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        direct = dawid_skene(lm, tie_break="smallest")
    assert res.metadata["iterations"] == direct.iterations
    np.testing.assert_array_equal(res.consensus["confidence"].to_numpy(), direct.consensus["confidence"].to_numpy())
    with pytest.raises(ValueError, match="acceleration"):
        dawid_skene(lm, acceleration="anderson")  # type: ignore[arg-type]
