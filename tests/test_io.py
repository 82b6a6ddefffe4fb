"""Readers (CSV, Parquet file, Parquet folder, column mapping, Crowd-Kit names) and the atomic run writer."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crowdflow.contracts.errors import InputError
from crowdflow.contracts.tables import COMPARISONS, LABELS, OUTPUTS
from crowdflow.storage.io import fingerprint, read_table
from crowdflow.storage.run_store import write_run


def _write(p: Path, text: str | bytes) -> Path:
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return p


def test_csv_ids_stay_strings(tmp_path: Path) -> None:
    p = _write(tmp_path / "l.csv", "task,worker,label\n007,01,1\n7,1,0\n")
    t = read_table(p, LABELS)
    assert t.df["task"].tolist() == ["007", "7"]  # no int conversion: "007" and "7" stay distinct
    assert t.df["worker"].tolist() == ["01", "1"]
    assert t.sha256 == hashlib.sha256(p.read_bytes()).hexdigest() == fingerprint(p)
    assert t.n_rows == 2 and t.format == "csv"


def test_column_mapping_and_bom_crlf(tmp_path: Path) -> None:
    p = _write(tmp_path / "l.csv", b'\xef\xbb\xbfitem,annot,answer\r\nq1,w1,cat\r\nq1,w2,"dog"\r\n')
    t = read_table(p, LABELS, {"task": "item", "worker": "annot", "label": "answer"})
    assert list(t.df.columns) == ["task", "worker", "label"]
    assert t.df["label"].tolist() == ["cat", "dog"]
    assert t.renamed == {"item": "task", "annot": "worker", "answer": "label"}


def test_missing_worker_column_names_column_and_file(tmp_path: Path) -> None:
    p = _write(tmp_path / "nolabels.csv", "task,annotator,label\nt,w,1\n")
    with pytest.raises(InputError) as err:
        read_table(p, LABELS)
    msg = str(err.value)
    assert "'worker'" in msg and str(p) in msg and err.value.column == "worker"


def test_mapped_column_absent(tmp_path: Path) -> None:
    p = _write(tmp_path / "l.csv", "task,worker,label\nt,w,1\n")
    with pytest.raises(InputError, match="column 'who'"):
        read_table(p, LABELS, {"worker": "who"})


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"", "empty"),
        (b"task,worker,label\n", "no data rows"),
        (b"task,worker,label\nt,\xff\xfe,1\n", "UTF-8"),
        (b"task,worker,label\nt,w,1,extra\n", "cannot parse"),
    ],
)
def test_unreadable_csv(tmp_path: Path, content: bytes, words: str) -> None:
    p = _write(tmp_path / "bad.csv", content)
    with pytest.raises(InputError, match=words) as err:
        read_table(p, LABELS)
    assert str(p) in str(err.value)


def test_non_numeric_outcome_names_rows(tmp_path: Path) -> None:
    p = _write(tmp_path / "c.csv", "annotator,item_a,item_b,outcome\nu,a,b,1\nu,a,c,x\nu,b,c,-1\nu,a,b,??\n")
    with pytest.raises(InputError) as err:
        read_table(p, COMPARISONS)
    assert err.value.column == "outcome" and err.value.rows == [2, 4]


def test_crowdkit_pairwise_names_and_winner(tmp_path: Path) -> None:
    p = _write(tmp_path / "p.csv", "worker,left,right,label\nu,a,b,a\nu,a,c,c\nv,b,c,tie\n")
    t = read_table(p, COMPARISONS)
    assert t.df[["annotator", "item_a", "item_b"]].values.tolist() == [
        ["u", "a", "b"],
        ["u", "a", "c"],
        ["v", "b", "c"],
    ]
    assert t.df["outcome"].tolist() == [1.0, -1.0, 0.0]
    bad = _write(tmp_path / "q.csv", "annotator,item_a,item_b,winner\nu,a,b,z\n")
    with pytest.raises(InputError, match="neither item_a, item_b nor a tie"):
        read_table(bad, COMPARISONS)


def test_parquet_file_and_folder(tmp_path: Path) -> None:
    df = pd.DataFrame({"task": [1, 2, 3], "worker": ["a", "b", "c"], "label": [0, 1, 1]})
    f = tmp_path / "l.parquet"
    df.to_parquet(f)
    t = read_table(f, LABELS)
    assert t.df["task"].tolist() == ["1", "2", "3"] and t.df["label"].tolist() == ["0", "1", "1"]
    folder = tmp_path / "ds"
    folder.mkdir()
    pq.write_table(pa.Table.from_pandas(df.iloc[:2]), folder / "part-0.parquet")
    pq.write_table(pa.Table.from_pandas(df.iloc[2:]), folder / "part-1.parquet")
    td = read_table(folder, LABELS)
    assert sorted(td.df["task"].tolist()) == ["1", "2", "3"] and td.format == "parquet"


def test_truncated_parquet(tmp_path: Path) -> None:
    df = pd.DataFrame({"task": ["1"] * 100, "worker": ["a"] * 100, "label": ["0"] * 100})
    f = tmp_path / "l.parquet"
    df.to_parquet(f)
    _write(f, f.read_bytes()[:-40])
    with pytest.raises(InputError, match="cannot read Parquet"):
        read_table(f, LABELS)


def test_write_run_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = {
        "consensus": pd.DataFrame(
            {"task": ["t"], "label": ["1"], "confidence": [1.0], "n_labels": [3], "fallback": [False]}
        )
    }
    first = write_run(tmp_path, "p", "run1", good, {"run_id": "run1"}, schemas=OUTPUTS["skills"])
    man = json.loads((first.path / "manifest.json").read_text())
    assert man["status"] == "completed" and man["outputs"]["consensus"]["rows"] == 1

    import crowdflow.storage.run_store as cio

    calls = {"n": 0}
    real = cio.write_parquet

    def flaky(df: pd.DataFrame, path: Path, schema: pa.Schema | None = None) -> int:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full (injected)")
        return real(df, path, schema)

    monkeypatch.setattr(cio, "write_parquet", flaky)
    two = {"consensus": good["consensus"], "other": good["consensus"]}
    with pytest.raises(OSError, match="injected"):
        write_run(tmp_path, "p", "run2", two, {"run_id": "run2"})
    assert sorted(x.name for x in (tmp_path / "p").iterdir()) == ["run1"]  # nothing of run2 left
    assert json.loads((first.path / "manifest.json").read_text()) == man  # earlier run untouched
    with pytest.raises(FileExistsError):
        write_run(tmp_path, "p", "run1", good, {})


@pytest.mark.parametrize("bad", ["../x", "a/b", "", ".", "/abs"])
def test_run_and_pipeline_names_are_checked(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="invalid"):
        write_run(tmp_path, bad, "r", {}, {})
