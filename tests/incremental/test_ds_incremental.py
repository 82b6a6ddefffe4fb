"""Incremental Dawid–Skene EM (crowdflow.skills.incremental_em) against a full refit, day by day, on generated families.

The rule (issue #38 item 2): after every day, labels equal to a full refit over all rows so far on ≥ 99.9 % of the
tasks, probabilities within 1e-4 on every task the run does not list, and every task whose label differs listed.
The full refit is :func:`crowdflow.skills.dawid_skene` run to its fixed point (tol 1e-11): the pipeline's default
tol 1e-6 stops up to 2e-3 away from it on these families, so that is what "a full refit" means here.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from crowdflow.labels import encode_labels
from crowdflow.skills.dawid_skene import dawid_skene
from crowdflow.skills.incremental_em import (
    CodedHistory,
    Codes,
    DSState,
    DSUpdate,
    _PartialMap,
    ds_update,
    posterior_bounds,
)
from crowdflow.synth.skills import CrowdConfig, crowd_family, crowd_labels

TOL_PROB = 1e-4


def refit(rows: pd.DataFrame, classes: list[str]) -> pd.DataFrame:
    """The full refit's posteriors (T×M, indexed by task id) at its fixed point."""
    lm = encode_labels(rows, classes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        r = dawid_skene(lm, tol=1e-11, max_iter=50_000, tie_break="smallest")
    return pd.DataFrame(r.posteriors, index=lm.tasks)


def split_days(labels: pd.DataFrame, seed: int, history: float, n_days: int, late: float) -> list[pd.DataFrame]:
    """Day 0 holds ``history`` of the tasks; the other tasks arrive on days 1..n_days; a share ``late`` of the rows of
    earlier tasks arrives on a later day (labels added to old tasks)."""
    rng = np.random.default_rng(seed)
    tasks = labels["task"].unique()
    day_of = np.where(rng.random(tasks.size) < history, 0, rng.integers(1, n_days + 1, tasks.size))
    d = labels["task"].map(dict(zip(tasks, day_of, strict=True))).to_numpy()
    moved = (rng.random(d.size) < late) & (d < n_days)
    d = np.where(moved, np.minimum(d + rng.integers(1, 3, d.size), n_days), d)
    return [labels[d == k].reset_index(drop=True) for k in range(n_days + 1)]


def check(up: DSUpdate, ref: pd.DataFrame) -> tuple[float, float, int]:
    """(largest probability difference on unlisted tasks, share of labels that differ, differing labels not listed)."""
    st = up.state
    p = ref.loc[st.tasks.astype(str)].to_numpy()
    q = st.posteriors
    unlisted = ~np.isin(st.tasks, up.listed["task"].to_numpy())
    diff = np.abs(p - q).max(axis=1)
    lab = p.argmax(axis=1) != q.argmax(axis=1)
    return float(diff[unlisted].max(initial=0.0)), float(lab.mean()), int((lab & unlisted).sum())


def run_days(
    days: list[pd.DataFrame], classes: list[str], **kw: object
) -> list[tuple[DSUpdate, tuple[float, float, int]]]:
    st, hist = DSState.empty(classes), CodedHistory()
    out = []
    seen: list[pd.DataFrame] = []
    for rows in days:
        if rows.empty:
            continue
        up = ds_update(st, rows, hist, **kw)  # type: ignore[arg-type]
        hist.extend(up.codes)
        st = up.state
        seen.append(rows)
        out.append((up, check(up, refit(pd.concat(seen), classes))))
    return out


FAMILY = crowd_family(6, seed=38, max_labels=6000, corners=False)


@pytest.mark.parametrize("config", FAMILY[:4], ids=lambda c: c.name)
def test_empty_state_is_a_full_fit(config: CrowdConfig) -> None:
    cl = crowd_labels(config)
    up = ds_update(DSState.empty(cl.classes), cl.labels)
    diff, share, unlisted = check(up, refit(cl.labels, cl.classes))
    assert up.mode == "first" and up.converged
    assert diff < 1e-6 and unlisted == 0 and share == 0.0


@pytest.mark.parametrize("config", FAMILY, ids=lambda c: c.name)
@pytest.mark.parametrize("shape", ["new_tasks", "late_labels", "small_days"])
def test_days_equal_a_full_refit(config: CrowdConfig, shape: str) -> None:
    cl = crowd_labels(config)
    history, n_days, late = {"new_tasks": (0.5, 3, 0.0), "late_labels": (0.5, 3, 0.15), "small_days": (0.9, 3, 0.01)}[
        shape
    ]
    days = split_days(cl.labels, config.seed, history, n_days, late)
    for up, (diff, share, unlisted) in run_days(days, cl.classes):
        assert up.converged
        assert diff <= TOL_PROB, (up.mode, diff)
        assert share <= 1e-3 or unlisted == 0
        assert unlisted == 0, (up.mode, unlisted)


def test_a_spammer_batch_triggers_full_passes() -> None:
    """A day on which 30 new spammers label every new task (as many as the history's) moves the parameters far:
    full passes run and the result equals the refit."""
    cfg = CrowdConfig(3, 1200, 5, 40, "confusion", 0.0, 0.0, "uniform", "uniform", 11)
    cl = crowd_labels(cfg)
    first = cl.labels[cl.labels["task"].isin(cl.labels["task"].unique()[:600])]
    rest = cl.labels[~cl.labels.index.isin(first.index)]
    rng = np.random.default_rng(3)
    spam = pd.DataFrame(
        [(t, f"spam{k}", str(rng.integers(0, 3))) for t in rest["task"].unique() for k in range(6)],
        columns=["task", "worker", "label"],
    )
    (_, _), (up, (diff, share, unlisted)) = run_days([first, pd.concat([rest, spam])], cl.classes)
    assert up.mode == "full" and up.drift > 0.05
    assert diff <= TOL_PROB and unlisted == 0 and share == 0.0


def test_a_quiet_day_stays_partial() -> None:
    """Three new tasks on a 4,000-task history. At tol_prob 1e-4 that already moves ~1,300 uncertain stored tasks
    by more than the margin (log π of a 0.1 cell moves by ~5e-3 when a worker with 1,400 labels gets one more), so
    full passes run; at tol_prob 1e-2 with rounds allowed only the touched tasks and the few near-ties whose label the
    bound leaves open are recomputed (a few hundred rows in all) and every unlisted task is within 1e-2 of the
    refit."""
    cfg = CrowdConfig(2, 4000, 7, 20, "onecoin", 0.0, 0.0, "uniform", "uniform", 5)
    cl = crowd_labels(cfg)
    tasks = cl.labels["task"].unique()
    days = [cl.labels[cl.labels["task"].isin(tasks[:-3])], cl.labels[cl.labels["task"].isin(tasks[-3:])]]
    (_, _), (up, (diff, share, unlisted)) = run_days(days, cl.classes)
    assert up.mode == "full" and diff <= TOL_PROB and unlisted == 0
    (_, _), (up, (diff, share, unlisted)) = run_days(days, cl.classes, tol_prob=1e-2, max_rounds=3)
    assert up.mode == "rounds"
    assert up.rows_read < 0.01 * up.passes * len(cl.labels)
    assert diff <= 1e-2 and unlisted == 0 and share == 0.0
    assert diff > TOL_PROB  # the looser tolerance is used: a stored task did move by more than 1e-4


@pytest.mark.parametrize("seed", range(4))
def test_bound_holds_without_history(seed: int) -> None:
    """Without the stored rows, untouched tasks keep their posteriors: each stays within its listed bound of the
    E-step at the new parameters (computed here over every row), and a label that flips is listed."""
    cfg = CrowdConfig(2 + seed % 3, 3000, 5, 30, "onecoin", 0.2, 0.0, "uniform", "uniform", 100 + seed)
    cl = crowd_labels(cfg)
    tasks = cl.labels["task"].unique()
    keep = 2990 if seed % 2 else 2400  # a day of 10 or of 600 new tasks
    first = cl.labels[cl.labels["task"].isin(tasks[:keep])]
    day = cl.labels[~cl.labels["task"].isin(tasks[:keep])]
    st = ds_update(DSState.empty(cl.classes), first).state
    up = ds_update(st, day)
    assert up.mode in ("partial", "bounded")
    new = up.state
    hist = CodedHistory()
    hist.extend(ds_update(DSState.empty(cl.classes), first).codes)
    hist.extend(up.codes)
    em = _PartialMap(
        hist.rows(None),
        np.arange(new.n_tasks),
        np.zeros((new.n_classes, new.n_workers * new.n_classes)),
        np.zeros(new.n_classes),
        new.n_tasks,
        new,
    )
    exact = em.posteriors(new.theta())
    change, flip = posterior_bounds(new.posteriors, new.slack)
    moved = np.abs(exact - new.posteriors).max(axis=1)
    assert (moved <= change + 1e-12).all()
    flipped = exact.argmax(axis=1) != new.posteriors.argmax(axis=1)
    assert not (flipped & ~flip).any()
    listed = np.isin(new.tasks, up.listed["task"].to_numpy())
    assert not ((moved > TOL_PROB) & ~listed).any()
    assert up.mode == "bounded" and len(up.listed) > 0
    if seed % 2:  # a small day: the label bound is informative (few stored tasks may flip)
        assert 0 < int(up.listed["may_flip"].sum()) < 0.25 * keep


def test_warm_rounds_end_at_a_fixed_point() -> None:
    """Partial rounds (warm) end at a fixed point of the EM map over every row (exact stationarity); it may be another
    local maximum than the refit's, which is why the default sends suspects to full passes."""
    cfg = CrowdConfig(4, 1500, 5, 60, "confusion", 0.2, 0.0, "skewed", "uniform", 21)
    cl = crowd_labels(cfg)
    days = split_days(cl.labels, 1, 0.9, 3, 0.01)
    st, hist = DSState.empty(cl.classes), CodedHistory()
    for rows in days:
        up = ds_update(st, rows, hist, max_rounds=4, suspect_share=0.5, restart="warm")
        hist.extend(up.codes)
        st = up.state
        m = st.n_classes
        em = _PartialMap(
            hist.rows(None), np.arange(st.n_tasks), np.zeros((m, st.n_workers * m)), np.zeros(m), st.n_tasks, st
        )
        step, _, _ = em(st.theta())
        assert np.abs(step - st.theta()).max() < 1e-6


def test_state_round_trip(tmp_path: object) -> None:
    cl = crowd_labels(FAMILY[0])
    days = split_days(cl.labels, 0, 0.6, 1, 0.1)
    up = ds_update(DSState.empty(cl.classes, smoothing=0.05, prior=0.5), days[0])
    path = f"{tmp_path}/ds.npz"
    up.state.save(path)
    back = DSState.load(path)
    for k in set(up.state.__dataclass_fields__) - {"lookup"}:
        a, b = getattr(up.state, k), getattr(back, k)
        assert np.array_equal(np.asarray(a), np.asarray(b)), k
    hist = CodedHistory([up.codes])
    one = ds_update(up.state, days[1], hist)
    two = ds_update(back, days[1], hist)
    assert np.array_equal(one.state.posteriors, two.state.posteriors)
    np.savez(path, meta=np.array(["other/1", "0", "0"]))
    with pytest.raises(ValueError, match="format"):
        DSState.load(path)


def test_sums_are_the_posteriors_sums() -> None:
    """The stored G and S equal the sums recomputed from the stored posteriors and every row (after partial days)."""
    cfg = CrowdConfig(3, 3000, 6, 25, "onecoin", 0.0, 0.0, "uniform", "uniform", 8)
    cl = crowd_labels(cfg)
    days = split_days(cl.labels, 2, 0.95, 2, 0.0)
    st, hist = DSState.empty(cl.classes), CodedHistory()
    for rows in days:
        up = ds_update(st, rows, hist)
        hist.extend(up.codes)
        st = up.state
    rows_all = hist.rows(None)
    g = np.zeros_like(st.counts)
    np.add.at(g, (rows_all.worker, slice(None), rows_all.label), st.posteriors[rows_all.task])
    assert np.allclose(g, st.counts, atol=1e-8)
    assert np.allclose(st.class_sums, st.posteriors.sum(axis=0), atol=1e-8)


def test_posterior_bounds_against_brute_force() -> None:
    """The probability bound holds for every shift of the log-odds within ±B/2 per class (pairwise ≤ B) and is
    attained: the largest change over random extreme shifts comes within 1 % of it."""
    rng = np.random.default_rng(0)
    for m in (2, 3, 5):
        post = rng.dirichlet(np.full(m, 0.3), size=200)
        bound = rng.exponential(0.3, size=200)
        change, flip = posterior_bounds(post, bound)
        best = np.zeros(200)
        for _ in range(300):
            eps = (rng.integers(0, 2, size=(200, m)) - 0.5) * bound[:, None]
            new = post * np.exp(eps)
            new /= new.sum(axis=1, keepdims=True)
            best = np.maximum(best, np.abs(new - post).max(axis=1))
            assert not ((new.argmax(axis=1) != post.argmax(axis=1)) & ~flip).any()
        assert (best <= change + 1e-12).all()
        assert (best >= 0.99 * change - 1e-12).mean() > 0.5


def test_bad_inputs() -> None:
    cl = crowd_labels(FAMILY[0])
    st = ds_update(DSState.empty(cl.classes), cl.labels.iloc[:500]).state
    with pytest.raises(ValueError, match="history"):
        ds_update(st, cl.labels.iloc[500:510].assign(task=cl.labels["task"].iloc[0]))
    with pytest.raises(ValueError, match="not one of the state's classes"):
        ds_update(st, pd.DataFrame({"task": ["new"], "worker": ["w"], "label": ["zz"]}))
    hist = CodedHistory([ds_update(DSState.empty(cl.classes), cl.labels.iloc[:500]).codes])
    with pytest.raises(ValueError, match=r"row 0 of the new rows repeats .* already stored"):
        ds_update(st, cl.labels.iloc[:1], hist)
    with pytest.raises(ValueError, match="row 1 of the new rows repeats"):
        ds_update(st, pd.concat([cl.labels.iloc[600:601]] * 2), hist)
    with pytest.raises(ValueError, match="2 classes"):
        DSState.empty(["only"])
    assert replace(st, smoothing=0.5).smoothing == 0.5
    assert Codes.concat([]).task.size == 0


def _under_determined(config: CrowdConfig) -> bool:
    """Fewer labels per worker than the M(M − 1) free entries of a confusion matrix: the DS posterior mode has many
    local maxima there, and which one EM reaches depends on its start (warm or majority), not on the increment."""
    return config.n_labels / config.n_workers < config.n_classes * (config.n_classes - 1)


SLOW_FAMILY = [
    pytest.param(
        c, marks=pytest.mark.xfail(reason="under-determined crowd: start-dependent local maxima", strict=False)
    )
    if _under_determined(c)
    else c
    for c in crowd_family(24, seed=2038, max_labels=60_000)
]


@pytest.mark.slow
@pytest.mark.parametrize("config", SLOW_FAMILY, ids=lambda c: c.name)
def test_days_equal_a_full_refit_large(config: CrowdConfig) -> None:
    cl = crowd_labels(config)
    for shape in ((0.5, 4, 0.1), (0.9, 5, 0.01)):
        for up, (diff, share, unlisted) in run_days(split_days(cl.labels, config.seed, *shape), cl.classes):
            assert diff <= TOL_PROB and unlisted == 0 and share <= 1e-3, (up.mode, diff, share, unlisted)
