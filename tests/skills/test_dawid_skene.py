"""Tests of the Dawid–Skene EM baselines (docs/methods/skills.md §7.2)."""

from __future__ import annotations

import hashlib
import itertools
import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crowdflow.labels import LabelMatrix, encode_labels
from crowdflow.skills import (
    SkillsOptions,
    fit_skills,
    prediction_error,
    prepare_labels,
    vote_weights,
    weighted_consensus,
)
from crowdflow.skills.dawid_skene import dawid_skene, one_coin_dawid_skene
from crowdflow.synth import skills as synth

DATA = Path(__file__).resolve().parents[2] / "crowdflow" / "data"
CLASSIC = Path(__file__).resolve().parent / "data" / "dawid_skene_classic.json"


def _lm(df: pd.DataFrame, classes=None):
    return prepare_labels(df, classes=classes)[0]


def _reference_em_step(lm, post, smoothing, prior=0.0):
    """Loop-based reference of one M-step + E-step of the full model (obviously correct, slow); ``prior``
    adds β virtual correct answers to every row of every worker (docs/methods/skills.md §7.3)."""
    m, w, t = lm.n_classes, lm.n_workers, lm.n_tasks
    counts = np.full((w, m, m), smoothing)
    for i in range(w):
        for true in range(m):
            counts[i, true, true] += prior
    for i, tk, y in zip(lm.worker_idx, lm.task_idx, lm.class_idx, strict=True):
        for true in range(m):
            counts[i, true, y] += post[tk, true]
    pi = counts / counts.sum(axis=2, keepdims=True)
    q = (post.sum(axis=0) + smoothing) / (t + m * smoothing)
    logp = np.tile(np.log(q), (t, 1))
    for i, tk, y in zip(lm.worker_idx, lm.task_idx, lm.class_idx, strict=True):
        for true in range(m):
            logp[tk, true] += np.log(pi[i, true, y])
    new = np.exp(logp - logp.max(axis=1, keepdims=True))
    return pi, q, new / new.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("prior", [0.0, 1.0, 2.5])
def test_full_ds_matches_loop_reference_one_iteration(prior):
    data = synth.one_coin_labels(np.linspace(0.0, 0.8, 6), *synth.random_assignment(6, 40, 3, seed=1), 3, seed=1)
    lm = _lm(data.labels, data.classes)
    counts = lm.task_class_counts().toarray()
    post0 = counts / counts.sum(axis=1, keepdims=True)
    _pi1, _q1, post1 = _reference_em_step(lm, post0, 0.01, prior)
    pi2, q2, _ = _reference_em_step(lm, post1, 0.01, prior)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = dawid_skene(lm, max_iter=1, smoothing=0.01, prior=prior)
    # after one iteration: params are the M-step on the first E-step posteriors
    np.testing.assert_allclose(res.confusion, pi2, atol=1e-12)
    np.testing.assert_allclose(res.class_prior, q2, atol=1e-12)


def test_one_coin_matches_brute_force_posterior():
    # tiny instance: posterior of each task by enumerating the class, with the returned p and q
    data = synth.one_coin_labels(np.array([0.8, 0.5, 0.3, 0.6]), *synth.clique_assignment(4, 30), 3, seed=2)
    lm = _lm(data.labels, data.classes)
    res = one_coin_dawid_skene(lm)
    p = res.workers["accuracy"].to_numpy()
    q = res.class_prior
    m = lm.n_classes
    for t in range(lm.n_tasks):
        on = lm.task_idx == t
        like = np.array(
            [
                q[c]
                * np.prod(
                    [
                        p[i] if y == c else (1 - p[i]) / (m - 1)
                        for i, y in zip(lm.worker_idx[on], lm.class_idx[on], strict=True)
                    ]
                )
                for c in range(m)
            ]
        )
        np.testing.assert_allclose(res.posteriors[t], like / like.sum(), atol=1e-10)
    # the one-coin vote weight is the MAP weight of docs/methods/skills.md §2.7
    np.testing.assert_allclose(res.workers["vote_weight"], vote_weights(res.workers["skill"].to_numpy(), m), atol=1e-6)


@pytest.mark.parametrize("m", [2, 4])
def test_one_coin_recovers_skills(m):
    rng = np.random.default_rng(3)
    p = rng.uniform(1 / m + 0.05, 0.95, 25)
    s = (m * p - 1) / (m - 1)
    data = synth.one_coin_labels(s, *synth.random_assignment(25, 3000, 5, seed=3), m, seed=3)
    lm = _lm(data.labels, data.classes)
    res = one_coin_dawid_skene(lm)
    assert res.converged
    assert np.sqrt(np.mean((res.workers["skill"].to_numpy() - s) ** 2)) <= 0.05
    oracle = weighted_consensus(lm, vote_weights(s, m), tie_break="random", seed=0)
    err = prediction_error(res.consensus, data.truth)
    assert err <= prediction_error(oracle.consensus, data.truth) + 0.01


def test_full_ds_recovers_asymmetric_confusion():
    # two classes, workers biased towards class 1 (not one-coin): full DS must find the asymmetry
    rng = np.random.default_rng(4)
    n_w, n_t = 12, 4000
    pi = np.empty((n_w, 2, 2))
    pi[:, 0, 0] = rng.uniform(0.55, 0.75, n_w)  # P(answer 0 | truth 0)
    pi[:, 1, 1] = rng.uniform(0.85, 0.97, n_w)
    pi[:, 0, 1] = 1 - pi[:, 0, 0]
    pi[:, 1, 0] = 1 - pi[:, 1, 1]
    truth = (rng.random(n_t) < 0.3).astype(int)
    wi, ti = synth.random_assignment(n_w, n_t, 5, seed=4)
    ans = (rng.random(wi.size) < pi[wi, truth[ti], 1]).astype(int)
    df = pd.DataFrame({"task": ti.astype(str), "worker": [f"w{i:02d}" for i in wi], "label": ans.astype(str)})
    lm = _lm(df)
    res = dawid_skene(lm)
    assert res.converged
    assert np.max(np.abs(res.confusion - pi)) <= 0.06
    np.testing.assert_allclose(res.class_prior, [0.7, 0.3], atol=0.03)
    gold = pd.DataFrame({"task": np.arange(n_t).astype(str), "label": truth.astype(str)})
    one = one_coin_dawid_skene(lm)
    assert prediction_error(res.consensus, gold) <= prediction_error(one.consensus, gold)


def test_em_likelihood_monotone_without_smoothing():
    data = synth.one_coin_labels(np.linspace(0.1, 0.8, 10), *synth.random_assignment(10, 500, 4, seed=5), 3, seed=5)
    lm = _lm(data.labels, data.classes)
    for fn, extra in ((dawid_skene, {"prior": 0.0}), (one_coin_dawid_skene, {})):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the cap may be hit at tol 1e-9
            res = fn(lm, smoothing=0.0, tol=1e-9, max_iter=200, **extra)
        ll = res.log_likelihood
        assert np.all(np.diff(ll) >= -1e-8 * np.abs(ll).max())


def _log_posterior(res, smoothing, prior):
    """Observed-data log-likelihood plus the log prior whose mode the M-steps compute: α + β 1{m = l}
    pseudo-answers on each confusion row, α on each class of q (additive constants dropped)."""
    m = res.class_prior.size
    pseudo = smoothing + prior * np.eye(m)[None, :, :]
    return (
        res.log_likelihood[-1]
        + float((pseudo * np.log(res.confusion)).sum())
        + smoothing * float(np.log(res.class_prior).sum())
    )


@pytest.mark.parametrize("prior", [0.0, 1.0, 4.0])
def test_em_with_the_prior_increases_the_log_posterior(prior):
    """EM with pseudo-counts is EM for the posterior mode: the observed-data likelihood alone may fall
    when the prior pulls, but likelihood + log prior never does (a named objective, iterate by iterate:
    the k-th iterate is the fit with max_iter=k, EM being deterministic)."""
    data = synth.crowd_labels(synth.CrowdConfig(3, 300, 3, 60, "confusion", 0.2, 0.1, "skewed", "zipf", 4))
    lm = _lm(data.labels, data.classes)
    values = []
    for k in range(1, 30):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            values.append(_log_posterior(dawid_skene(lm, max_iter=k, smoothing=0.01, prior=prior), 0.01, prior))
    assert np.all(np.diff(values) >= -1e-9 * np.abs(values).max())


def test_prior_pulls_workers_with_few_labels_and_leaves_busy_workers():
    """β = 1 adds one virtual correct answer per true class: a worker with a handful of labels moves a lot
    towards a diagonal confusion matrix (measured: diagonal +0.87 on average for ≤ 5 labels), a worker
    with hundreds barely (every entry within 0.012 for ≥ 500 labels, about one label in a row of ~170);
    rows stay stochastic."""
    data = synth.crowd_labels(synth.CrowdConfig(3, 4000, 4, 400, "confusion", 0.0, 0.0, "uniform", "zipf", 9))
    lm = _lm(data.labels, data.classes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        classic, with_prior = dawid_skene(lm, prior=0.0), dawid_skene(lm, prior=1.0)
    np.testing.assert_allclose(with_prior.confusion.sum(axis=2), 1.0, atol=1e-12)
    n_i = lm.labels_per_worker()
    diag = np.einsum("ill->i", with_prior.confusion) - np.einsum("ill->i", classic.confusion)
    move = np.abs(with_prior.confusion - classic.confusion).max(axis=(1, 2))
    assert diag[n_i <= 5].mean() > 0.3
    assert move[n_i >= 500].max() < 0.02
    with pytest.raises(ValueError, match="prior"):
        dawid_skene(lm, prior=-1.0)
    with pytest.raises(ValueError, match="prior"):
        dawid_skene(lm, prior=float("nan"))


def _golden_cases() -> dict[str, tuple[pd.DataFrame, list[str] | None]]:
    """The bundled Snow sets and two synthetic sets (four classes; two observed of three declared)."""
    cases = {
        name: (pd.read_csv(DATA / name / "labels.csv", dtype=str), None)
        for name in ("snow_rte", "snow_temp", "snow_wsd")
    }
    rng = np.random.default_rng(20)
    s = np.where(np.arange(40) < 10, rng.uniform(-0.05, 0.05, 40), rng.uniform(0.2, 0.9, 40))
    data = synth.one_coin_labels(s, *synth.random_assignment(40, 600, 3, seed=20), 4, seed=20)
    cases["synth_m4"] = (data.labels, data.classes)
    data = synth.one_coin_labels(np.linspace(0.1, 0.9, 9), *synth.random_assignment(9, 150, 3, seed=21), 2, seed=21)
    cases["synth_m2_declared_m3"] = (data.labels, ["0", "1", "2"])
    return cases


def _digest(res) -> dict[str, object]:
    h = hashlib.sha256()
    for a in (res.posteriors, res.confusion, res.class_prior, res.log_likelihood):
        h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    return {
        "sha256": h.hexdigest(),
        "iterations": int(res.iterations),
        "final_log_likelihood": float(res.log_likelihood[-1]).hex(),
    }


def test_prior_zero_is_classic_dawid_skene_bit_for_bit():
    """β = 0 with plain EM (the reference loop, ``acceleration="none"``) runs the floating-point operations of the
    EM before the prior existed: posteriors,
    confusions, class prior and likelihood trace hash to the digests that code produced
    (tests/skills/data/dawid_skene_classic.json); the one-coin model is untouched. A digest that differs
    only in the last bits fails too: that is the point (``fit_skills(method="ds", ds_prior=0)`` is the
    fit the Crowd-Kit comparisons of docs/methods/skills.md §9.1 call classic DS)."""
    golden = json.loads(CLASSIC.read_text())
    for name, (labels, classes) in _golden_cases().items():
        lm = _lm(labels, classes)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            classic = dawid_skene(lm, prior=0.0, acceleration="none")
            one = one_coin_dawid_skene(lm, acceleration="none")
            accelerated = dawid_skene(lm, prior=0.0, max_iter=SkillsOptions().ds_max_iter)  # the pipeline's cap
        assert _digest(classic) == golden["ds"][name], name
        assert _digest(one) == golden["onecoin_ds"][name], name
        # the pipeline path passes the option through unchanged (to the default, accelerated, EM)
        res = fit_skills(labels, classes=classes, method="ds", ds_prior=0.0, spectral=False, witness=False)
        np.testing.assert_array_equal(
            res.consensus["confidence"].to_numpy(), accelerated.consensus["confidence"].to_numpy()
        )
        assert res.metadata["iterations"] == accelerated.iterations


def test_not_converged_warns_and_flags():
    data = synth.one_coin_labels(np.linspace(0.1, 0.8, 10), *synth.random_assignment(10, 300, 4, seed=6), 2, seed=6)
    lm = _lm(data.labels, data.classes)
    with pytest.warns(RuntimeWarning, match="without converging"):
        res = dawid_skene(lm, max_iter=1)
    assert not res.converged and res.iterations == 1
    with pytest.raises(ValueError):
        one_coin_dawid_skene(lm, tol=0)


def test_label_permutation_and_row_order_invariance():
    data = synth.one_coin_labels(np.linspace(0.2, 0.9, 8), *synth.random_assignment(8, 300, 3, seed=7), 3, seed=7)
    base = one_coin_dawid_skene(_lm(data.labels, data.classes))
    shuffled = one_coin_dawid_skene(_lm(data.labels.sample(frac=1, random_state=1), data.classes))
    pd.testing.assert_frame_equal(base.consensus, shuffled.consensus)
    pd.testing.assert_frame_equal(base.workers, shuffled.workers)
    for perm in itertools.islice(itertools.permutations("abc"), 1, 3):
        mapping = dict(zip(data.classes, perm, strict=True))
        res = one_coin_dawid_skene(_lm(data.labels.assign(label=data.labels["label"].map(mapping))))
        np.testing.assert_allclose(res.workers["accuracy"], base.workers["accuracy"], atol=1e-8)


@pytest.mark.parametrize(
    ("name", "max_err_one", "max_err_full"), [("snow_rte", 0.085, 0.08), ("snow_temp", 0.07, 0.07)]
)
def test_real_data_snow(name, max_err_one, max_err_full):
    if not (DATA / name / "labels.csv").exists():
        pytest.skip(f"{DATA / name} not available")
    labels = pd.read_csv(DATA / name / "labels.csv", dtype=str)
    truth = pd.read_csv(DATA / name / "truth.csv", dtype=str)
    lm = _lm(labels)
    one, full = one_coin_dawid_skene(lm), dawid_skene(lm)
    assert one.converged and full.converged
    assert prediction_error(one.consensus, truth) <= max_err_one
    assert prediction_error(full.consensus, truth) <= max_err_full


def test_toy_example_runs_with_declared_classes():
    df = pd.DataFrame({"task": ["a", "a", "b", "b"], "worker": ["x", "y", "x", "y"], "label": ["1", "1", "1", "1"]})
    res = dawid_skene(encode_labels(df, classes=["0", "1"]))
    assert (res.consensus["label"] == "1").all()
    assert res.posteriors.shape == (2, 2)


def _observed_log_likelihood(lm, confusion, prior):
    """Σ_t log Σ_l q_l Π_{i labels t} π_i[l, Y_it], one task at a time (slow, obviously correct)."""
    total = 0.0
    for t in range(lm.n_tasks):
        on = lm.task_idx == t
        joint = prior.copy()
        for i, y in zip(lm.worker_idx[on], lm.class_idx[on], strict=True):
            joint = joint * confusion[i, :, y]
        total += np.log(joint.sum())
    return total


@pytest.mark.parametrize("m", [2, 3, 5])
@pytest.mark.parametrize("fn", [dawid_skene, one_coin_dawid_skene])
def test_trace_ends_at_the_observed_log_likelihood_and_posteriors_are_bayes(fn, m):
    # the compiled E-step has a binary path and a general one: both against the definition
    data = synth.one_coin_labels(np.linspace(0.1, 0.9, 7), *synth.random_assignment(7, 120, 4, seed=m), m, seed=m)
    lm = _lm(data.labels, data.classes)
    res = fn(lm)
    assert res.log_likelihood[-1] == pytest.approx(
        _observed_log_likelihood(lm, res.confusion, res.class_prior), rel=1e-12
    )
    for t in range(lm.n_tasks):
        on = lm.task_idx == t
        joint = res.class_prior.copy()
        for i, y in zip(lm.worker_idx[on], lm.class_idx[on], strict=True):
            joint = joint * res.confusion[i, :, y]
        np.testing.assert_allclose(res.posteriors[t], joint / joint.sum(), rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("fn", [dawid_skene, one_coin_dawid_skene])
def test_entries_in_any_order_give_the_same_fit(fn):
    # the kernels group the labels by (task, worker) (graphs.labels_by_task); a matrix whose entries
    # are in another order is regrouped, so every sum runs in the same order
    data = synth.one_coin_labels(np.linspace(0.2, 0.9, 9), *synth.random_assignment(9, 200, 3, seed=8), 2, seed=8)
    lm = _lm(data.labels, data.classes)
    perm = np.random.default_rng(8).permutation(lm.n_labels)
    shuffled = LabelMatrix(
        workers=lm.workers,
        tasks=lm.tasks,
        classes=lm.classes,
        worker_idx=lm.worker_idx[perm],
        task_idx=lm.task_idx[perm],
        class_idx=lm.class_idx[perm],
    )
    a, b = fn(lm), fn(shuffled)
    assert a.iterations == b.iterations
    np.testing.assert_allclose(b.posteriors, a.posteriors, atol=1e-12)
    np.testing.assert_allclose(b.confusion, a.confusion, atol=1e-12)
    pd.testing.assert_frame_equal(a.consensus, b.consensus, check_exact=False, atol=1e-12)


@pytest.mark.parametrize("classes", [None, ["0", "1", "2"]])
def test_impossible_labels_give_zero_posterior_not_nan(classes):
    # without smoothing, worker y's π[1, 0] is 0, so tasks where y answers 0 have a −inf log joint
    # for class 1 and posterior exactly 0 there (binary path); a declared class nobody uses has
    # q = 0, a −inf column (general path); nothing may be NaN
    df = pd.DataFrame(
        {
            "task": ["a", "a", "b", "b", "c", "c"],
            "worker": ["x", "y", "x", "y", "x", "y"],
            "label": ["0", "0", "0", "1", "0", "0"],
        }
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = dawid_skene(encode_labels(df, classes=classes), smoothing=0.0, max_iter=5)
    assert np.isfinite(res.posteriors).all()
    np.testing.assert_allclose(res.posteriors.sum(axis=1), 1.0)
    assert res.posteriors[0, 1] == 0.0 and res.posteriors[2, 1] == 0.0
    if classes is not None:
        assert (res.posteriors[:, 2] == 0.0).all()
