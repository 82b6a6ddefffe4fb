"""The coded read of a labels file (crowdflow/skills/ingest.py) equals the row-by-row read it replaces (issue #36).

Family (:func:`_frame`): string or integer id columns (Parquet int64), 1–3 classes with numbers written several ways
(``1``, ``1.0``, `` 01``: one class), blanks around ids and blank ids (missing), nulls in each column, tasks repeated
across files, duplicate (task, worker) rows, 1–9 buckets, files of a few rows to 20,000 rows, and bad values planted
deep in a file (an id spelled as a missing value, a label outside the declared set). For each file the coded reader
and the row reader (:func:`crowdflow.skills.pieces.read_and_keep_rows`) must give the same rows dropped, the same
distinct workers and labels, the same pieces row for row, and the same Great Expectations report (counts, rows,
values, every expectation checked); a whole fit on two Dask worker processes equals the disk path's.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from crowdflow.contracts.tables import INPUTS
from crowdflow.executors import InlineMemory
from crowdflow.skills import SkillsOptions, fit_skills_partitioned
from crowdflow.skills.ingest import read_coded
from crowdflow.skills.pieces import KeptFile, read_and_keep, read_and_keep_rows
from crowdflow.storage.datasets import list_partitions
from schemas import validation
from schemas.validation import ValidationReport, validate_frame, validate_loaded


def _frame(seed: int, n: int) -> tuple[pd.DataFrame, list[str] | None]:
    rng = np.random.default_rng(seed)
    m = int(rng.choice([1, 2, 3]))
    task = rng.integers(0, max(n // 4, 1), n)
    worker = rng.integers(0, int(rng.choice([3, 40, 500])), n)
    label = rng.integers(0, m, n)
    spell = np.array(["{}", "{}.0", " 0{} "], dtype=object)
    labels = np.array([spell[rng.integers(0, 3)].format(v) for v in label], dtype=object)
    if rng.random() < 0.5:  # integer id columns, stored as Parquet int64
        df = pd.DataFrame({"task": task, "worker": worker, "label": labels})
    else:
        t = np.array([f"t{v}" for v in task], dtype=object)
        w = np.array([f"w{v}" for v in worker], dtype=object)
        if rng.random() < 0.5:  # blanks around ids (stripped) and blank ids (missing)
            at = rng.integers(0, n, max(n // 50, 1))
            t[at] = [f" {v}  " for v in t[at]]
            w[rng.integers(0, n, 2)] = "   "
        df = pd.DataFrame({"task": t, "worker": w, "label": labels})
    for col in ("task", "worker", "label"):
        if rng.random() < 0.4:
            df[col] = df[col].astype(object)
            df.loc[rng.integers(0, n, 3), col] = None
    return df, ["0", "1"] if m == 1 else None


def _reports_equal(a: ValidationReport | None, b: ValidationReport | None) -> None:
    assert a is not None and b is not None
    assert (a.n_rows, a.n_expectations, a.failures, a.checked) == (b.n_rows, b.n_expectations, b.failures, b.checked)


def _kept_equal(a: KeptFile, b: KeptFile) -> None:
    sa, sb = a.summary, b.summary
    assert (sa.partition, sa.n_rows, sa.n_dropped_null, sa.sha256) == (
        sb.partition,
        sb.n_rows,
        sb.n_dropped_null,
        sb.sha256,
    )
    assert sorted(sa.workers.to_pylist()) == sorted(sb.workers.to_pylist())
    assert sorted(sa.labels.to_pylist()) == sorted(sb.labels.to_pylist())
    assert a.buckets() == b.buckets()
    for pa_, pb_ in zip(a.pieces, b.pieces, strict=True):
        if pa_ is not None and pb_ is not None:
            assert pa_.text().equals(pb_.text())


@pytest.mark.parametrize("seed", [*range(4), *(pytest.param(s, marks=pytest.mark.slow) for s in range(4, 10))])
def test_coded_read_equals_the_row_read(seed: int, tmp_path: Path) -> None:
    rng = np.random.default_rng(seed)
    df, classes = _frame(seed, int(rng.choice([7, 300, 20_000])))
    df.to_parquet(tmp_path / "part-0.parquet", index=False, row_group_size=int(rng.choice([50, 10**6])))
    (part,) = list_partitions(tmp_path)
    n_buckets = int(rng.choice([1, 3, 9]))
    check = functools.partial(validate_loaded, kind="labels", allowed={"label": classes} if classes else None)
    assert read_coded(part, INPUTS["labels"], n_buckets, None, check) is not None  # not the fallback
    coded = read_and_keep(part, n_buckets, None, check)
    rows = read_and_keep_rows(part, n_buckets, None, check)
    _kept_equal(coded, rows)
    _reports_equal(coded.found, rows.found)


@pytest.mark.parametrize("seed", range(4))
def test_a_bad_value_deep_in_a_file_gets_the_row_readers_report(seed: int, tmp_path: Path) -> None:
    rng = np.random.default_rng(100 + seed)
    df, _ = _frame(100 + seed, 20_000)
    df = df.astype({"task": str, "worker": str}).fillna({"label": "1"})
    deep = int(rng.integers(15_000, 20_000))
    col, bad = [("task", "NULL"), ("worker", "#N/A"), ("label", "maybe"), ("task", "n/a")][seed]
    df.loc[deep, col] = bad
    df.to_parquet(tmp_path / "part-0.parquet", index=False)
    (part,) = list_partitions(tmp_path)
    allowed = {"label": sorted(set(df["label"].str.strip()) - {"maybe"} | {"0", "1", "2"})}
    check = functools.partial(validate_loaded, kind="labels", allowed=allowed)
    coded, rows = read_and_keep(part, 4, None, check), read_and_keep_rows(part, 4, None, check)
    assert coded.found is not None and not coded.found.success
    failed = [f for f in coded.found.failures if f.column == col]
    assert any((deep + 1) in f.rows for f in failed)
    _reports_equal(coded.found, rows.found)
    _kept_equal(coded, rows)


def test_float_ids_take_the_row_reader(tmp_path: Path) -> None:
    pd.DataFrame({"task": [1.0, 2.0, 2.0], "worker": ["a", "b", "a"], "label": ["x", "y", "x"]}).to_parquet(
        tmp_path / "f.parquet", index=False
    )
    (part,) = list_partitions(tmp_path)
    assert read_coded(part, INPUTS["labels"], 2) is None
    _kept_equal(read_and_keep(part, 2), read_and_keep_rows(part, 2))


@pytest.mark.parametrize("seed", [*range(3), *(pytest.param(s, marks=pytest.mark.slow) for s in range(3, 6))])
def test_great_expectations_on_distinct_values_gives_the_row_report(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A categorical frame is judged on its distinct values first; the report equals GX on the rows only."""
    rng = np.random.default_rng(seed)
    n = 5_000
    df = pd.DataFrame(
        {
            "task": [f"t{v}" for v in rng.integers(0, 900, n)],
            "worker": [f"w{v}" for v in rng.integers(0, 30, n)],
            "label": [f"c{v}" for v in rng.integers(0, 2, n)],
        }
    )
    allowed = {"label": ["c0", "c1"]} if seed % 2 else {}
    if seed >= 2:
        col, bad = [("task", None), ("worker", "NULL"), ("label", "c7"), ("task", "nan")][seed - 2]
        df.loc[rng.integers(n // 2, n, 3), col] = bad
    as_text = df.astype("string")
    as_cat = df.astype("category")
    a = validate_frame(as_cat, INPUTS["labels"], "f.parquet", allowed, whole_table=False)
    b = validate_frame(as_text, INPUTS["labels"], "f.parquet", allowed, whole_table=False)
    monkeypatch.setattr(validation, "_distinct_frame", lambda frame: None)  # GX on the rows alone: the reference
    ref = validate_frame(as_text, INPUTS["labels"], "f.parquet", allowed, whole_table=False)
    _reports_equal(a, ref)
    _reports_equal(b, ref)
    assert a.success == (seed < 2 or (seed == 4 and not allowed))


def _fit(folder: Path, out: Path, executor: Any, classes: list[str] | None) -> Any:
    opts = SkillsOptions(method="ds", tie_break="smallest", ds_tol=1e-12, duplicates="keep_last", classes=classes)
    return fit_skills_partitioned(folder, opts, out_folder=out, executor=executor, n_buckets=5)


@pytest.mark.parametrize("seed", range(2))
def test_coded_pieces_on_dask_workers_fit_as_the_disk_path(seed: int, tmp_path: Path, dask_map: Any) -> None:
    df, classes = _frame(200 + seed, 3_000)
    folder = tmp_path / "labels"
    folder.mkdir()
    for k, rows in enumerate(np.array_split(np.arange(len(df)), 3)):  # tasks repeated across the files
        df.iloc[rows].to_parquet(folder / f"part-{k}.parquet", index=False)
    disk = _fit(folder, tmp_path / "d", None, classes)
    for executor, name in ((InlineMemory(), "m"), (dask_map, "k")):
        kept = _fit(folder, tmp_path / name, executor, classes)
        pd.testing.assert_frame_equal(disk.result.skills, kept.result.skills, rtol=1e-9, atol=1e-9)
        for key in ("n_tasks", "n_labels", "n_duplicates_dropped"):
            assert disk.result.metadata[key] == kept.result.metadata[key]
        a = pd.concat([pd.read_parquet(p) for p in disk.consensus_parts]).sort_values("task", ignore_index=True)
        b = pd.concat([pd.read_parquet(p) for p in kept.consensus_parts]).sort_values("task", ignore_index=True)
        assert a["label"].tolist() == b["label"].tolist() and a["n_labels"].tolist() == b["n_labels"].tolist()


def test_a_dictionary_with_repeated_or_missing_values_is_encoded_again() -> None:
    """A file's own dictionary may repeat a value or hold a missing one (Arrow allows both): the codes then follow the
    values, as a plain column's would."""
    import pyarrow as pa

    from crowdflow.skills.ingest import _column_codes

    column = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, None, 1, 3]), pa.array(["a", "a", None, "b"]))
    codes, values = _column_codes(column)
    assert values.to_pylist() == ["a", "b"]
    np.testing.assert_array_equal(codes, [0, 0, -1, -1, 0, 1])


@pytest.mark.parametrize("seed", range(12))
def test_a_chunked_dictionary_column_gets_codes_into_distinct_values(seed: int) -> None:
    """A column read in chunks, each with its own dictionary (shared by consecutive chunks, repeated values, unused
    values, missing rows, empty chunks): every row's code points at its text (-1 where missing), the values are
    distinct, and they come in the order Arrow's unification of the chunks gives."""
    import pyarrow as pa

    from crowdflow.skills.ingest import _column_codes

    rng = np.random.default_rng(seed)
    pool = [f"w{i}" for i in range(int(rng.choice([1, 5, 60])))]
    chunks: list[pa.DictionaryArray] = []
    dictionary = None
    for _ in range(int(rng.integers(1, 7))):
        if dictionary is None or rng.random() < 0.6:  # else the previous chunk's dictionary again
            size = int(rng.integers(0, 2 * len(pool) + 1))
            dictionary = pa.array(list(rng.choice(pool, size)) if size else [], pa.string())
        n = int(rng.choice([0, 1, 40]))
        idx = rng.integers(0, max(len(dictionary), 1), n).astype(object) if len(dictionary) else np.full(n, None)
        idx[rng.random(n) < 0.1] = None
        chunks.append(pa.DictionaryArray.from_arrays(pa.array(list(idx), pa.int32()), dictionary))
    column = pa.chunked_array(chunks, pa.dictionary(pa.int32(), pa.string()))
    codes, values = _column_codes(column)
    text = [v.as_py() for c in chunks for v in c]
    got = [values[int(k)].as_py() if k >= 0 else None for k in codes]
    assert got == text and codes.dtype == np.int32
    assert len(set(values.to_pylist())) == len(values)
    want = pa.chunked_array([pa.array([v.as_py() for v in c.dictionary], pa.string()) for c in chunks], pa.string())
    first = list(dict.fromkeys(want.to_pylist()))  # first appearance over the chunks' dictionaries
    assert values.to_pylist() == first
