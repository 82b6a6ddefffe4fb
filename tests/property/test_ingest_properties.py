"""Property tests of ingestion (issue #9, item 2a): random small tables through CSV and Parquet.

For any small labels / comparisons / agents table whose ids are arbitrary non-blank strings (unicode,
numeric-looking, quotes, commas, line breaks, duplicates) the reader returns the same table: ids stay
the exact strings, numbers the exact floats, row order kept. Arbitrary bytes in a file never crash
the reader with anything but an :class:`InputError`.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from crowdflow.contracts.errors import CrowdflowError, InputError
from crowdflow.contracts.tables import AGENTS, COMPARISONS, LABELS
from crowdflow.labels import canonical_label_text
from crowdflow.storage.io import read_table

# ids: anything printable that is not blank and carries no outer whitespace (the reader strips it by
# design: " 7" and "7" are the same id); numeric-looking strings are drawn on purpose, and must stay
# strings ("007" is not "7", "1.0" is not "1").
_NUMERIC_LOOKING = st.sampled_from(
    ["0", "007", "1", "1.0", "1e3", "-2", "+3", "0x1F", "NaN", "nan", "NA", "None", "inf"]
)
_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=6
).filter(lambda s: s == s.strip() and s.strip() != "")
IDS = st.one_of(_NUMERIC_LOOKING, _TEXT, st.integers(-5, 10**6).map(str))
FLOATS = st.floats(allow_nan=False, allow_infinity=False, width=64, min_value=-1e12, max_value=1e12)


def _write(df: pd.DataFrame, folder: Path, fmt: str) -> Path:
    if fmt in ("csv", "csv-crlf"):
        path = folder / "t.csv"
        # a bare CR inside a field is a line break to any CSV reader unless quoted: quote everything
        # (LF files), or let QUOTE_MINIMAL quote it because CR is part of the line terminator (CRLF files)
        if fmt == "csv":
            df.to_csv(path, index=False, quoting=csv.QUOTE_ALL)
        else:
            df.to_csv(path, index=False, lineterminator="\r\n")
    else:
        path = folder / "t.parquet"
        pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)
    return path


def _ids(df: pd.DataFrame, col: str) -> list[str]:
    values = df[col].tolist()
    assert all(isinstance(v, str) for v in values), f"{col}: non-string ids {values!r}"
    return values


@settings(max_examples=40)
@given(
    rows=st.lists(st.tuples(IDS, IDS, IDS), min_size=1, max_size=12),
    fmt=st.sampled_from(["csv", "csv-crlf", "parquet"]),
)
@example(rows=[("1", "01", "1.0")], fmt="csv")
@example(rows=[("a\nb", 'say "hi", ok', "é")], fmt="csv")
@example(rows=[("0", "0", "0\r0")], fmt="csv-crlf")  # found by hypothesis: a CR inside an id
def test_labels_round_trip(
    rows: list[tuple[str, str, str]], fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    df = pd.DataFrame(rows, columns=["task", "worker", "label"], dtype=object)
    path = _write(df, tmp_path_factory.mktemp("labels"), fmt)
    t = read_table(path, LABELS)
    assert t.n_rows == len(rows) and t.format == ("parquet" if fmt == "parquet" else "csv")
    for col in ("task", "worker"):  # ids keep their text: '01' and '1' are two workers
        assert _ids(t.df, col) == df[col].tolist()
    # labels too, except that a number is one class however it is written ('1.0' is '1': issue #18)
    want = canonical_label_text(pd.Series([v.strip() or None for v in df["label"]], dtype="string"))
    assert t.df["label"].tolist() == want.tolist()


@settings(max_examples=40)
@given(
    rows=st.lists(st.tuples(IDS, IDS, IDS, FLOATS), min_size=1, max_size=12),
    fmt=st.sampled_from(["csv", "csv-crlf", "parquet"]),
    aliases=st.booleans(),
)
def test_comparisons_round_trip(
    rows: list[tuple[str, str, str, float]], fmt: str, aliases: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    names = ["worker", "left", "right", "outcome"] if aliases else ["annotator", "item_a", "item_b", "outcome"]
    df = pd.DataFrame(rows, columns=names).astype(dict.fromkeys(names[:3], object))
    path = _write(df, tmp_path_factory.mktemp("cmp"), fmt)
    t = read_table(path, COMPARISONS)
    for canonical, given_name in zip(["annotator", "item_a", "item_b"], names[:3], strict=True):
        assert _ids(t.df, canonical) == df[given_name].tolist()
    assert t.df["outcome"].dtype == np.float64
    np.testing.assert_array_equal(t.df["outcome"].to_numpy(), df["outcome"].to_numpy(dtype=np.float64))


@settings(max_examples=30)
@given(
    rows=st.lists(st.tuples(IDS, FLOATS, FLOATS, st.integers(-(10**9), 10**9)), min_size=1, max_size=10),
    fmt=st.sampled_from(["csv", "csv-crlf", "parquet"]),
)
def test_agents_round_trip(
    rows: list[tuple[str, float, float, int]], fmt: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    df = pd.DataFrame(rows, columns=["agent", "y", "x1", "x2"]).astype({"agent": object})
    path = _write(df, tmp_path_factory.mktemp("agents"), fmt)
    t = read_table(path, AGENTS)
    assert _ids(t.df, "agent") == df["agent"].tolist()
    np.testing.assert_array_equal(t.df["y"].to_numpy(), df["y"].to_numpy())
    for c in ("x1", "x2"):  # feature columns: numeric, exact
        np.testing.assert_array_equal(t.df[c].to_numpy(dtype=np.float64), df[c].to_numpy(dtype=np.float64))


@settings(max_examples=30)
@given(
    ids=st.lists(st.integers(-(10**6), 10**6), min_size=1, max_size=10),
    as_float=st.booleans(),
)
def test_numeric_parquet_ids_become_their_csv_spelling(
    ids: list[int], as_float: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Integer (or integral float) id columns in Parquet read as the strings a CSV would hold: 3.0 -> "3"."""
    col = pd.Series(ids, dtype=np.float64 if as_float else np.int64)
    df = pd.DataFrame({"task": col, "worker": col, "label": col})
    path = _write(df, tmp_path_factory.mktemp("num"), "parquet")
    t = read_table(path, LABELS)
    assert _ids(t.df, "task") == [str(i) for i in ids]


@settings(max_examples=50)
@given(
    data=st.one_of(
        st.binary(max_size=200),
        st.text(alphabet="ab,;\"'\n\r\t 1.-é\x00\ufeff", max_size=120).map(lambda s: s.encode("utf-8")),
        st.text(alphabet='ab,"\n1', max_size=80).map(lambda s: ("task,worker,label\n" + s).encode()),
    ),
    suffix=st.sampled_from([".csv", ".tsv", ".parquet"]),
    schema=st.sampled_from([LABELS, COMPARISONS, AGENTS]),
)
@example(data=b"PAR1\x00\x00PAR1", suffix=".parquet", schema=LABELS)
@example(data=b"task,worker,label\n\x00,a,b\n", suffix=".csv", schema=LABELS)
def test_garbage_never_crashes(data: bytes, suffix: str, schema, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Any bytes: either a table with string ids, or an InputError naming the file."""
    path = tmp_path_factory.mktemp("junk") / f"t{suffix}"
    path.write_bytes(data)
    try:
        t = read_table(path, schema)
    except CrowdflowError as exc:
        error: CrowdflowError | None = exc
    else:
        error = None
    if error is not None:
        assert isinstance(error, InputError)
        assert str(path) in str(error)
        return
    assert t.n_rows >= 1
    for col in schema.columns:
        if col.type == "id" and col.name in t.df.columns:
            assert all(isinstance(v, str) for v in t.df[col.name].dropna())
