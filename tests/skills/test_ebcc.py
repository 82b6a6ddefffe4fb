"""EBCC (Li, Rubinstein & Cohn, ICML 2019) by mean-field VI: crowdflow/skills/ebcc.py, docs/methods/skills.md §7.5.

Claims checked on families of crowds drawn from EBCC's own generative model (subtypes on which workers err
together) and from Dawid–Skene's (crowdflow.synth.skills.crowd_family): labels at least as good as majority
vote and near Dawid–Skene; M = 1 with flat priors is a Bayesian Dawid–Skene; the ELBO never decreases (exact
CAVI); one vectorised sweep equals a loop-based reference; seeded determinism; degenerate inputs; the pipeline.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.special import digamma

import crowdflow as cf
from crowdflow.skills import SkillsOptions, fit_skills, prediction_error, prepare_labels
from crowdflow.skills.dawid_skene import dawid_skene
from crowdflow.skills.ebcc import _incidence, _run, ebcc
from crowdflow.skills.majority import majority_vote
from crowdflow.synth import skills as synth

DATA = Path(__file__).resolve().parents[2] / "crowdflow" / "data"


def ebcc_crowd(k: int, n_sub: int, t: int, w: int, r: int, hard: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Labels drawn from EBCC's model: class z ~ Cat(τ), subtype g ~ Cat(π_z); worker j answers from v_{j z g}.

    Subtype 0 of each class is easy (each worker right with probability U[0.65, 0.95]); each other subtype is
    "hard" with probability ``hard``: workers are right with probability U[0.55, 0.75] and otherwise all give
    the same wrong label (correlated errors)."""
    rng = np.random.default_rng(seed)
    tau = rng.dirichlet(np.full(k, 5.0))
    pi = rng.dirichlet(np.full(n_sub, 2.0), size=k)
    v = np.empty((w, k, n_sub, k))
    for c in range(k):
        for m in range(n_sub):
            acc = rng.uniform(0.65, 0.95, size=w)
            if m > 0 and rng.random() < hard:
                acc = rng.uniform(0.55, 0.75, size=w)
                wrong = (c + 1 + rng.integers(k - 1)) % k
                rest = np.zeros(k)
                rest[wrong] = 1.0
            else:
                rest = np.where(np.arange(k) == c, 0.0, 1.0 / (k - 1))
            v[:, c, m, :] = (1 - acc)[:, None] * rest[None, :]
            v[:, c, m, c] = acc
    z = rng.choice(k, size=t, p=tau)
    g = (rng.random(t)[:, None] > np.cumsum(pi[z], axis=1)).sum(axis=1)
    task = np.repeat(np.arange(t), r)
    worker = np.concatenate([rng.choice(w, size=r, replace=False) for _ in range(t)])
    p = v[worker, z[task], g[task]]
    label = (rng.random(task.size)[:, None] > np.cumsum(p, axis=1)).sum(axis=1).clip(0, k - 1)
    labels = pd.DataFrame({"task": task.astype(str), "worker": worker.astype(str), "label": label.astype(str)})
    truth = pd.DataFrame({"task": np.arange(t).astype(str), "label": z.astype(str)})
    return labels, truth


EBCC_FAMILY = [
    (2, 3, 400, 30, 5, 0.5, 1),
    (3, 2, 300, 20, 7, 0.7, 2),
    (2, 4, 600, 60, 3, 0.5, 3),
    (4, 3, 300, 15, 9, 0.6, 4),
    (2, 2, 200, 10, 5, 1.0, 5),
]


def _errors(labels: pd.DataFrame, truth: pd.DataFrame, classes: list[str] | None = None) -> dict[str, float]:
    lm = prepare_labels(labels, classes)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out = {
            "ebcc": prediction_error(ebcc(lm, restarts=3, seed=0).consensus, truth),
            "ds": prediction_error(dawid_skene(lm, prior=1.0).consensus, truth),
            "mv": prediction_error(majority_vote(lm, "random", 0).consensus, truth),
        }
    return out


@pytest.fixture(scope="module")
def family_errors() -> pd.DataFrame:
    rows = [{"crowd": f"ebcc{c}", **_errors(*ebcc_crowd(*c))} for c in EBCC_FAMILY]
    for config in synth.crowd_family(5, seed=11, max_labels=6000, corners=False):
        data = synth.crowd_labels(config)
        rows.append({"crowd": config.name, **_errors(data.labels, data.truth, data.classes)})
    return pd.DataFrame(rows)


def test_ebcc_at_least_mv_and_near_ds_on_both_families(family_errors: pd.DataFrame) -> None:
    """Measured (seeded): EBCC is at most 0.020 worse than MV on one crowd (ebcc(2, 4, 600, 60, 3): 0.177 vs
    0.157, DS 0.193: 3 labels per task and correlated errors) and better or equal on the others; at most 0.013
    worse than DS on any crowd; on its own model's crowds 0.05 better than DS on average."""
    f = family_errors
    assert float((f["ebcc"] - f["mv"]).max()) <= 0.025, f.to_string()
    assert f["ebcc"].mean() <= f["mv"].mean(), f.to_string()
    assert float((f["ebcc"] - f["ds"]).max()) <= 0.03, f.to_string()
    own = f["crowd"].str.startswith("ebcc")
    assert f.loc[own, "ebcc"].mean() <= f.loc[own, "ds"].mean() - 0.02, f.to_string()


def test_one_subtype_flat_priors_is_bayesian_dawid_skene() -> None:
    worst = 1.0
    # crowds without adversaries and with >= 3 labels per task: with adversaries, or 2 labels per task and flat
    # priors (no pull to the diagonal), the two fits settle on different, label-permuted optima (measured: on
    # M4-T1500-r2-W800 #1003 the flat Bayesian fit errs on 0.75 of tasks, DS on 0.35; the default a_v = 4 is why)
    crowds = [
        c
        for c in synth.crowd_family(12, seed=3, max_labels=5000, corners=False)
        if c.adversaries == 0 and c.per_task >= 3
    ]
    assert len(crowds) >= 3
    for config in crowds:
        data = synth.crowd_labels(config)
        lm = prepare_labels(data.labels, data.classes)[0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            b = ebcc(lm, n_subtypes=1, class_prior=1.0, diag_prior=1.0, off_diag_prior=1.0, restarts=1)
            d = dawid_skene(lm, smoothing=1.0, max_iter=500)
        same = float((b.consensus["label"].to_numpy() == d.consensus["label"].to_numpy()).mean())
        worst = min(worst, same)
    assert worst >= 0.96  # measured 0.9664


def test_elbo_never_decreases_over_a_family() -> None:
    worst = np.inf
    for c in EBCC_FAMILY:
        lm = prepare_labels(ebcc_crowd(*c)[0], None)[0]
        for m in (1, 4):
            res = ebcc(lm, n_subtypes=m, restarts=2, seed=c[-1])
            assert res.elbo.size >= 2
            worst = min(worst, float((np.diff(res.elbo) / np.abs(res.elbo[1:])).min()))
    assert worst >= -1e-12


def _reference_sweep(lm, phi, alpha, a_pi, beta):  # loops over labels: obviously correct, slow
    t, k, m = phi.shape
    nu = alpha + phi.sum(axis=(0, 2))
    eta = a_pi / m + phi.sum(axis=0)
    mu = np.tile(beta[None, :, None, :], (lm.n_workers, 1, m, 1)).astype(float)
    for tk, j, y in zip(lm.task_idx, lm.worker_idx, lm.class_idx, strict=True):
        mu[j, :, :, y] += phi[tk]
    e_v = digamma(mu) - digamma(mu.sum(axis=-1, keepdims=True))
    logit = np.zeros((t, k, m)) + (digamma(nu) - digamma(nu.sum()))[None, :, None]
    logit += (digamma(eta) - digamma(eta.sum(axis=1, keepdims=True)))[None]
    for tk, j, y in zip(lm.task_idx, lm.worker_idx, lm.class_idx, strict=True):
        logit[tk] += e_v[j, :, :, y]
    new = np.exp(logit - logit.max(axis=(1, 2), keepdims=True))
    return new / new.sum(axis=(1, 2), keepdims=True)


def test_one_sweep_matches_loop_reference() -> None:
    labels, _ = ebcc_crowd(3, 2, 40, 8, 4, 0.5, 9)
    lm = prepare_labels(labels, None)[0]
    rng = np.random.default_rng(0)
    phi = rng.dirichlet(np.ones(6), size=lm.n_tasks).reshape(lm.n_tasks, 3, 2)
    alpha, beta = np.array([2.0, 3.0, 1.5]), np.full((3, 3), 1.0) + 3 * np.eye(3)
    s = _incidence(lm)
    run = _run(s, s.T.tocsr(), phi, alpha, 0.1, beta, lm.n_workers, 1e-6, 1)
    np.testing.assert_allclose(run.phi, _reference_sweep(lm, phi, alpha, 0.1, beta), rtol=1e-10, atol=1e-12)


def test_seed_determinism_and_restart_choice() -> None:
    labels, _ = ebcc_crowd(2, 3, 300, 20, 5, 0.5, 1)
    lm = prepare_labels(labels, None)[0]
    a, b = ebcc(lm, restarts=3, seed=4), ebcc(lm, restarts=3, seed=4)
    pd.testing.assert_frame_equal(a.consensus, b.consensus)
    np.testing.assert_array_equal(a.elbo, b.elbo)
    np.testing.assert_array_equal(a.confusion, b.confusion)
    assert a.elbo[-1] == a.restart_elbos.max()
    c = ebcc(lm, restarts=3, seed=5)
    assert not np.array_equal(a.restart_elbos, c.restart_elbos)  # the seed reaches the initialisation


def test_iteration_cap_warns_and_flags() -> None:
    labels, _ = ebcc_crowd(3, 3, 300, 20, 5, 0.5, 2)
    with pytest.warns(RuntimeWarning, match="without converging"):
        res = fit_skills(labels, method="ebcc", ebcc_max_iter=2, ebcc_restarts=1)
    assert res.metadata["converged"] is False and res.metadata["fit_status"] == "not_converged"
    assert res.loss_trace.size == 2


def test_degenerate_inputs() -> None:
    one_worker = pd.DataFrame({"task": list("abcd"), "worker": ["w"] * 4, "label": ["x", "y", "x", "y"]})
    res = fit_skills(one_worker, method="ebcc")
    assert res.consensus["label"].tolist() == ["x", "y", "x", "y"]
    agree = pd.DataFrame({"task": list("aabbcc"), "worker": list("uvuvuv"), "label": list("ppqqpp")})
    res = fit_skills(agree, method="ebcc")
    assert res.consensus["label"].tolist() == ["p", "q", "p"] and (res.consensus["confidence"] > 0.9).all()
    single = pd.DataFrame({"task": list("aabb"), "worker": list("uvuv"), "label": ["p"] * 4})
    with pytest.raises(ValueError, match="at least 2 classes"):
        fit_skills(single, method="ebcc")
    declared = fit_skills(single, method="ebcc", classes=["p", "q"])
    assert declared.consensus["label"].tolist() == ["p", "p"]
    assert np.isfinite(declared.skills["accuracy"]).all()


@pytest.mark.parametrize(
    ("field", "value"),
    [("ebcc_subtypes", 0), ("ebcc_restarts", 0), ("ebcc_diag_prior", 0.0), ("ebcc_tol", 1.0), ("ebcc_max_iter", 0)],
)
def test_options_are_range_checked(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        SkillsOptions(method="ebcc", **{field: value})


def test_front_door_tables_and_estimator_agree_on_rte() -> None:
    labels = pd.read_csv(DATA / "snow_rte" / "labels.csv", dtype=str)
    truth = pd.read_csv(DATA / "snow_rte" / "truth.csv", dtype=str)
    ds = cf.skills(labels, method="ds")
    fit = cf.skills(labels, method="ebcc", ebcc_restarts=2)
    assert set(fit.tables) == set(ds.tables)
    for name in fit.tables:
        assert list(fit.tables[name].columns) == list(ds.tables[name].columns), name
    res = fit_skills(labels, method="ebcc", ebcc_restarts=2)
    assert res.metadata["fit_status"] == "converged" and res.metadata["method"] == "ebcc"
    assert prediction_error(res.consensus, truth) <= 0.075  # authors' released run: 0.93125 accuracy
    est = cf.EBCC(restarts=2).fit(labels)
    merged = res.consensus.set_index("task")["label"]
    # the same model and options; the random starts are indexed by task code, and the estimator orders integer
    # task ids numerically (fit_skills: as text), so the restarts land on nearby optima
    assert (est.labels_.astype(str).reindex(merged.index) == merged).mean() >= 0.99
    post = res.consensus.set_index("task")["confidence"]
    top = est.probas_.max(axis=1)
    top.index = top.index.astype(str)
    np.testing.assert_allclose(top.reindex(post.index).to_numpy(), post.to_numpy(), atol=0.05)
    np.testing.assert_allclose(est.probas_.sum(axis=1), 1.0, atol=1e-12)
    assert est.converged_ and est.skills_.between(0, 1).all()


@pytest.mark.flow
@pytest.mark.usefixtures("prefect_harness")
def test_pipeline_run_with_method_ebcc(tmp_path: Path) -> None:
    import json

    from flows.cli import main

    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"name: rte-ebcc\njob: skills\nlabels:\n  path: {DATA / 'snow_temp' / 'labels.csv'}\n"
        f"truth:\n  path: {DATA / 'snow_temp' / 'truth.csv'}\n"
        f"skills:\n  method: ebcc\n  ebcc_restarts: 2\noutput:\n  dir: {tmp_path / 'out'}\n"
    )
    assert main(["run", str(spec)]) == 0
    (manifest,) = sorted((tmp_path / "out").rglob("manifest.json"))
    man = json.loads(manifest.read_text())
    assert man["status"] == "completed" and man["method"] == "ebcc"
    assert man["metrics"]["error"] <= 0.07 and man["metrics"]["n_gold"] == 462
    assert (manifest.parent / "consensus.parquet").is_file() and (manifest.parent / "skills.parquet").is_file()
