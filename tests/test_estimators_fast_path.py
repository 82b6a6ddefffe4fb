"""The estimators' fast path (issue #36): hash-free codes, the fused EM passes, every id kind.

- ``factorize_appearance`` gives ``pd.factorize(sort=False)``'s codes and distinct values (same dtype) on a family
  of columns: dense, offset, negative and sparse integers, int32/uint16, Arrow and object strings, categoricals,
  floats, booleans, mixed objects; ``first_seen_order`` is ``pd.unique`` of integer codes.
- ``classic_em`` (one pass per iteration over the answers grouped by task) equals a direct numpy transcription of
  Crowd-Kit's schedule (``np.add.at`` scatters, the bound term by term) to 1e-10, with the same iterations, on
  generated problems with gold, initial tables, one-coin, smoothing and the diagonal prior.
- ``DawidSkene`` fitted on the same answers under every id kind gives the same numbers, and the seeded tie-break
  draws by sorted task whatever the row order.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import crowdflow as cf
from crowdflow.frontdoor.factorize import factorize_appearance, first_seen_order
from crowdflow.skills.classic_em import classic_em, majority_shares


def _columns(seed: int) -> dict[str, pd.Series]:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    base = rng.integers(0, max(1, n // 3), n)
    words = np.array([f"id-{v}" for v in base], dtype=object)
    return {
        "dense": pd.Series(base),
        "offset": pd.Series(base + 10_000),
        "negative": pd.Series(base - n),
        "sparse": pd.Series(rng.choice(2**40, size=n // 3 + 1)[base % (n // 3 + 1)]),
        "huge": pd.Series(np.where(base % 2 == 0, np.int64(2**62), np.int64(-(2**62))) + base),
        "int32": pd.Series(base.astype(np.int32)),
        "uint16": pd.Series(base.astype(np.uint16)),
        "uint64_top": pd.Series(base.astype(np.uint64) + np.uint64(2**64 - 1024)),
        "object": pd.Series(words, dtype=object),
        "arrow": pd.Series(words, dtype="string[pyarrow]"),
        "categorical": pd.Series(words, dtype="category"),
        "float": pd.Series(base / 4.0),
        "bool": pd.Series(base % 2 == 0),
        "mixed": pd.Series([v if v % 3 else f"s{v}" for v in base], dtype=object),
    }


@pytest.mark.parametrize("seed", range(12))
def test_factorize_appearance_is_pandas_factorize(seed: int) -> None:
    for name, values in _columns(seed).items():
        codes, uniques = factorize_appearance(values)
        ref_codes, ref_uniques = pd.factorize(values, sort=False)
        np.testing.assert_array_equal(codes, ref_codes, err_msg=name)
        pd.testing.assert_index_equal(uniques, pd.Index(ref_uniques), obj=name)
        assert codes.dtype == np.int64
        codes_sorted = np.asarray(values.map(dict(zip(uniques, range(len(uniques)), strict=True))))
        np.testing.assert_array_equal(codes_sorted, codes, err_msg=name)


@pytest.mark.parametrize("seed", range(8))
def test_first_seen_order_is_pd_unique(seed: int) -> None:
    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 300))
    codes = rng.integers(0, size, int(rng.integers(0, 900)))
    np.testing.assert_array_equal(first_seen_order(codes, size), pd.unique(codes).astype(np.int64))


def _reference_em(
    task: np.ndarray, worker: np.ndarray, label: np.ndarray, n_t: int, n_w: int, m: int, **kw: object
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[float]]:
    """Crowd-Kit's schedule written out with numpy scatters (no incidence matrix, no fused pass)."""
    one_coin, n_iter, tol = bool(kw.get("one_coin")), int(kw.get("n_iter", 100)), float(kw.get("tol", 1e-5))  # type: ignore[arg-type]
    gold = kw.get("gold")
    alpha, beta = float(kw.get("smoothing", 0.0)), float(kw.get("prior", 0.0))  # type: ignore[arg-type]
    pairs = np.zeros((n_w, m), dtype=bool)
    pairs[worker, label] = True
    n_i = np.bincount(worker, minlength=n_w).astype(float)

    def pin(post: np.ndarray) -> np.ndarray:
        if gold is not None:
            g = np.asarray(gold)
            post[g >= 0] = 0.0
            post[np.flatnonzero(g >= 0), g[g >= 0]] = 1.0
        return post

    def m_step(post: np.ndarray) -> np.ndarray:
        if one_coin:
            hit = np.zeros(n_w)
            np.add.at(hit, worker, post[task, label])
            p = (hit + alpha) / (n_i + 2 * alpha)
            err = np.repeat(((1 - p) / (m - 1))[:, None, None], m, axis=1).repeat(m, axis=2)
            err[:, np.arange(m), np.arange(m)] = p[:, None]
            return np.clip(err, 1e-10, 1 - 1e-10)
        counts = np.zeros((n_w, m, m))
        np.add.at(counts, (worker, label), post[task])
        counts += alpha
        counts[:, np.arange(m), np.arange(m)] += beta
        counts = np.where(pairs[:, :, None], np.maximum(counts, 1e-10), 0.0)
        return counts / counts.sum(axis=1, keepdims=True)

    post = pin(majority_shares(task, label, n_t, m))
    q, err = post.mean(axis=0), m_step(post)
    history: list[float] = []
    loss = -np.inf
    for _ in range(n_iter):
        with np.errstate(divide="ignore"):
            log_err = np.log(err)
        evidence = np.zeros((n_t, m))
        np.add.at(evidence, task, log_err[worker, label])
        logit = evidence + np.log(np.maximum(q, 1e-10))
        post = np.exp(logit - logit.max(axis=1, keepdims=True))
        post = pin(post / post.sum(axis=1, keepdims=True))
        q, err = post.mean(axis=0), m_step(post)
        with np.errstate(divide="ignore"):
            log_err = np.log(err)
        cross = (post[task] * log_err[worker, label]).sum()
        prior = (post * np.log(np.maximum(q, 1e-10))).sum(axis=1) @ np.bincount(task, minlength=n_t)
        clipped = np.maximum(post, 1e-10)
        new = float((cross + prior - (clipped * np.log(clipped)).sum()) / task.size)
        history.append(new)
        if new - loss < tol:
            break
        loss = new
    return post, q, err, history


@pytest.mark.parametrize("seed", range(16))
def test_classic_em_is_the_schedule_written_out(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m, n_t, n_w = int(rng.integers(2, 6)), int(rng.integers(3, 150)), int(rng.integers(2, 25))
    n = int(rng.integers(n_t, 6 * n_t))
    task = np.concatenate([np.arange(n_t), rng.integers(0, n_t, n - n_t)])
    rng.shuffle(task)
    worker = rng.integers(0, n_w, n)
    acc, truth = rng.uniform(0.3, 0.95, n_w), rng.integers(0, m, n_t)
    label = np.where(rng.random(n) < acc[worker], truth[task], rng.integers(0, m, n))
    kw: dict[str, object] = {"one_coin": seed % 3 == 0, "n_iter": [1, 2, 7, 100][seed % 4], "tol": 1e-5}
    if seed % 2:
        gold = np.full(n_t, -1)
        gold[rng.random(n_t) < 0.2] = 0
        kw["gold"] = gold
    if seed % 5 == 1:
        kw["smoothing"] = 0.01
        if not kw["one_coin"]:
            kw["prior"] = 1.0
    got = classic_em(task, worker, label, n_t, n_w, m, **kw)  # type: ignore[arg-type]
    post, q, err, history = _reference_em(task, worker, label, n_t, n_w, m, **kw)
    assert len(got.loss_history) == len(history)
    np.testing.assert_allclose(got.loss_history, history, rtol=0, atol=1e-10)
    np.testing.assert_allclose(got.post, post, rtol=0, atol=1e-10)
    np.testing.assert_allclose(got.q, q, rtol=0, atol=1e-10)
    np.testing.assert_allclose(got.errors, err, rtol=0, atol=1e-10)


def _answers(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    m, n_t, n_w = int(rng.integers(2, 5)), int(rng.integers(20, 200)), int(rng.integers(3, 30))
    rows = [
        (t, w) for t in range(n_t) for w in rng.choice(n_w, size=int(rng.integers(1, min(n_w, 6) + 1)), replace=False)
    ]
    task, worker = np.array(rows).T
    acc, truth = rng.uniform(0.3, 0.95, n_w), rng.integers(0, m, n_t)
    label = np.where(rng.random(task.size) < acc[worker], truth[task], rng.integers(0, m, task.size))
    df = pd.DataFrame({"task": task, "worker": worker, "label": label})
    return df.sample(frac=1.0, random_state=seed).reset_index(drop=True)


def _kinds(df: pd.DataFrame, seed: int) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    t_sparse = rng.choice(2**40, size=df["task"].max() + 1, replace=False)
    w_sparse = rng.choice(2**40, size=df["worker"].max() + 1, replace=False)
    text = pd.DataFrame({c: df[c].map(lambda v, c=c: f"{c}-{v}") for c in ("task", "worker", "label")})
    return {
        "int": df,
        "sparse": df.assign(task=t_sparse[df["task"]], worker=w_sparse[df["worker"]]),
        "object": text.astype(object),
        "arrow": text.astype("string[pyarrow]"),
        "categorical": text.astype("category"),
    }


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kind", ["DawidSkene", "OneCoinDawidSkene"])
def test_every_id_kind_gives_the_same_fit(seed: int, kind: str) -> None:
    """Relabelling the ids (dense, sparse, text, Arrow, categorical) changes no number and no label's position."""
    frames = _kinds(_answers(seed), seed)
    fits = {name: getattr(cf, kind)(n_iter=30).fit(df) for name, df in frames.items()}
    ref = fits["int"]
    for name, fit in fits.items():
        np.testing.assert_allclose(fit.probas_.to_numpy(), ref.probas_.to_numpy(), rtol=0, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(fit.errors_.to_numpy(), ref.errors_.to_numpy(), rtol=0, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(fit.loss_history_, ref.loss_history_, rtol=0, atol=1e-12, err_msg=name)
        assert fit.probas_.index.name == "task" and len(fit.labels_) == len(ref.labels_)
        column = list(frames[name]["label"].drop_duplicates())
        assert list(fit.probas_.columns) == column, name  # labels in order of first appearance
        assert list(fit.probas_.index) == list(frames[name]["task"].drop_duplicates()), name


@pytest.mark.parametrize("seed", range(4))
def test_random_tie_break_draws_by_sorted_task(seed: int) -> None:
    """Two answers per task that disagree tie at the start; the seeded draw does not depend on the row order."""
    rng = np.random.default_rng(seed)
    n_t = 60
    first = rng.integers(0, 3, n_t)
    df = pd.DataFrame(
        {
            "task": np.repeat(rng.permutation(10 * n_t)[:n_t], 2),
            "worker": np.tile([0, 1], n_t),
            "label": np.ravel(np.column_stack([first, (first + 1) % 3])),
        }
    )
    shuffled = df.sample(frac=1.0, random_state=seed + 1).reset_index(drop=True)
    # the labels first appear in the same order in both (the draw is over (sorted task, label column))
    head = pd.DataFrame({"task": [-1, -1, -1], "worker": [2, 3, 4], "label": [0, 1, 2]})
    df, shuffled = pd.concat([head, df], ignore_index=True), pd.concat([head, shuffled], ignore_index=True)
    a = cf.DawidSkene(n_iter=0, tie_break="random", seed=seed).fit(df).labels_
    b = cf.DawidSkene(n_iter=0, tie_break="random", seed=seed).fit(shuffled).labels_
    pd.testing.assert_series_equal(a.sort_index(), b.sort_index())
    assert a.nunique() > 1  # the draw picked both sides of some ties
