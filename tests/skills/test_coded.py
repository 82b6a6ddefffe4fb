"""The compiled loops of the skills ingest (crowdflow/skills/coded.py) equal the numpy/pandas expressions they replace.

Family: text columns with empty, long (> 8 bytes, multiples of 8), non-ASCII and repeated values, string and
large_string, sliced arrays; keys with empty runs; tasks with one row and tasks with more rows than the insertion
sort handles (the mergesort branch); repeated (task, worker) pairs, whose input order a stable sort keeps.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from crowdflow.labels import task_major_order
from crowdflow.skills.coded import counting_order, local_codes, may_strip, task_worker_order, text_hashes


def _texts(rng: np.random.Generator, n: int) -> list[str]:
    pool = ["", "a", "abcdefgh", "abcdefghi", "x" * 16, "x" * 17, "日本語", "ä", "t000138140", "w 1", "a\x00"]
    pool += [f"t{i}" for i in rng.integers(0, 10**9, 50)]
    return [pool[i] for i in rng.integers(0, len(pool), n)]


@pytest.mark.parametrize("seed", range(6))
def test_text_hashes_are_pandas_hash_array(seed: int) -> None:
    rng = np.random.default_rng(seed)
    vals = _texts(rng, 400)
    want = pd.util.hash_array(np.array(vals, dtype=object))
    kind = pa.large_string() if seed % 2 else pa.string()
    np.testing.assert_array_equal(text_hashes(pa.array(vals, kind)), want)
    cut = int(rng.integers(1, 50))  # a slice starts at an offset into the buffers
    np.testing.assert_array_equal(text_hashes(pa.array(vals, kind).slice(cut)), want[cut:])
    chunked = pa.chunked_array([pa.array(vals[:cut], kind), pa.array(vals[cut:], kind)])
    np.testing.assert_array_equal(text_hashes(chunked), want)


def test_may_strip_flags_every_value_the_id_rule_changes() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        vals = [*_texts(rng, 5), str(rng.choice(["", " a", "a ", "\ta", "a\u00a0", "\u3000a", "b"]))]
        stripped = pd.Series(vals, dtype="string").str.strip()
        changes = bool(((stripped != pd.Series(vals, dtype="string")) | (stripped == "")).any())
        if changes:
            assert may_strip(pa.array(vals))
    assert not may_strip(pa.array(["a", "b c", None]))


@pytest.mark.parametrize("seed", range(5))
def test_counting_order_is_the_stable_argsort(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_keys = int(rng.choice([1, 3, 64]))
    key = rng.integers(0, max(n_keys // 2, 1), int(rng.integers(0, 3000)))  # some keys never occur
    order, bounds = counting_order(key.astype(np.int32), n_keys)
    np.testing.assert_array_equal(order, np.argsort(key, kind="stable"))
    np.testing.assert_array_equal(bounds, np.searchsorted(key[order], np.arange(n_keys + 1)))


@pytest.mark.parametrize("seed", range(6))
def test_task_worker_order_is_task_major_order(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_tasks, n_workers, n = int(rng.integers(1, 300)), int(rng.integers(1, 90)), int(rng.integers(0, 4000))
    task, worker = rng.integers(0, n_tasks, n), rng.integers(0, n_workers, n)
    if n > 100:
        task[: n // 3] = 0  # a task with more rows than the insertion sort takes, repeated workers in it
    got, got_key = task_worker_order(task, worker, n_tasks, n_workers)
    want, want_key = task_major_order(task, worker, n_workers)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got_key, want_key)


@pytest.mark.parametrize("seed", range(5))
def test_local_codes_are_each_runs_factorize(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_dict = int(rng.integers(1, 200))
    codes = rng.integers(0, n_dict, int(rng.integers(0, 5000)))
    cuts = np.sort(rng.integers(0, codes.size + 1, int(rng.integers(0, 8))))
    bounds = np.concatenate([[0], cuts, [codes.size]])
    local, used, ub = local_codes(codes.astype(np.int32), bounds, n_dict)
    for b in range(bounds.size - 1):
        seg = codes[bounds[b] : bounds[b + 1]]
        want_local, want_used = pd.factorize(seg)
        np.testing.assert_array_equal(local[bounds[b] : bounds[b + 1]], want_local)
        np.testing.assert_array_equal(used[ub[b] : ub[b + 1]], want_used)
