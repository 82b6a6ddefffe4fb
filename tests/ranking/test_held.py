"""Partitioned ranking from held rows (issue #36): encoded once, passes from memory, equal to the in-memory fits.

A generated family of folder shapes (files, sizes, empty files, ties, ±1 outcomes, weights, disconnected pieces,
numeric ids) is fitted three ways: rows held in this process (:class:`InlineMemory`), rows held by Dask workers
(persisted futures, :class:`tasks.runners.DaskMap`) and nothing held (:func:`inline_executor`, every pass encodes
again); each is compared with the in-memory fit, ``fit_hodgerank`` (least squares) and ``fit_trimmed`` (the trimmed
rule, one partition), for both outlier modes. The worst difference over the family is printed.
"""

from __future__ import annotations

import itertools
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from crowdflow.executors import InlineMemory, Recompute, fold, hold, inline_executor, on_held, release
from crowdflow.ranking import fit_hodgerank
from crowdflow.ranking.held import encode_block, held_histogram, held_sums
from crowdflow.ranking.partitioned import fit_ranking_partitioned, fit_trimmed

N_SHAPES = 12


def _shape(seed: int) -> tuple[list[pd.DataFrame], dict[str, Any]]:
    """One folder: 1–6 files of skewed sizes (some empty), items 4–120, mixed outcome kinds, optional weights."""
    rng = np.random.default_rng(1000 + seed)
    n = int(rng.integers(4, 120))
    m = int(rng.integers(30, 3000))
    pieces = 2 if seed % 5 == 4 else 1
    kind = ["graded", "ties", "pm1"][seed % 3]
    theta = rng.standard_normal(n) * 1.5
    group = np.arange(n) % pieces
    pop = rng.zipf(1.6, n).astype(float)  # skewed popularity
    a = rng.choice(n, m, p=pop / pop.sum())
    b = np.array([rng.choice(np.flatnonzero((group == group[x]) & (np.arange(n) != x))) for x in a])
    y = theta[a] - theta[b] + 0.5 * rng.standard_normal(m)
    bad = rng.random(m) < 0.06  # planted outliers
    y[bad] = -np.sign(theta[a] - theta[b])[bad] * (np.abs(y[bad]) + 3.0)
    if kind == "ties":
        y = np.round(y)
    elif kind == "pm1":
        y = np.where(y >= 0, 1.0, -1.0)
    ids = (lambda k: str(5000 - 3 * k)) if seed % 2 else (lambda k: f"it{k:x}")
    df = pd.DataFrame(
        {
            "annotator": [f"a{x}" for x in rng.integers(0, 15, m)],
            "item_a": [ids(x) for x in a],
            "item_b": [ids(x) for x in b],
            "outcome": y,
        }
    )
    if seed % 4 == 1:
        df["weight"] = rng.choice([0.5, 1.0, 2.5], m)
    k = int(rng.integers(1, 7))
    cuts = np.sort(rng.choice(np.arange(m + 1), k - 1)) if k > 1 else np.array([], dtype=int)  # repeats: empty files
    bounds = np.r_[0, cuts, m]
    parts = [df.iloc[lo:hi].reset_index(drop=True) for lo, hi in itertools.pairwise(bounds)]
    return parts, {"n": n, "m": m, "kind": kind, "pieces": pieces, "files": k}


def _read(part: pd.DataFrame) -> pd.DataFrame:
    return part


def _flag_rows(res: Any, parts: list[pd.DataFrame]) -> np.ndarray:
    offset = np.r_[0, np.cumsum([len(p) for p in parts])]
    flag = np.zeros(int(offset[-1]), dtype=bool)
    for f in res.row_files:
        rows = pd.read_parquet(f)
        flag[offset[rows["part"].to_numpy()] + rows["row_id"].to_numpy()] = rows["is_outlier"].to_numpy()
    return flag


def _dask_executor() -> Any:
    distributed = pytest.importorskip("distributed")
    from tasks.runners import DaskMap

    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0")
    return cluster, distributed.Client(cluster), DaskMap


@pytest.mark.parametrize(
    "seeds",
    [(0, 1, 2, 3, 5, 9), pytest.param(tuple(range(N_SHAPES)), marks=pytest.mark.slow)],
    ids=["six", "all"],
)  # six shapes (every outcome kind, seed 9 a disconnected folder) by default; all twelve in the slow tier
def test_held_fit_equals_in_memory_fits_on_a_family_of_folders(tmp_path: Path, seeds: tuple[int, ...]) -> None:
    cluster, client, dask_map = _dask_executor()
    worst = {"ls": 0.0, "trimmed": 0.0}
    disconnected = 0
    with cluster, client:
        executors = {"memory": InlineMemory(), "dask": dask_map(client), "recompute": inline_executor}
        for seed in seeds:
            parts, info = _shape(seed)
            df = pd.concat(parts, ignore_index=True)
            ref_ls = fit_hodgerank(df, allow_disconnected=True)
            ref_tr = fit_trimmed(df, allow_disconnected=True, write_rows="all", out_dir=str(tmp_path / f"m{seed}"))
            flags_ref = _flag_rows(ref_tr, [df])
            for name, ex in executors.items():
                ls = fit_ranking_partitioned(parts, _read, ex, outliers="none", allow_disconnected=True)
                assert ls.ranking["item"].tolist() == ref_ls.ranking["item"].tolist(), (seed, name)
                np.testing.assert_array_equal(ls.ranking["rank"], ref_ls.ranking["rank"])
                np.testing.assert_array_equal(ls.ranking["n_comparisons"], ref_ls.ranking["n_comparisons"])
                d = float(np.max(np.abs(ls.ranking["score"].to_numpy() - ref_ls.ranking["score"].to_numpy())))
                worst["ls"] = max(worst["ls"], d)
                assert d <= 1e-9, (seed, name, info)
                assert ls.graph.n_components == ref_ls.graph.n_components
                disconnected += ls.graph.n_components > 1
                assert ls.passes == 2 and ls.params["held_rows"] == ("recomputed" if name == "recompute" else "memory")
                out = str(tmp_path / f"{name}{seed}")
                tr = fit_ranking_partitioned(parts, _read, ex, None, out, outliers="trimmed", allow_disconnected=True)
                np.testing.assert_array_equal(_flag_rows(tr, parts), flags_ref, err_msg=f"{seed} {name} {info}")
                assert tr.n_outliers == ref_tr.n_outliers
                assert tr.sigma == pytest.approx(ref_tr.sigma, rel=1e-10, abs=1e-12)
                d = float(np.max(np.abs(tr.ranking["score"].to_numpy() - ref_tr.ranking["score"].to_numpy())))
                worst["trimmed"] = max(worst["trimmed"], d)
                assert d <= 1e-9, (seed, name, info)
                assert tr.params["trim_iterations"] == ref_tr.params["trim_iterations"]
    assert disconnected > 0  # the family has disconnected folders
    print(f"worst |Δscore| over {len(seeds)} folders × 3 executors: {worst}")


def test_held_rows_are_compact_and_their_sums_are_the_row_sums() -> None:
    rng = np.random.default_rng(3)
    n, m = 30, 5000
    i, j = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = i != j
    u, v = np.minimum(i, j)[keep], np.maximum(i, j)[keep]
    yo = rng.integers(-2, 3, u.size).astype(float)
    w = np.ones(u.size)
    held = encode_block(u, v, yo, w, n)
    assert held.yo.dtype == np.int8 and held.w.size == 0 and held.pu.dtype == np.int32
    assert held.nbytes < u.size * 2 + 16 * n * n
    keys, cnt, acc, changed, capped = held_sums(held, None, None)
    ref_keys, inv = np.unique(u * n + v, return_inverse=True)
    np.testing.assert_array_equal(keys, ref_keys)
    np.testing.assert_array_equal(cnt[:, 0], np.bincount(inv))
    np.testing.assert_array_equal(acc[:, 1], np.bincount(inv, weights=yo))
    np.testing.assert_array_equal(cnt[:, 1], np.bincount(inv, weights=yo == 0).astype(int))
    assert changed == -1 and np.isnan(capped)
    theta = rng.standard_normal(n)
    r = yo - (theta[u] - theta[v])
    kept_keys, kcnt, _, changed, capped = held_sums(held, (theta, 1.0, 0), (theta * 0.5, 1.0, 0))
    np.testing.assert_array_equal(kcnt[:, 0], np.bincount(inv[np.abs(r) <= 1.0], minlength=ref_keys.size)[
        np.isin(ref_keys, kept_keys)
    ])  # fmt: skip
    r_prev = yo - 0.5 * (theta[u] - theta[v])
    assert changed == int(np.count_nonzero((np.abs(r) <= 1.0) != (np.abs(r_prev) <= 1.0)))
    assert capped == pytest.approx(float(np.sum(np.minimum(r * r, 1.0))), rel=1e-12)
    idx, wt = held_histogram(held, theta, 0.5)
    assert wt.sum() == pytest.approx(u.size) and idx.dtype == np.int32
    graded = encode_block(u, v, rng.standard_normal(u.size), rng.uniform(0.5, 2, u.size), n)
    assert graded.yo.dtype == np.float64 and graded.w.size == u.size


def _square(x: int) -> int:
    return x * x


def _plus_one(x: int) -> int:
    return x + 1


def test_hold_keeps_values_where_the_executor_can_and_recomputes_otherwise() -> None:
    mem = InlineMemory()
    held = hold(mem, _square, [1, 2, 3])
    assert held == [1, 4, 9]
    assert mem(on_held(_plus_one), held) == [2, 5, 10]
    assert fold(mem, on_held(_plus_one), held, lambda a, r: a + r, 0) == 17
    lazy = hold(inline_executor, _square, [1, 2, 3])
    assert all(isinstance(h, Recompute) for h in lazy)
    assert inline_executor(on_held(_plus_one), lazy) == [2, 5, 10]
    release(inline_executor, lazy)
    assert lazy == []
    cluster, client, dask_map = _dask_executor()
    with cluster, client:
        ex = dask_map(client)
        futures = hold(ex, _square, [1, 2, 3])
        assert ex(on_held(_plus_one), futures) == [2, 5, 10]
        assert fold(ex, on_held(_plus_one), futures, lambda a, r: [*a, r], [], ordered=True) == [2, 5, 10]
        release(ex, futures)
        with pytest.raises(ZeroDivisionError):
            hold(ex, _inverse, [1, 0])


def _inverse(x: int) -> float:
    return 1 / x


def test_skipped_triangle_diagnostics_say_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the partitioned fit's triangle cap the triangle columns are missing with the cap as their reason."""
    import crowdflow.ranking.partitioned as part

    parts, _ = _shape(0)
    monkeypatch.setattr(part, "MAX_TRIANGLE_CANDIDATES", 0)
    res = fit_ranking_partitioned(parts, _read, InlineMemory(), outliers="none", allow_disconnected=True)
    d = res.diagnostics
    assert d["n_triangles"].isna().all()
    assert (
        d["missing_reason"].str.contains("triangles not enumerated, more than 0 candidate triples", regex=False).all()
    )


def test_copy_reader_fast_path_gives_the_pandas_path_results(tmp_path: Path) -> None:
    """The pipeline's copy reader takes the Arrow path (ids dictionary-encoded, checks in Arrow); any other reader of
    the same files the pandas one. Rankings, annotator counts and the written rows must be equal, both modes (3 generated
    folders); a file
    the contract refuses (a self comparison) must fall back to the pandas path and its error."""
    from crowdflow.ranking.passes import _arrow_part
    from crowdflow.storage.datasets import read_copy

    for seed in (0, 2, 4):  # graded, ±1, ties on two pieces
        parts, info = _shape(seed)
        files = []
        for k, p in enumerate(parts):
            f = tmp_path / f"s{seed}-{k}.parquet"
            p.to_parquet(f, index=False)
            files.append(str(f))
        assert _arrow_part(read_copy, files[0]) is not None and _arrow_part(pd.read_parquet, files[0]) is None
        for outliers in ("none", "trimmed"):
            got = {}
            for name, read in (("pandas", pd.read_parquet), ("arrow", read_copy)):
                out = str(tmp_path / f"o{seed}-{outliers}-{name}")
                got[name] = fit_ranking_partitioned(
                    files, read, InlineMemory(), None, out, outliers=outliers, allow_disconnected=True
                )
            a, b = got["pandas"], got["arrow"]
            pd.testing.assert_frame_equal(a.ranking, b.ranking)
            pd.testing.assert_frame_equal(a.annotators, b.annotators)
            assert a.n_outliers == b.n_outliers and a.passes == b.passes, (seed, info)
            assert len(a.row_files) == len(b.row_files) > 0
            for fa, fb in zip(a.row_files, b.row_files, strict=True):
                pd.testing.assert_frame_equal(pd.read_parquet(fa), pd.read_parquet(fb))
    bad = pd.DataFrame({"annotator": ["a", "b"], "item_a": ["x", "y"], "item_b": ["y", "y"], "outcome": [1.0, 2.0]})
    f = tmp_path / "bad.parquet"
    bad.to_parquet(f, index=False)
    assert _arrow_part(read_copy, str(f)) is None
    with pytest.raises(ValueError, match="item"):
        fit_ranking_partitioned([str(f)], read_copy, InlineMemory(), None, None)


def test_rows_kept_by_the_first_read_give_the_fit_of_a_second_read(tmp_path: Path) -> None:
    """The pipeline's fused read (issue #36 part 3): each file is read once, validated, copied, and its rows kept in
    memory (``read_check_copy(encode=keep_local)`` held by the executor); the fit then builds its blocks from what was
    kept and skips the scan. On the family of folders (both outlier modes, in this process and on Dask workers) and
    a folder with numeric ids (Dask on the first folder only, for time), every table must equal the fit that reads the copies again."""
    from crowdflow.contracts.tables import INPUTS
    from crowdflow.ranking.passes import LocalRows, keep_local
    from crowdflow.storage.datasets import CopiedPartition, list_partitions, read_check_copy, read_copy

    def folder(parts: list[pd.DataFrame], name: str) -> list[Any]:
        src = tmp_path / name / "src"
        src.mkdir(parents=True)
        for k, p in enumerate(parts):
            p.to_parquet(src / f"part-{k:03d}.parquet", index=False)
        return list_partitions(str(src), None)

    numeric = pd.DataFrame(  # numeric ids: the contract makes them strings, the kept path applies
        {
            "annotator": ["a", "b", "c", "a"],
            "item_a": [1, 2, 3, 3],
            "item_b": [2, 3, 1, 2],
            "outcome": [1.0, -2, 0.5, 1],
        }
    )
    cases = [_shape(seed)[0] for seed in range(1, N_SHAPES, 4)] + [[numeric.iloc[:2], numeric.iloc[2:]]]
    cluster, client, dask_map = _dask_executor()
    kept_somewhere = fallback = 0
    with cluster, client:
        for c, parts in enumerate(cases):
            listed = folder(parts, f"c{c}")
            for name, ex in (("memory", InlineMemory()), ("dask", dask_map(client)))[: 2 if c == 0 else 1]:
                copy = partial(read_check_copy, schema=INPUTS["comparisons"], folder=str(tmp_path / f"copies{c}{name}"))
                handles = hold(ex, partial(copy, encode=keep_local), listed)
                light = ex(on_held(CopiedPartition.light), handles)
                kept = ex(on_held(_kept_rows), handles)
                kept_somewhere += sum(isinstance(k, LocalRows) for k in kept)
                fallback += sum(k is None for k in kept)
                assert all(cp.kept is None for cp in light)
                copies = [cp.path for cp in light]
                scans = [cp.summary for cp in light]
                for outliers in ("none", "trimmed"):
                    out_a, out_b = (str(tmp_path / f"{x}{c}{name}{outliers}") for x in "ab")
                    again = fit_ranking_partitioned(copies, read_copy, ex, None, out_a, outliers=outliers,
                                                    allow_disconnected=True)  # fmt: skip
                    if outliers == "trimmed":  # the held handles are released by the fit that takes them
                        handles = hold(ex, partial(copy, encode=keep_local), listed)
                    fused = fit_ranking_partitioned(copies, read_copy, ex, None, out_b, outliers=outliers,
                                                    allow_disconnected=True, held=handles, scans=scans)  # fmt: skip
                    pd.testing.assert_frame_equal(again.ranking, fused.ranking, check_exact=True)
                    pd.testing.assert_frame_equal(again.diagnostics, fused.diagnostics, check_exact=True)
                    assert again.n_outliers == fused.n_outliers and again.passes == fused.passes, (c, name)
                    for fa, fb in zip(again.row_files, fused.row_files, strict=True):
                        pd.testing.assert_frame_equal(pd.read_parquet(fa), pd.read_parquet(fb), check_exact=True)
    assert kept_somewhere > 0 and fallback == 0
    # a file the Arrow checks refuse (a self comparison) keeps nothing: the fit reads its copy and names the error
    bad = pd.DataFrame({"annotator": ["a", "b"], "item_a": ["x", "y"], "item_b": ["y", "y"], "outcome": [1.0, 2.0]})
    listed = folder([bad], "bad")
    copy = partial(
        read_check_copy, schema=INPUTS["comparisons"], folder=str(tmp_path / "copies-bad"), encode=keep_local
    )
    ex = InlineMemory()
    handles = hold(ex, copy, listed)
    assert handles[0].kept is None and handles[0].summary is None
    with pytest.raises(ValueError, match="item"):
        fit_ranking_partitioned([handles[0].path], read_copy, ex, None, None, held=handles, scans=[None])


def _kept_rows(cp: Any) -> Any:
    return cp.kept


def test_histogram_bins_by_comparison_are_the_log10_bins_for_every_double() -> None:
    """The passes bin ``|r|/scale`` by a table slot and one comparison with the bin edges (no ``log10`` per row). The
    bin must be the definition's (``⌊1000·log10(z/10⁻⁶)⌋ + 1``, clipped) at every edge, one and two doubles either
    side of it, the ends (0, subnormals, 10⁻⁶, 10⁶, huge, inf) and 2·10⁶ values spread over 16 decades; and a
    histogram pass must equal the bins counted row by row."""
    from crowdflow.ranking.held import SKETCH_BINS, _bin_of, _bins_log10_kernel, bin_tables

    edge, _, _ = bin_tables()
    inner = edge[1:-1]
    assert inner.size == SKETCH_BINS - 1 and np.all(np.diff(inner) > 0)
    near = [inner, np.nextafter(inner, 0), np.nextafter(inner, np.inf)]
    near += [np.nextafter(near[1], 0), np.nextafter(near[2], np.inf)]
    ends = np.array([0.0, 5e-324, 1e-300, 1e-7, 1e-6, 1.0, 1e6, 1e7, 1e300, np.inf])
    rng = np.random.default_rng(7)
    spread = np.abs(rng.standard_normal(2 * 10**6)) * 10.0 ** rng.uniform(-9, 9, 2 * 10**6)
    z = np.concatenate([*near, ends, spread])
    got, ref = _bin_of(z), _bins_log10_kernel(z)
    assert int(np.count_nonzero(got != ref)) == 0
    assert got.min() == 0 and got.max() == SKETCH_BINS - 1
    # one block's histogram pass against the row-by-row bins (unit and real weights)
    n, m = 40, 20_000
    i, j = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = i != j
    u, v = np.minimum(i, j)[keep], np.maximum(i, j)[keep]
    yo = rng.standard_normal(u.size) * 10.0 ** rng.uniform(-7, 3, u.size)
    theta = rng.standard_normal(n)
    for w in (np.ones(u.size), rng.uniform(0.5, 2.0, u.size)):
        held = encode_block(u, v, yo, w, n)
        idx, wt = held_histogram(held, theta, 0.37)
        rows = np.repeat(np.arange(held.pu.size), np.diff(held.ptr))
        zz = np.abs(held.yo - (theta[held.pu[rows]] - theta[held.pv[rows]])) / 0.37
        ref_h = np.bincount(_bins_log10_kernel(zz), weights=held.w if held.w.size else None, minlength=SKETCH_BINS)
        np.testing.assert_array_equal(idx, np.flatnonzero(ref_h))
        np.testing.assert_allclose(wt, ref_h[idx], rtol=1e-12)


def test_smallest_levels_are_the_sorted_distinct_abs_values() -> None:
    """The scan's outcome levels (one pass) equal ``np.unique(np.abs(y))[:k]`` on a family: empty, graded, small
    integers (also as int8), ±1 with signed zeros, rounded values with many repeats; k = 1, 2, 3, 5."""
    from crowdflow.ranking.held import smallest_levels

    rng = np.random.default_rng(5)
    for t in range(400):
        m = int(rng.integers(0, 80))
        kind = t % 4
        if kind == 0:
            y = rng.standard_normal(m)
        elif kind == 1:
            y = rng.integers(-3, 4, m).astype(float)
        elif kind == 2:
            y = rng.choice([-1.0, 1.0, 0.0, -0.0], m)
        else:
            y = np.round(rng.standard_normal(m), 1)
        for arr in (y, y.astype(np.int8)) if kind == 1 else (y,):
            for k in (1, 2, 3, 5):
                np.testing.assert_array_equal(smallest_levels(arr, k), np.unique(np.abs(y))[:k])


def test_add_at_is_numpys_fancy_index_add_bit_for_bit() -> None:
    """The trimming step's fold adds each block's per-pair sums at the block's global positions with a compiled loop:
    it must equal ``acc[:, at] += r`` exactly, for blocks holding some, none or all of the pairs."""
    from crowdflow.ranking.held import add_at

    rng = np.random.default_rng(9)
    for size, share in ((1, 1.0), (50, 0.3), (1000, 0.97), (1000, 1.0), (10, 0.0)):
        at = np.sort(rng.choice(size, int(share * size), replace=False))
        r = rng.standard_normal((3, at.size)) * 10.0 ** rng.uniform(-8, 8, (3, at.size))
        acc = rng.standard_normal((3, size))
        ref = acc.copy()
        ref[:, at] += r
        add_at(acc, at, r)
        np.testing.assert_array_equal(acc, ref)


def test_a_step_of_only_the_changed_pairs_gives_the_full_steps_sums_bit_for_bit() -> None:
    """A trimming step that sends back only the pairs with a row whose kept status changed (``changed_only``): the
    previous step's arrays with those pairs replaced must equal the full step's arrays exactly, its counts
    must be the full step's, and the pairs it leaves out must be exactly those whose kept rows did not
    change; over outcome kinds (int8, float32, float64), weights and both rules, from a far and a near previous θ."""
    from crowdflow.ranking.held import held_kept

    rng = np.random.default_rng(11)
    worst = 0
    for case in range(12):
        n, m = int(rng.integers(3, 40)), int(rng.integers(1, 4000))
        i, j = rng.integers(0, n, m), rng.integers(0, n, m)
        ok = i != j
        u, v = np.minimum(i, j)[ok], np.maximum(i, j)[ok]
        theta = rng.standard_normal(n)
        d = theta[u] - theta[v]
        kind = case % 3
        if kind == 0:
            yo = np.sign(d + rng.standard_normal(u.size))  # ±1 (int8 held)
        elif kind == 1:
            yo = np.round(4 * (d + rng.standard_normal(u.size))) / 4  # float32 held
        else:
            yo = d + 0.5 * rng.standard_normal(u.size)
        w = rng.uniform(0.5, 2.0, u.size) if case % 4 == 3 else np.ones(u.size)
        held = encode_block(u, v, yo, w, n)
        rkind = 1 if kind == 0 and case % 2 else 0
        for spread in (0.3, 0.003):
            prev = (theta + spread * rng.standard_normal(n), 0.9, rkind)
            rule = (theta, 0.8 + spread, rkind)
            _, before, _, _ = held_kept(held, prev, None)
            none_idx, full, nk, ch = held_kept(held, rule, prev)
            idx, part, nk2, ch2 = held_kept(held, rule, prev, changed_only=True)
            assert none_idx is None and idx is not None
            assert (nk, ch) == (nk2, ch2)
            merged = before.copy()
            merged[:, idx] = part
            np.testing.assert_array_equal(merged, full)
            # left out: exactly the pairs none of whose rows changed status
            r_now = held.yo.astype(float) - np.repeat(theta[held.pu] - theta[held.pv], np.diff(held.ptr))
            dp = np.repeat(prev[0][held.pu] - prev[0][held.pv], np.diff(held.ptr))
            if rkind == 0:
                k_now, k_prev = np.abs(r_now) <= rule[1], np.abs(held.yo - dp) <= prev[1]
            else:
                dn = np.repeat(theta[held.pu] - theta[held.pv], np.diff(held.ptr))
                k_now = ~((held.yo * dn < 0) & (np.abs(dn) >= rule[1]))
                k_prev = ~((held.yo * dp < 0) & (np.abs(dp) >= prev[1]))
            pair = np.repeat(np.arange(held.pu.size), np.diff(held.ptr))
            moved = np.bincount(pair, weights=k_now != k_prev, minlength=held.pu.size) > 0
            np.testing.assert_array_equal(idx, np.flatnonzero(moved))
            assert ch == int(np.count_nonzero(k_now != k_prev)) and nk == int(np.count_nonzero(k_now))
            wr = held.w if held.w.size else np.ones(held.n_rows)
            ref = np.bincount(pair, weights=wr * k_now * held.yo, minlength=held.pu.size)
            np.testing.assert_allclose(full[1], ref, rtol=1e-12, atol=1e-12)
            worst = max(worst, idx.size)
    print(f"largest changed-pair answer: {worst} pairs")


def test_combine_of_blocks_on_the_same_pairs_is_the_general_combine_bit_for_bit() -> None:
    """``EdgeSums.combine`` adds parts on the same pairs element by element: the same bits as its general path
    (``numpy.bincount`` over the concatenated parts), which a part with one pair fewer takes."""
    from crowdflow.ranking.passes import EdgeSums

    rng = np.random.default_rng(5)
    key = np.sort(rng.choice(10_000, 800, replace=False)).astype(np.int64)

    def part(keys: np.ndarray) -> EdgeSums:
        k = keys.size
        y = rng.standard_normal((2, k)) * 10.0 ** rng.uniform(-6, 6, (2, k))
        return EdgeSums(
            keys, rng.integers(1, 50, k), rng.uniform(0.1, 9, k), rng.standard_normal(k) * 1e3,
            rng.uniform(0, 1e6, k), y.min(axis=0), y.max(axis=0), rng.uniform(0, 5, k), rng.uniform(0, 5, k),
            rng.integers(0, 3, k),
        )  # fmt: skip

    parts = [part(key) for _ in range(4)]
    fast = EdgeSums.combine(parts)
    # the general path: one pair of the last part moved to a key no other part has, then compared on the rest
    odd = part(np.r_[key[:-1], 20_000])
    slow = EdgeSums.combine([*parts[:3], EdgeSums(*(np.r_[getattr(parts[3], f)[:-1], getattr(odd, f)[-1]] for f in (
        "key", "count", "w", "wy", "wy2", "ymin", "ymax", "wpos", "wneg", "ties")))])  # fmt: skip
    same = key.size - 1  # the pairs every part of both combines has
    np.testing.assert_array_equal(slow.key[:same], key[:same])
    for f in ("count", "w", "wy", "wy2", "ymin", "ymax", "wpos", "wneg", "ties"):
        np.testing.assert_array_equal(getattr(fast, f)[:same], getattr(slow, f)[:same], err_msg=f)
        assert getattr(fast, f).dtype == getattr(slow, f).dtype, f
    np.testing.assert_array_equal(fast.key, key)
