"""Acceptance tests of docs/methods/skills.md §6 for crowdflow.skills.fit.

Default run: the statistical tests at the seed counts of docs/methods/skills.md §6 (all small).
``@pytest.mark.slow``: the W = 10^4 scale test (AT-P1) and the W = 10^5 memory guard (AT-U5); the
η = 0.01 variant of AT-O1 is in test_rank_one.py. The acceptance tests are PGD's: they pass
``method="pgd"`` (the default of ``fit_skills`` is Dawid–Skene with the diagonal prior since issue #20;
its tests are in test_default.py).
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crowdflow.labels import encode_labels
from crowdflow.metrics import majority_vote_expected_error
from crowdflow.skills import (
    LabelMoments,
    fit_skills,
    prediction_error,
    prepare_labels,
    vote_weights,
    weighted_consensus,
)
from crowdflow.synth import skills as synth

DATA = Path(__file__).resolve().parents[2] / "crowdflow" / "data"
SHARED = Path("/work/shared/data")


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------
def fit_quiet(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fit_skills(*args, **kwargs)


def oracle_error(data: synth.SyntheticLabels) -> float:
    """Bayes error: MAP vote (docs/methods/skills.md §2.7) with the true skills."""
    lm, _ = prepare_labels(data.labels, classes=data.classes)
    pos = {w: i for i, w in enumerate(data.workers)}
    s = data.skills[[pos[w] for w in lm.workers]]
    cons = weighted_consensus(lm, vote_weights(s, lm.n_classes), tie_break="random", seed=0)
    return prediction_error(cons.consensus, data.truth)


def skills_of(result, data: synth.SyntheticLabels) -> np.ndarray:
    return result.skills.set_index("worker").loc[list(data.workers), "skill"].to_numpy()


def edge_labels(edges: np.ndarray, tasks_per_edge: int, skills: np.ndarray, seed: int = 0):
    wi, ti = synth.edge_assignment(edges, tasks_per_edge * len(edges))
    return synth.one_coin_labels(skills, wi, ti, 2, seed)


# ----------------------------------------------------------------------------------------------
# AT-U5  memory
# ----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_at_u5_no_dense_allocation_1e5_workers():
    import tracemalloc

    n_w = 100_000
    wi, ti = synth.random_assignment(n_w, 150_000, 3, seed=1)
    data = synth.one_coin_labels(np.full(n_w, 0.6), wi, ti, 2, seed=1)
    tracemalloc.start()
    res = fit_quiet(data.labels, method="pgd", max_iter=50, spectral=False)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(res.skills) == data.labels["worker"].nunique()
    assert peak < 2e9  # a dense W×W float64 would need 8e10 bytes


def test_at_u5_memory_guard_5000_workers_with_eigsh():
    """Full pipeline incl. eigsh diagnostics on W = 5000: one dense W×W float64 would need 200 MB."""
    import tracemalloc

    n_w = 5000
    wi, ti = synth.random_assignment(n_w, 7500, 3, seed=2)
    data = synth.one_coin_labels(np.full(n_w, 0.6), wi, ti, 2, seed=2)
    tracemalloc.start()
    res = fit_quiet(data.labels, method="pgd", max_iter=20, spectral=True)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(res.skills) == data.labels["worker"].nunique()
    assert res.diagnostics["eig_method"].isin(["lobpcg", "eigsh"]).any()
    assert peak < 5e7


# ----------------------------------------------------------------------------------------------
# AT-S1..S4, AT-M1  statistical
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ab", [(5, 1), (2, 5), (1, 3)])
def test_at_s1_table1(ab):
    errs, oracle = [], []
    for seed in range(10):
        s = synth.beta_skills(*ab, 11, seed=seed)
        data = synth.one_coin_labels(s, *synth.clique_assignment(11, 300), 2, seed=seed)
        res = fit_quiet(data.labels, method="pgd", classes=data.classes)
        errs.append(prediction_error(res.consensus, data.truth))
        oracle.append(oracle_error(data))
    if ab == (5, 1):
        assert np.mean(errs) <= 0.01 and np.mean(errs) <= np.mean(oracle) + 0.005
    else:
        assert np.mean(errs) >= 0.9


def test_at_s2_sparse_with_spammers():
    errs, oracle, mv, rmse = [], [], [], []
    for seed in range(10):
        rng = np.random.default_rng(100 + seed)
        s = np.where(np.arange(30) < 12, rng.uniform(-0.05, 0.05, 30), rng.uniform(0.3, 0.9, 30))
        data = synth.one_coin_labels(s, *synth.random_assignment(30, 3000, 5, seed=seed), 2, seed=seed)
        res = fit_quiet(data.labels, method="pgd", classes=data.classes)
        errs.append(prediction_error(res.consensus, data.truth))
        oracle.append(oracle_error(data))
        mv.append(prediction_error(fit_skills(data.labels, method="mv").consensus, data.truth))
        rmse.append(np.sqrt(np.mean((skills_of(res, data) - s) ** 2)))
    assert np.mean(errs) <= np.mean(oracle) + 0.01
    assert np.mean(errs) <= np.mean(mv) - 0.05
    assert max(rmse) <= 0.12


def test_at_s3_weighting():
    err_n, err_b = [], []
    for seed in range(20):
        rng = np.random.default_rng(200 + seed)
        s = np.where(np.arange(20) < 10, rng.uniform(-0.1, 0.1, 20), rng.uniform(0.2, 0.8, 20))
        prob = np.where(np.arange(20) < 10, 1.0, 4.0)  # skilled workers 4x as likely to be drawn
        data = synth.one_coin_labels(
            s, *synth.random_assignment(20, 300, 3, seed=seed, worker_weights=prob), 2, seed=seed
        )
        err_n.append(prediction_error(fit_quiet(data.labels, method="pgd").consensus, data.truth))
        err_b.append(prediction_error(fit_quiet(data.labels, method="pgd", weighting="binary").consensus, data.truth))
    assert np.mean(err_n) <= np.mean(err_b) - 0.05


def test_at_s4_ring_more_tasks_helps():
    s = np.linspace(-0.3, 0.8, 11)
    mean_err = {}
    mean_mv = {}
    for t in (11, 330):
        errs, mv = [], []
        for seed in range(15):
            data = synth.one_coin_labels(s, *synth.edge_assignment(synth.ring_edges(11), t), 2, seed=seed)
            errs.append(
                prediction_error(fit_quiet(data.labels, method="pgd", classes=data.classes).consensus, data.truth)
            )
            mv.append(
                prediction_error(fit_skills(data.labels, method="mv", classes=data.classes).consensus, data.truth)
            )
        mean_err[t], mean_mv[t] = np.mean(errs), np.mean(mv)
    assert mean_err[330] < mean_err[11]
    assert mean_err[330] < mean_mv[330]


# Table 2 (docs/methods/skills.md §5.3): star plus one triangle, noise injected into C, W = 21 and 91 (paper: 50 runs
# at W = 21/51/71/91; the full table: python -m benchmarks.skills_table2, results/skills.md). Decision of issue #20
# (part 3.1): the paper's text states ξ ~ U[−0.2, 0.2] and that reading stands; the paper's result (PGD within 0.01
# of Bayes) is not reproducible under it, because a star that knows the true hub skill is already +0.012 to +0.015
# above Bayes. No test asserts the unreachable 0.01 (the strict xfail that did guarded nothing); the stated reading
# has its regression guard, the alternative reading (U[−0.1, 0.1]) the paper's 0.01.
TABLE2_WORKERS = (21, 91)
TABLE2_SEEDS = range(10)


def injected_moments(inst: synth.InjectedNoiseInstance) -> LabelMoments:
    """The injected C on the star+triangle support as label moments.

    N = 1 on every edge (so weights "count", "binary" and "square" coincide), agreement rate
    a = (1 + C)/2 so that C^ = 2a − 1 = C.
    """
    agree = inst.support.copy()
    agree.data = (1.0 + inst.c_hat.data) / 2.0
    return LabelMoments(co_labels=inst.support, agreements=agree, c_hat=inst.c_hat, n_classes=2)


def table2_errors(n_workers: int, seed: int, half_width: float = 0.2) -> tuple[float, float]:
    """(Bayes error, PGD error) of one Table-2 run: the paper's solver (gd, τ = 1 box from the
    evaluation labels' n_i, sum rule, MAP vote), skills fitted from the injected C only."""
    inst = synth.star_triangle_injected(n_workers, seed, half_width=half_width)
    data = inst.data
    res = fit_quiet(
        data.labels, method="pgd", classes=data.classes, moments=injected_moments(inst), solver="gd", spectral=False
    )
    assert (res.skills["status"] == "ok").all()
    return oracle_error(data), prediction_error(res.consensus, data.truth)


@pytest.fixture(scope="module")
def table2_runs() -> dict[int, np.ndarray]:
    """W -> array (runs, 2) of (Bayes error, PGD error)."""
    return {w: np.array([table2_errors(w, seed) for seed in TABLE2_SEEDS]) for w in TABLE2_WORKERS}


@pytest.mark.parametrize("n_workers", TABLE2_WORKERS)
def test_table2_within_001_of_bayes_with_the_noise_in_fig45_notation(n_workers):
    """The same setup with ξ ~ 0.2·U[−1/2, 1/2] = U[−0.1, 0.1], the way the paper writes its other
    injected noise (Figs. 4–5, docs/methods/skills.md §5.7), instead of the stated U[−0.2, 0.2]: PGD is
    within 0.01 of the Bayes error (measured +0.0035 to +0.0060 over 20 runs per W; the paper: +0.0000
    to +0.0044).

    Not the reading that stands (the paper's text states U[−0.2, 0.2]; docs/methods/skills.md §5.3): it
    shows that the gap under the stated noise comes from the noise level on the star edges, and pins
    PGD's estimation at this level. The evaluation labels are those of the stated reading, so a plain
    vote (+0.13) or the sign-flipped solution fails it.
    """
    runs = np.array([table2_errors(n_workers, seed, half_width=0.1) for seed in TABLE2_SEEDS])
    bayes, pgd = runs.mean(axis=0)
    assert 0.035 <= bayes <= 0.075
    assert pgd - bayes <= 0.01


@pytest.mark.parametrize("n_workers", TABLE2_WORKERS)
def test_table2_star_triangle_regression(table2_runs, n_workers):
    """Regression guard for Table 2 under the stated noise ξ ~ U[−0.2, 0.2] (the reading that stands).

    The paper's "within 0.01 of Bayes" is not reproducible here (measured +0.016 to +0.018 over 50
    runs; the true hub skill alone leaves +0.012 to +0.015), so this pins what the reading does
    reproduce: the Bayes error at the paper's level (paper 0.0425–0.0634; measured 0.052–0.061) and PGD
    within 0.03 of it. Constant skills (plain vote: +0.13) or the sign-flipped solution (+0.86) break it.
    """
    bayes, pgd = table2_runs[n_workers].mean(axis=0)
    assert 0.035 <= bayes <= 0.075
    assert pgd - bayes <= 0.03


def test_at_m1_multiclass():
    errs, oracle, mv, rmse = [], [], [], []
    for seed in range(10):
        rng = np.random.default_rng(300 + seed)
        p = np.where(np.arange(30) < 9, rng.uniform(0.2, 0.3, 30), rng.uniform(0.4, 0.9, 30))
        s = (4 * p - 1) / 3
        data = synth.one_coin_labels(s, *synth.random_assignment(30, 3000, 5, seed=seed), 4, seed=seed)
        res = fit_quiet(data.labels, method="pgd", classes=data.classes)
        errs.append(prediction_error(res.consensus, data.truth))
        oracle.append(oracle_error(data))
        mv.append(prediction_error(fit_skills(data.labels, method="mv", classes=data.classes).consensus, data.truth))
        rmse.append(np.sqrt(np.mean((skills_of(res, data) - s) ** 2)))
        if seed == 0:  # permuting class names leaves skills unchanged
            perm = {"0": "c", "1": "a", "2": "d", "3": "b"}
            res_p = fit_quiet(data.labels.assign(label=data.labels["label"].map(perm)), method="pgd")
            np.testing.assert_array_equal(res_p.skills["skill"].to_numpy(), res.skills["skill"].to_numpy())
            back = res_p.consensus["label"].map({v: k for k, v in perm.items()})
            assert (back.to_numpy() == res.consensus["label"].to_numpy()).mean() > 0.99
    assert np.mean(rmse) <= 0.06
    assert np.mean(errs) <= np.mean(oracle) + 0.01
    assert np.mean(errs) <= np.mean(mv) - 0.05
    assert (res.skills["lower"] >= -1 / 3 - 1e-12).all() and (res.skills["skill"] >= -1 / 3 - 1e-12).all()


# ----------------------------------------------------------------------------------------------
# AT-P1..P3  scale / determinism / edge cases
# ----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_at_p1_scale():
    n_w, n_t = 10_000, 200_000
    rng = np.random.default_rng(9)
    s = np.where(rng.random(n_w) < 0.4, rng.uniform(-0.05, 0.05, n_w), rng.uniform(0.3, 0.9, n_w))
    data = synth.one_coin_labels(s, *synth.random_assignment(n_w, n_t, 3, seed=9), 2, seed=9)
    res = fit_quiet(data.labels, method="pgd", max_iter=2000)
    mv = fit_skills(data.labels, method="mv")
    assert prediction_error(res.consensus, data.truth) <= prediction_error(mv.consensus, data.truth) + 0.005


def _parquet_bytes(df: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), buf)
    return buf.getvalue()


@pytest.mark.parametrize("method", ["pgd", "onecoin_ds", "ds", "mv"])
def test_at_p2_deterministic_and_permutation_invariant(method):
    rng = np.random.default_rng(10)
    s = np.where(np.arange(25) < 8, rng.uniform(-0.1, 0.1, 25), rng.uniform(0.3, 0.9, 25))
    data = synth.one_coin_labels(s, *synth.random_assignment(25, 400, 3, seed=10), 3, seed=10)
    r1 = fit_quiet(data.labels, method=method)
    r2 = fit_quiet(data.labels, method=method)
    r3 = fit_quiet(data.labels.sample(frac=1.0, random_state=3), method=method)
    for attr in ("skills", "consensus", "diagnostics"):
        b1 = _parquet_bytes(getattr(r1, attr))
        assert b1 == _parquet_bytes(getattr(r2, attr))
        assert b1 == _parquet_bytes(getattr(r3, attr))
    assert _parquet_bytes(r1.metadata_frame()) == _parquet_bytes(r3.metadata_frame())


def test_at_p3_edge_cases():
    tri = edge_labels(synth.ring_edges(3), 10, np.array([0.8, 0.7, 0.6]), seed=3).labels
    extra = pd.DataFrame(
        {
            "task": ["solo_ok", "solo_few", "shared_few", "shared_few"],
            "worker": ["w0000", "w0009", "w0008", "w0001"],
            "label": ["1", "0", "0", "1"],
        }
    )
    df = pd.concat([tri, extra], ignore_index=True)
    res = fit_skills(df, method="pgd")
    sk = res.skills.set_index("worker")
    cons = res.consensus.set_index("task")
    # task with one label from an identified worker: that worker's vote, n_labels = 1
    assert cons.loc["solo_ok", "label"] == "1" and cons.loc["solo_ok", "n_labels"] == 1
    assert not cons.loc["solo_ok", "fallback"]
    # worker with n_i = 1 <= tau^2 in an odd component: too_few_labels, weight 0
    assert sk.loc["w0008", "status"] == "too_few_labels" and sk.loc["w0008", "vote_weight"] == 0
    assert np.isnan(sk.loc["w0008", "skill"])
    # single-label task of an unidentified worker: fallback (MV = its label) and flagged
    assert sk.loc["w0009", "status"] == "isolated"
    assert cons.loc["solo_few", "fallback"] and cons.loc["solo_few", "label"] == "0"
    # a too_few worker's label is ignored where an identified worker labelled too
    assert cons.loc["shared_few", "label"] == "1" and not cons.loc["shared_few", "fallback"]
    with pytest.raises(ValueError, match="empty"):
        fit_skills(df.iloc[:0])
    with pytest.raises(ValueError, match="column 'worker'"):
        fit_skills(df.drop(columns="worker"))
    with pytest.raises(ValueError, match="null"):
        fit_skills(df.assign(label=df["label"].where(df.index != 3)))
    with pytest.raises(ValueError, match="repeat"):
        fit_skills(pd.concat([df, df.iloc[:1]]))
    assert fit_skills(pd.concat([df, df.iloc[:1]]), duplicates="keep_last").metadata["n_duplicates_dropped"] == 1
    with pytest.raises(ValueError, match="at least 2 classes"):
        fit_skills(df.assign(label="1"))
    # a declared label set makes M = 2 even if only one label is observed
    one = fit_quiet(df.assign(label="1"), method="pgd", classes=["0", "1"])
    assert (one.consensus["label"] == "1").all()
    with pytest.raises(ValueError, match="unknown method"):
        fit_skills(df, method="kos")


def test_fallback_zero_and_too_few_breaking_odd_cycle():
    # triangle w0-w1-w2 where w2 has a single label per edge... w2 labels only one task
    df = pd.DataFrame(
        {
            "task": ["a", "a", "b", "b", "b", "c", "c", "d", "d"] + [f"x{k}" for k in range(6) for _ in (0, 1)],
            "worker": ["w0", "w1", "w0", "w1", "w2", "w3", "w0", "w3", "w1"] + ["w0", "w1"] * 6,
            "label": ["1", "1", "1", "0", "1", "1", "1", "0", "0"] + ["1", "1"] * 6,
        }
    )
    # w2 has n = 1 <= tau^2: dropped; remaining graph w0-w1-w3 is still a triangle
    res = fit_skills(df, method="pgd")
    st = res.skills.set_index("worker")["status"]
    assert st["w2"] == "too_few_labels" and (st[["w0", "w1", "w3"]] == "ok").all()
    # without w3 the remaining {w0, w1} is a single edge: bipartite after dropping w2
    df2 = df[df["worker"] != "w3"]
    res2 = fit_skills(df2, method="pgd")
    st2 = res2.skills.set_index("worker")["status"]
    assert st2["w2"] == "too_few_labels" and (st2[["w0", "w1"]] == "bipartite_component").all()
    with pytest.raises(ValueError, match="after dropping too_few_labels"):
        fit_skills(df2, method="pgd", identifiability_policy="raise")
    zero = fit_skills(df2, method="pgd", fallback="zero")
    assert zero.consensus["fallback"].all()
    np.testing.assert_allclose(zero.consensus["confidence"], 0.5)


def test_result_tables_schema():
    data = synth.one_coin_labels(np.linspace(0.2, 0.9, 9), *synth.clique_assignment(9, 50), 2, seed=0)
    res = fit_quiet(data.labels, method="pgd")
    assert list(res.skills.columns[:8]) == [
        "worker",
        "skill",
        "accuracy",
        "vote_weight",
        "n_labels",
        "n_partners",
        "component",
        "status",
    ]
    assert list(res.consensus.columns) == ["task", "label", "confidence", "n_labels", "fallback"]
    for col in ("skill", "accuracy", "vote_weight"):
        assert res.skills[col].dtype == np.float64
    assert res.consensus["confidence"].dtype == np.float64
    assert res.skills["worker"].map(type).eq(str).all() and res.consensus["task"].map(type).eq(str).all()
    for key in ("iterations", "converged", "final_loss", "eta", "tau", "weighting"):
        assert key in res.metadata
    assert res.metadata["eta"] == pytest.approx(1 / (4 * 8 * 50))  # 1/(4 max_i r_i), r_i = 8 * 50
    np.testing.assert_allclose(res.skills["accuracy"], (res.skills["skill"] + 1) / 2)
    post = res.consensus["confidence"]
    assert ((post >= 0.5) & (post <= 1)).all()


def test_onecoin_dispatch_and_mv_accuracy_column():
    data = synth.one_coin_labels(np.linspace(0.1, 0.9, 12), *synth.random_assignment(12, 500, 5, seed=2), 2, seed=2)
    mv = fit_skills(data.labels, method="mv")
    assert (mv.skills["vote_weight"] == 1).all()
    # skill is the one-coin skill of the agreement rate, (M accuracy - 1)/(M - 1), as for Dawid-Skene
    np.testing.assert_allclose(mv.skills["skill"], 2 * mv.skills["accuracy"] - 1)
    # accuracy = agreement with the MV label
    lab = data.labels.merge(mv.consensus[["task", "label"]], on="task", suffixes=("", "_mv"))
    agree = (lab["label"] == lab["label_mv"]).groupby(lab["worker"]).mean()
    np.testing.assert_allclose(mv.skills.set_index("worker").loc[agree.index, "accuracy"], agree.to_numpy())
    for method in ("onecoin_ds", "ds"):
        r = fit_skills(data.labels, method=method)
        assert r.metadata["converged"] and np.isfinite(r.skills["skill"]).all()
        assert not r.consensus["fallback"].any()


# ----------------------------------------------------------------------------------------------
# AT-R1  real data (Snow et al. 2008)
# ----------------------------------------------------------------------------------------------
def _real(name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    for root in (DATA, SHARED):
        if (root / name / "labels.csv").exists() and (root / name / "truth.csv").exists():
            return (
                pd.read_csv(root / name / "labels.csv", dtype=str),
                pd.read_csv(root / name / "truth.csv", dtype=str),
            )
    pytest.skip(f"{name}: labels.csv/truth.csv not found under {DATA} (nor {SHARED})")


@pytest.mark.parametrize(("name", "threshold"), [("snow_rte", 0.09), ("snow_temp", 0.072), ("snow_wsd", 0.026)])
def test_at_r1_real_data(name, threshold):
    labels, truth = _real(name)
    res = fit_quiet(labels, method="pgd", solver="gd")
    err = prediction_error(res.consensus, truth)
    assert err <= threshold
    # PGD <= MV, MV counted as the paper does (random tie-break in expectation: ties fractional)
    assert err <= majority_vote_expected_error(labels, truth) + 1e-12
    # the faster solver of the same objective gives the same predictions
    fast = fit_skills(labels, method="pgd", solver="scaled")
    assert fast.metadata["converged"]
    assert prediction_error(fast.consensus, truth) == pytest.approx(err, abs=1e-12)
    assert (res.skills["status"] == "ok").all()


def test_label_matrix_input_equals_dataframe_input():
    data = synth.one_coin_labels(np.linspace(0.1, 0.9, 10), *synth.random_assignment(10, 200, 3, seed=1), 2, seed=1)
    a = fit_quiet(data.labels, method="pgd")
    b = fit_quiet(encode_labels(data.labels.sample(frac=1.0, random_state=0)), method="pgd")
    pd.testing.assert_frame_equal(a.skills, b.skills)
    pd.testing.assert_frame_equal(a.consensus, b.consensus)
    with pytest.raises(ValueError, match="declared classes"):
        fit_skills(encode_labels(data.labels), classes=["0", "1", "2"])


# ----------------------------------------------------------------------------------------------
# issue #3 "Tests must show" additions, fast paths and streaming
# ----------------------------------------------------------------------------------------------
def test_skill_error_shrinks_as_tasks_grow():
    """RMSE(ŝ, s) falls with the number of tasks (consistency of the moment estimator)."""
    rmse = {}
    for n_tasks in (150, 1500, 15000):
        errs = []
        for seed in range(4):
            rng = np.random.default_rng(400 + seed)
            s = rng.uniform(0.1, 0.8, 20)
            data = synth.one_coin_labels(s, *synth.random_assignment(20, n_tasks, 4, seed=seed), 2, seed=seed)
            res = fit_quiet(data.labels, method="pgd", classes=data.classes, solver="scaled")
            errs.append(np.sqrt(np.mean((skills_of(res, data) - s) ** 2)))
        rmse[n_tasks] = float(np.mean(errs))
    assert rmse[150] > rmse[1500] > rmse[15000]
    assert rmse[15000] < 0.35 * rmse[150]  # ~ 1/sqrt(T): 10x the tasks, ~1/3 the error


@pytest.mark.parametrize(("name", "floor"), [("snow_rte", 0.075), ("snow_temp", 0.065), ("snow_wsd", 0.0057)])
def test_real_data_bundled_floors(name, floor):
    """Issue #3 floors for PGD with its defaults on the bundled sets: error <= floor and <= MV + 0.005."""
    root = DATA / name
    labels = pd.read_csv(root / "labels.csv", dtype=str)
    truth = pd.read_csv(root / "truth.csv", dtype=str)
    err = prediction_error(fit_quiet(labels, method="pgd").consensus, truth)
    mv = prediction_error(fit_skills(labels, method="mv").consensus, truth)
    assert err <= floor
    assert err <= mv + 0.005
