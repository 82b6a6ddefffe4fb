"""A held EM pass is the in-memory default sweep (issue #36), and the bucket's gold look-up of the consensus pass.

A held bucket's pass (:func:`crowdflow.skills.held.em_sums`, :func:`~crowdflow.skills.held.posteriors`) runs the sweep
of the in-memory EM map (:func:`crowdflow.skills.fused_em.fused_pass` with its default, vectorised exponential) on the
bucket's int32 codes: its posteriors, M-step sums, class sums and log-likelihood must be that sweep's bits on the same
labels (int64 rows, as the in-memory map holds them), and differ from the libm (``exact``) sweep's. The family
(:func:`_case`): 1–300 workers, 1–500 tasks, tasks of 1–7 labels with a share of single-label tasks, workers with one
label, confusion tables with exact ties (equal rows: a tie in every task) and zero entries (log π = −∞), both
models, the initialising pass and a parameterised one; three classes in :func:`_multiclass`.

The fits: partitioned (in process and on two Dask workers) against the in-memory fit on small crowds with one
observed class of a declared two-class label set, two and three classes, text ids of several kinds, exactly tied
tasks and gold labels (the review's gold counts, per-worker gold accuracy and changed tasks against the in-memory
consensus reviewed by :func:`crowdflow.metrics.review_skills` and :func:`crowdflow.metrics.gold_metrics`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from crowdflow.executors import InlineMemory
from crowdflow.metrics import gold_metrics, review_skills
from crowdflow.skills import SkillsOptions, fit_skills, fit_skills_partitioned, fused_em
from crowdflow.skills.buckets import bucket_truth
from crowdflow.skills.held import EMShared, em_sums, held_codes, label_row_major, posteriors

TOL = 1e-8
DS_TOL = 1e-12


def _case(seed: int) -> tuple[Any, np.ndarray, np.ndarray]:
    """Held codes of a two-class crowd, a log π table (label-row-major) and log q, from the family of the docstring."""
    rng = np.random.default_rng(seed)
    w, n_tasks = int(rng.choice([1, 2, 7, 300])), int(rng.choice([1, 5, 60, 500]))
    k = np.where(rng.random(n_tasks) < 0.3, 1, rng.integers(1, 8, n_tasks))
    k = np.minimum(k, w)
    task = np.repeat(np.arange(n_tasks), k)
    worker = np.concatenate([np.sort(rng.choice(w, kk, replace=False)) for kk in k])
    given = rng.integers(0, 2, task.size)
    codes = held_codes("unused", task, worker, given, n_tasks, 2, w)
    pi = rng.dirichlet(np.ones(2), size=(w, 2))  # pi[i, l, y]
    kind = seed % 3
    if kind == 1:  # equal rows: ℓ_0 = ℓ_1 + (log q_0 − log q_1) in every task, exact ties with equal q
        pi[:, 1, :] = pi[:, 0, :]
    elif kind == 2:  # zero entries: log π = −∞ (a worker that never errs, or a class it never answers)
        pi[rng.random(w) < 0.5, 0, :] = [1.0, 0.0]
        pi[rng.random(w) < 0.2, :, :] = [1.0, 0.0]  # never answers class 1: its "1" labels make a task impossible
    with np.errstate(divide="ignore"):
        log_pi_t = np.ascontiguousarray(np.log(pi).transpose(1, 0, 2).reshape(2, w * 2))
    log_q = np.log([0.5, 0.5]) if kind == 1 else np.log(rng.dirichlet(np.ones(2)))
    return codes, label_row_major(log_pi_t), log_q


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(a, b, equal_nan=True))


def _sweep(codes: Any, tab: np.ndarray, log_q: np.ndarray, one_coin: bool, exact: bool) -> tuple[Any, ...]:
    """The in-memory map's sweep on the bucket's labels as the in-memory map holds them (int64 offsets and rows)."""
    m, w = codes.n_classes, tab.size // (codes.n_classes**2)
    counts, class_sums, post_t = np.empty(w if one_coin else w * m * m), np.empty(m), np.empty((m, codes.n_tasks))
    none = np.empty(0, dtype=np.int64)
    indptr, rows = codes.indptr.astype(np.int64), codes.code.astype(np.int64)
    ll = fused_em.fused_pass(indptr, rows, tab, log_q, none, one_coin, counts, class_sums, np.empty(0), post_t, exact)
    return counts, class_sums, post_t, ll


@pytest.mark.parametrize("seed", range(24))
def test_a_held_pass_is_the_in_memory_default_sweep(seed: int) -> None:
    """Posteriors, sums, class sums and log-likelihood of a held bucket's pass and its consensus E-step: the bits
    of the in-memory map's default sweep on the same labels (both models, two and three classes, ties, zeros and
    impossible tasks), not those of the libm sweep (on the cases where the two differ at all)."""
    codes, tab, log_q = _case(seed) if seed < 18 else _multiclass(seed, 3)
    w = tab.size // codes.n_classes**2
    with np.errstate(invalid="ignore"):
        for one_coin in (False, True):
            got = em_sums(codes, EMShared(tab, log_q, one_coin, w))
            counts, class_sums, post_t, ll = _sweep(codes, tab, log_q, one_coin, exact=False)
            assert _same(got.counts, counts) and _same(got.class_sums, class_sums), one_coin
            assert _same(np.float64(got.log_likelihood), np.float64(ll)), one_coin
            post, ll_post = posteriors(codes, tab, log_q)
            assert _same(post, post_t.T) and _same(np.float64(ll_post), np.float64(ll))


def _spread(codes: Any, tab: np.ndarray, m: int, seed: int) -> tuple[Any, np.ndarray, np.ndarray]:
    """The same labels with their workers spread over a table past ``fused_em.NEAR`` floats (the sweep then asks the
    cache for rows ahead, ``fused_em.AHEAD``): each worker's M² entries at a random row of W' ≫ W rows, the other rows
    garbage; returns the codes, the table and the map worker → row."""
    rng = np.random.default_rng(1000 + seed)
    w = tab.size // (m * m)
    big = fused_em.NEAR // (m * m) + 2 * fused_em.AHEAD + int(rng.integers(1, 5_000))
    row = rng.choice(big, w, replace=False)
    wide = rng.normal(size=big * m * m)
    wide.reshape(big, m * m)[row] = tab.reshape(w, m * m)
    code = row[codes.code // m] * m + codes.code % m
    return replace(codes, code=code.astype(codes.code.dtype)), wide, row


def _multiclass(seed: int, m: int) -> tuple[Any, np.ndarray, np.ndarray]:
    """A held bucket of an ``m``-class crowd (the binary family's shapes) with its label-row-major table and log q."""
    rng = np.random.default_rng(seed)
    w, n_tasks = int(rng.choice([1, 7, 300])), int(rng.choice([5, 500]))
    k = np.minimum(rng.integers(1, 8, n_tasks), w)
    task = np.repeat(np.arange(n_tasks), k)
    worker = np.concatenate([np.sort(rng.choice(w, kk, replace=False)) for kk in k])
    codes = held_codes("unused", task, worker, rng.integers(0, m, task.size), n_tasks, m, w)
    log_pi_t = np.ascontiguousarray(np.log(rng.dirichlet(np.ones(m), size=(w, m))).transpose(1, 0, 2).reshape(m, -1))
    return codes, label_row_major(log_pi_t), np.log(rng.dirichlet(np.ones(m)))


@pytest.mark.parametrize("seed", range(8))
def test_the_passes_give_the_same_bits_with_the_rows_asked_ahead(seed: int) -> None:
    """Past ``fused_em.NEAR`` floats of table the sweep prefetches the rows of the labels ``AHEAD`` on: a hint only.
    The same labels over a small table (no hint) and spread over a large one (the hint on every label) give the same
    counts, class sums, posteriors and log-likelihood, bit for bit (two and three classes, both models, the
    initialising pass, the consensus E-step); the large table's other rows are left at zero."""
    m = 2 if seed < 6 else 3
    codes, tab, log_q = _case(seed) if m == 2 else _multiclass(seed, m)
    w = tab.size // (m * m)
    wide_codes, wide, row = _spread(codes, tab, m, seed)
    big = wide.size // (m * m)
    assert wide.size > fused_em.NEAR >= tab.size
    for one_coin in (False, True):
        for init in (True, False):
            per = 1 if one_coin else m * m
            small_tab, wide_tab = (np.zeros(0), np.zeros(0)) if init else (tab, wide)
            with np.errstate(invalid="ignore"):
                a = em_sums(codes, EMShared(small_tab, log_q, one_coin, w))
                b = em_sums(wide_codes, EMShared(wide_tab, log_q, one_coin, big))
            assert _same(np.float64(a.log_likelihood), np.float64(b.log_likelihood)), (one_coin, init)
            assert _same(a.class_sums, b.class_sums), (one_coin, init)
            spread = b.counts.reshape(-1, per)
            assert _same(spread[row].ravel(), a.counts), (one_coin, init)
            untouched = np.ones(spread.shape[0], bool)
            untouched[row] = False
            assert np.all(spread[untouched] == 0.0)
    with np.errstate(invalid="ignore"):
        small_post, small_ll = posteriors(codes, tab, log_q)
        wide_post, wide_ll = posteriors(wide_codes, wide, log_q)
    assert _same(np.float64(small_ll), np.float64(wide_ll)) and _same(small_post, wide_post)


@pytest.mark.parametrize("seed", range(6))
def test_a_paired_pass_is_the_plain_sweep(seed: int) -> None:
    """Two classes, the full model, a table past ``fused_em.NEAR`` floats: a worker's task runs on a paired table (a
    (worker, answer)'s log π pair and counts pair in one record, ``fused_em.paired_table``). Its counts, class sums
    and log-likelihood are the plain layout's sweep's on the same labels, bit for bit, over one bucket and over a
    group of two (each cell in label order), with the workers numbered by activity or not."""
    from crowdflow.skills.held import activity_order, by_activity, em_sums_group

    codes, tab, log_q = _case(seed)
    wide_codes, wide, _ = _spread(codes, tab, 2, seed)
    big = wide.size // 4
    assert fused_em.pairs_past_cache(2, False, wide.size) and not fused_em.pairs_past_cache(2, True, wide.size)
    none = np.empty(0, dtype=np.int64)
    counts, class_sums = np.zeros(wide.size), np.empty(2)
    with np.errstate(invalid="ignore"):
        lls = []
        for k in range(2):  # the bucket twice, the second adding to the first's counts
            lls.append(
                fused_em.fused_pass(
                    wide_codes.indptr,
                    wide_codes.code,
                    wide,
                    log_q,
                    none,
                    False,
                    counts,
                    class_sums,
                    np.empty(0),
                    np.empty((2, 0)),
                    add=k > 0,
                )
            )
            if k == 0:
                first = counts.copy()
        order = activity_order(np.bincount(wide_codes.worker_idx(), minlength=big))
        for held in (wide_codes, by_activity(wide_codes, order)):
            one = em_sums(held, EMShared(wide, log_q, False, big))
            two = em_sums_group([held, held], EMShared(wide, log_q, False, big))
            assert _same(np.float64(one.log_likelihood), np.float64(lls[0])) and _same(one.class_sums, class_sums)
            assert _same(two.counts, counts) and _same(two.class_sums, class_sums + class_sums)
            assert _same(one.counts, first) and first.any()


def test_the_family_has_ties_zeros_and_single_labels() -> None:
    """The family reaches the cases the sweep branches on, and cases where the vectorised and libm exponentials give
    other posteriors (checks that the tests above are not vacuous)."""
    ties = zeros = singles = impossible = differ = 0
    for seed in range(24):
        codes, tab, log_q = _case(seed)
        with np.errstate(invalid="ignore"):
            post, _ = posteriors(codes, tab, log_q)
            differ += int(not _same(_sweep(codes, tab, log_q, False, exact=True)[2], post.T))
        ties += int((post[:, 0] == post[:, 1]).sum())
        zeros += int(np.isneginf(tab).sum())
        singles += int((np.diff(codes.indptr) == 1).sum())
        impossible += int(np.isnan(post[:, 0]).sum())  # both classes −∞: the sweep's NaN branch
    assert ties > 50 and zeros > 50 and singles > 50 and impossible > 5 and differ > 5


def _crowd(seed: int, observed: int, ids: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Labels (task, worker, label as text) of a small crowd with ``observed`` classes seen, and gold for a third of
    the tasks (one gold task unlabelled by anyone, one with a label outside the classes)."""
    rng = np.random.default_rng(seed)
    n_workers, n_tasks = int(rng.choice([2, 5, 40])), int(rng.choice([20, 150]))
    names = {
        "plain": lambda i: f"t{i}",
        "numeric": lambda i: f"{i:03d}",  # numbers as text keep their zeros
        "unicode": lambda i: f"tâche {i}/ü",
    }[ids]
    classes = ["yes", "no", "maybe"][:observed]
    skill = rng.uniform(0.3, 0.95, n_workers)
    truth = rng.integers(0, len(classes), n_tasks)
    rows = []
    for t in range(n_tasks):
        k = int(min(n_workers, rng.choice([1, 2, 3, 4])))
        who = rng.choice(n_workers, k, replace=False)
        for j, w in enumerate(who):
            if k == 2 and t % 5 == 0:  # a two-label split: an exact tie for equal workers
                lab = int(truth[t]) if j == 0 else int((truth[t] + 1) % len(classes))
            else:
                lab = int(truth[t]) if rng.random() < skill[w] else int(rng.integers(0, len(classes)))
            rows.append((names(t), f"w {w}", classes[lab]))
    labels = pd.DataFrame(rows, columns=["task", "worker", "label"])
    gold_tasks = np.arange(0, n_tasks, 3)
    gold = pd.DataFrame({"task": [names(t) for t in gold_tasks], "label": [classes[truth[t]] for t in gold_tasks]})
    extra = pd.DataFrame({"task": ["nobody labelled this", names(1)], "label": [classes[0], "unheard of"]})
    return labels.sample(frac=1.0, random_state=seed).reset_index(drop=True), pd.concat([gold, extra])


CASES = [(0, 1, "plain"), (1, 2, "numeric"), (2, 2, "unicode"), (3, 3, "plain"), (4, 2, "plain"), (5, 3, "unicode")]


def _check_against_memory(part: Any, labels: pd.DataFrame, gold: pd.DataFrame, declared: list[str] | None) -> None:
    opts = SkillsOptions(method="ds", tie_break="smallest", ds_tol=DS_TOL, classes=declared)
    ref = fit_skills(labels, opts)
    got, want = part.result.skills, ref.skills
    assert got["worker"].tolist() == want["worker"].astype(str).tolist()
    np.testing.assert_allclose(got["accuracy"], want["accuracy"], rtol=0, atol=TOL)
    cons = pd.concat([pd.read_parquet(p) for p in part.consensus_parts]).sort_values("task").reset_index(drop=True)
    ref_cons = ref.consensus.sort_values("task").reset_index(drop=True)
    assert cons["task"].tolist() == ref_cons["task"].astype(str).tolist()
    assert cons["label"].tolist() == ref_cons["label"].astype(str).tolist()
    np.testing.assert_allclose(cons["confidence"], ref_cons["confidence"], rtol=0, atol=TOL)
    assert part.result.metadata["n_ties"] == ref.metadata["n_ties"]
    # the review of the buckets (each reads only its own gold rows) is the review of the whole consensus
    classes = declared or sorted(labels["label"].unique())
    whole = gold_metrics(ref_cons, gold, classes)
    assert part.gold["n_gold"] == whole.n_gold and part.gold["n_gold_label_unknown"] == whole.n_gold_label_unknown
    assert part.gold["accuracy"] == pytest.approx(whole.accuracy, abs=1e-12)
    review = review_skills(labels, ref_cons, gold)
    assert part.review.metrics == review.metrics
    want_workers = review.tables["gold_workers"].sort_values("worker").reset_index(drop=True)
    got_workers = part.review.tables["gold_workers"].sort_values("worker").reset_index(drop=True)
    pd.testing.assert_frame_equal(got_workers, want_workers, check_dtype=False)


def _fit(labels: pd.DataFrame, gold: pd.DataFrame, tmp: Path, executor: Any, declared: list[str] | None) -> Any:
    folder = tmp / "labels"
    folder.mkdir(parents=True, exist_ok=True)
    for k, rows in enumerate(np.array_split(np.arange(len(labels)), 3)):
        labels.iloc[rows].to_parquet(folder / f"part-{k}.parquet", index=False)
    opts = SkillsOptions(method="ds", tie_break="smallest", ds_tol=DS_TOL, classes=declared)
    return fit_skills_partitioned(folder, opts, out_folder=tmp / "out", executor=executor, n_buckets=3, truth=gold)


@pytest.mark.parametrize(("seed", "observed", "ids"), CASES)
def test_partitioned_fit_in_process_equals_the_in_memory_fit(
    seed: int, observed: int, ids: str, tmp_path: Path
) -> None:
    labels, gold = _crowd(seed, observed, ids)
    declared = ["yes", "no"] if observed == 1 else None  # one class seen of a declared pair: the binary kernels
    part = _fit(labels, gold, tmp_path, InlineMemory(), declared)
    _check_against_memory(part, labels, gold, declared)


@pytest.mark.parametrize(("seed", "observed", "ids"), CASES[:3])
def test_partitioned_fit_on_dask_equals_the_in_memory_fit(
    seed: int, observed: int, ids: str, tmp_path: Path, dask_map: Any
) -> None:
    labels, gold = _crowd(seed, observed, ids)
    declared = ["yes", "no"] if observed == 1 else None
    part = _fit(labels, gold, tmp_path, dask_map, declared)
    _check_against_memory(part, labels, gold, declared)


def _reference_bucket_truth(tasks: np.ndarray, truth: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """The former look-up: a pandas ``isin`` of the text of every gold task."""
    text = truth["task"].dropna().astype(str).to_numpy()
    has_gold = pd.Index(tasks.astype(str)).isin(text)
    named = truth["task"].notna().to_numpy()
    mine = np.zeros(len(truth), dtype=bool)
    mine[named] = pd.Index(truth["task"][named].astype(str).to_numpy()).isin(tasks.astype(str))
    return truth[mine], np.asarray(has_gold)


@pytest.mark.parametrize("kind", ["object", "str", "string[python]"])
@pytest.mark.parametrize("seed", range(6))
def test_bucket_truth_equals_a_text_isin(seed: int, kind: str) -> None:
    """Gold rows of a bucket: text tasks against gold ids given as text, numbers, with missing and repeated rows; the
    gold ids as Python objects or as a pandas string column (Arrow-backed, as read from Parquet, or Python-backed)."""
    rng = np.random.default_rng(seed)
    tasks = np.array([f"{i}" if i % 2 else f"t{i}" for i in rng.choice(400, 120, replace=False)], dtype=object)
    number = int if kind == "object" else str  # a string column holds numbers as their text
    ids: list[Any] = [number(i) if i % 3 == 0 else f"t{i}" for i in rng.integers(0, 600, 200)]
    ids[::17] = [None] * len(ids[::17])
    truth = pd.DataFrame({"task": pd.Series(ids, dtype=kind), "label": rng.choice(["a", "b"], len(ids))})
    truth = pd.concat([truth, truth.iloc[:9]], ignore_index=True)  # repeated gold rows keep their order
    got_rows, got_has = bucket_truth(tasks, truth)
    want_rows, want_has = _reference_bucket_truth(tasks, truth)
    pd.testing.assert_frame_equal(got_rows, want_rows)
    np.testing.assert_array_equal(got_has, want_has)
    assert got_has.any() and len(got_rows) < len(truth)


@pytest.mark.parametrize("m", [2, 3])
def test_a_workers_group_sums_its_buckets_as_one_pass(m: int) -> None:
    """``em_sums_group`` adds every bucket's label terms to one counts array: the bits of one pass over the group's
    buckets laid end to end (each cell in label order), the class sums each bucket's added in order; and within
    rounding of the per-bucket sums added (what the group returned before)."""
    from crowdflow.skills.held import EMShared, activity_order, by_activity, em_sums, em_sums_group

    rng = np.random.default_rng(m)
    w, group, tasks, workers, givens = 30, [], [], [], []
    for n_tasks in (50, 400, 7):  # a small bucket after a large one reads only its part of the scratch
        k = rng.integers(1, 6, n_tasks)
        task = np.repeat(np.arange(n_tasks), k)
        worker = np.concatenate([np.sort(rng.choice(w, kk, replace=False)) for kk in k])
        given = rng.integers(0, m, task.size)
        group.append(held_codes("unused", task, worker, given, n_tasks, m, w))
        tasks.append(task + sum(c.n_tasks for c in group[:-1]))
        workers.append(worker)
        givens.append(given)
    n_all = sum(c.n_tasks for c in group)
    whole = held_codes("unused", np.concatenate(tasks), np.concatenate(workers), np.concatenate(givens), n_all, m, w)
    pi = rng.dirichlet(np.ones(m), size=(w, m))
    tab = label_row_major(np.ascontiguousarray(np.log(pi).transpose(1, 0, 2).reshape(m, w * m)))
    for one_coin in (False, True):
        for table in (np.zeros(0), tab):
            shared = EMShared(table, np.log(rng.dirichlet(np.ones(m))), one_coin, w)
            alone = [em_sums(codes, shared) for codes in group]
            got = em_sums_group(group, shared)
            assert np.array_equal(got.counts, em_sums(whole, shared).counts)
            # workers numbered by activity: the same sums, bit for bit
            order = activity_order(np.bincount(np.concatenate(workers), minlength=w))
            ranked = em_sums_group([by_activity(c, order) for c in group], shared)
            assert np.array_equal(ranked.counts, got.counts) and np.array_equal(ranked.class_sums, got.class_sums)
            assert ranked.log_likelihood == got.log_likelihood
            counts, class_sums = alone[0].counts.copy(), alone[0].class_sums.copy()
            for s in alone[1:]:
                counts += s.counts
                class_sums += s.class_sums
            assert np.array_equal(got.class_sums, class_sums)
            np.testing.assert_allclose(got.counts, counts, rtol=1e-13, atol=1e-13)
            assert got.counts.any() and not np.array_equal(counts, np.zeros_like(counts))
            assert got.n_tasks == sum(s.n_tasks for s in alone)


@pytest.mark.parametrize("seed", range(6))
def test_codes_ranked_by_activity_give_the_same_bits(seed: int) -> None:
    """Workers numbered by decreasing activity (``by_activity``): the same workers, posteriors and EM sums, bit for
    bit, for both models and the initialising pass; the busiest worker gets rank 0."""
    from crowdflow.skills.held import EMShared, activity_order, by_activity, em_sums, em_sums_group, posteriors

    codes, tab, log_q = _case(seed)
    w = tab.size // 4
    n_i = np.bincount(codes.code // 2, minlength=w)
    order = activity_order(n_i)
    ranked = by_activity(codes, order)
    assert n_i[order[0]] == n_i.max() and np.all(np.diff(n_i[order]) <= 0)
    assert not np.array_equal(ranked.code, codes.code) or np.array_equal(order, np.arange(w))
    np.testing.assert_array_equal(ranked.worker_idx(), codes.worker_idx())
    np.testing.assert_array_equal(ranked.class_idx(), codes.class_idx())
    with np.errstate(invalid="ignore"):
        want_post, want_ll = posteriors(codes, tab, log_q)
        got_post, got_ll = posteriors(ranked, tab, log_q)
        assert _same(got_post, want_post) and _same(np.float64(got_ll), np.float64(want_ll))
        for one_coin in (False, True):
            for table in (np.zeros(0), tab):
                shared = EMShared(table, log_q, one_coin, w)
                want, got = em_sums(codes, shared), em_sums(ranked, shared)
                assert _same(got.counts, want.counts) and _same(got.class_sums, want.class_sums)
                assert _same(em_sums_group([ranked], shared).counts, want.counts)
    with pytest.raises(ValueError, match="already ranked"):
        by_activity(ranked, order)
    with pytest.raises(ValueError, match="one worker numbering"):
        em_sums_group([ranked, codes], EMShared(tab, log_q, False, w))
