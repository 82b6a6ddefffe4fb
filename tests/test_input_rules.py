"""Rules against silent misreads and stray exit codes (issue #18, classes 4 and 5), each enforced in one place.

- the reader (crowdflow.storage.io): a column named twice, a repeated header row, a whitespace-only id, float ids
  that are not exact, a FIFO, a symbolic link loop, Parquet parts that disagree on columns;
- the table contracts (crowdflow.contracts.tables + schemas.validation): NA spellings in any case, whole-number caps,
  an edge listed twice, bounded outcomes;
- the spec loader (crowdflow.spec): a YAML key given twice, pathological nesting;
- the failure rule (crowdflow.contracts.errors): what a task retries and what the CLI reports with exit 2.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crowdflow.contracts.errors import (
    CrowdflowError,
    InputError,
    ResourceError,
    SpecError,
    TransientError,
    ValidationFailed,
    is_transient,
    user_error,
)
from crowdflow.contracts.tables import INPUTS, LABELS, NA_SPELLINGS, NA_SPELLINGS_ANY_CASE
from crowdflow.spec import load_spec
from crowdflow.storage.io import read_table
from crowdflow.storage.run_store import write_run
from schemas.validation import require_valid, validate_frame


def _csv(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _validated(path: Path, kind: str) -> pd.DataFrame:
    t = read_table(path, INPUTS[kind])
    require_valid(validate_frame(t.df, INPUTS[kind], str(path)))
    return t.df


@pytest.mark.parametrize("header", ["task,worker,label,worker", "task, worker ,label,worker"])
def test_a_column_named_twice_is_refused(tmp_path: Path, header: str) -> None:
    p = _csv(tmp_path, f"{header}\nt1,w1,a,w9\nt1,w2,b,w8\n")
    with pytest.raises(InputError, match=r"names column 'worker' twice \(columns 2 and 4\)"):
        read_table(p, LABELS)
    table = pa.table(
        [pa.array(["t1"]), pa.array(["w1"]), pa.array(["a"]), pa.array(["w2"])],
        names=["task", "worker", "label", "worker"],
    )
    pq.write_table(table, tmp_path / "dup.parquet")
    with pytest.raises(InputError, match="twice"):
        read_table(tmp_path / "dup.parquet", LABELS)


def test_a_repeated_header_row_is_refused(tmp_path: Path) -> None:
    p = _csv(tmp_path, "task,worker,label\nt1,w1,a\nt1,w2,b\ntask,worker,label\nt2,w1,a\nt2,w2,a\n")
    with pytest.raises(InputError, match=r"rows 3: .*repeat the header"):
        read_table(p, LABELS)


@pytest.mark.parametrize("blank", [" ", "   ", "\t"])
def test_whitespace_only_ids_are_missing_not_one_pooled_id(tmp_path: Path, blank: str) -> None:
    p = _csv(tmp_path, f"task,worker,label\nt1,w1,a\nt1,{blank},b\nt2,{blank},a\nt2,w1,b\n")
    df = read_table(p, LABELS).df
    assert df["worker"].isna().tolist() == [False, True, True, False]
    with pytest.raises(ValidationFailed, match=r"column 'worker': must not be null.*2 rows fail"):
        require_valid(validate_frame(df, LABELS, str(p)))


def test_na_spellings_are_recognised_in_any_case(tmp_path: Path) -> None:
    for word in ("Null", "NONE", "none", "#n/a", "nAn", "N/a"):
        assert word in NA_SPELLINGS_ANY_CASE
    assert set(NA_SPELLINGS) <= NA_SPELLINGS_ANY_CASE and "Nora" not in NA_SPELLINGS_ANY_CASE
    p = _csv(tmp_path, "task,worker,label\nt1,Null,a\nt1,w2,b\nt2,NONE,a\nt2,w2,b\n")
    with pytest.raises(ValidationFailed, match=r"column 'worker': must be a real id.*rows? (1|3)"):
        _validated(p, "labels")


@pytest.mark.parametrize(
    ("values", "ok"), [([1.0, 2.0, 3.0], True), ([1e20, 2.0, 3.0], False), ([np.inf, 2.0, 3.0], False)]
)
def test_float_ids_are_exact_integers_or_refused(tmp_path: Path, values: list[float], ok: bool) -> None:
    df = pd.DataFrame({"task": values, "worker": ["w1", "w2", "w3"], "label": ["a", "b", "a"]})
    path = tmp_path / "l.parquet"
    df.to_parquet(path)
    if ok:
        assert read_table(path, LABELS).df["task"].tolist() == ["1", "2", "3"]
    else:
        with pytest.raises(InputError, match=r"column 'task', rows 1: .*float ids are infinite or too large"):
            read_table(path, LABELS)


def test_special_files_and_link_loops_are_refused_up_front(tmp_path: Path) -> None:
    fifo = tmp_path / "labels.csv"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file or folder"):  # before: blocked forever on open()
        read_table(fifo, LABELS)
    loop = tmp_path / "loop.csv"
    loop.symlink_to(loop)
    with pytest.raises(InputError, match="symbolic link loop"):
        read_table(loop, LABELS)


def test_parquet_parts_that_disagree_on_columns_name_the_part(tmp_path: Path) -> None:
    folder = tmp_path / "labels"
    folder.mkdir()
    pd.DataFrame({"task": ["t1"], "worker": ["w1"], "label": ["a"]}).to_parquet(folder / "part-0.parquet")
    pd.DataFrame({"task": ["t2"], "annotator": ["w2"], "label": ["b"]}).to_parquet(folder / "part-1.parquet")
    with pytest.raises(InputError, match=r"part-1\.parquet lacks \['worker'\] and adds \['annotator'\]"):
        read_table(folder, LABELS)


def test_caps_are_whole_numbers_and_edges_are_listed_once(tmp_path: Path) -> None:
    p = _csv(tmp_path, "worker,capacity\nw1,2\nw2,1.5\n")
    with pytest.raises(InputError, match=r"column 'capacity', rows 2: 1 values are not whole numbers .*1\.5"):
        read_table(p, INPUTS["worker_caps"])
    assert _validated(_csv(tmp_path, "worker,capacity\nw1,2\nw2,0\n"), "worker_caps")["capacity"].tolist() == [2, 0]
    e = _csv(tmp_path, "source,target,weight\na,b,1\nb,a,1\na,b,2\n", "edges.csv")
    with pytest.raises(ValidationFailed, match=r"\(source, target\) must be unique"):
        _validated(e, "edges")


@pytest.mark.parametrize("value", ["1e160", "-1e300"])
def test_comparison_outcomes_are_bounded(tmp_path: Path, value: str) -> None:
    p = _csv(tmp_path, f"annotator,item_a,item_b,outcome\nu,a,b,{value}\nu,b,c,1\n")
    with pytest.raises(ValidationFailed, match=r"column 'outcome': \|value\| must be <= 1e\+100"):
        _validated(p, "comparisons")


def test_yaml_key_given_twice_and_deep_nesting_are_spec_errors(tmp_path: Path) -> None:
    dup = tmp_path / "dup.yaml"
    dup.write_text("name: a\nlabels: {path: l.csv}\nskills:\n  method: mv\n  method: ds\n")
    with pytest.raises(SpecError, match=r"key 'method' is given twice \(lines 4 and 5\)"):
        load_spec(dup)
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 50_000 + "]" * 50_000 + "\n")
    with pytest.raises(SpecError, match="nested too deeply"):
        load_spec(deep)


# --- the failure rule ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "transient", "user"),
    [
        (OSError(errno.EIO, "Input/output error"), True, TransientError),
        (OSError("Error reading bytes from file (no errno)"), True, TransientError),
        (OSError("[errno 28] No space left on device"), False, ResourceError),
        (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), True, TransientError),
        (TimeoutError("timed out"), True, TransientError),
        (httpx.ConnectError("[Errno 111] Connection refused"), True, TransientError),  # the Prefect API went away
        (httpx.ReadTimeout("timed out"), True, TransientError),
        (
            httpx.HTTPStatusError("404", request=httpx.Request("GET", "http://x"), response=httpx.Response(404)),
            False,
            None,
        ),
        (TransientError("db down"), True, TransientError),
        (OSError(errno.ENOSPC, "No space left on device", "/out/x.parquet"), False, ResourceError),
        (OSError(errno.EROFS, "Read-only file system", "/out"), False, ResourceError),
        (PermissionError(errno.EACCES, "Permission denied", "/out"), False, ResourceError),
        (FileNotFoundError(errno.ENOENT, "No such file", "/in.csv"), False, ResourceError),
        (MemoryError(), False, ResourceError),
        (RecursionError(), False, InputError),
        (InputError("bad column"), False, InputError),
        (ValueError("a bug"), False, None),
        (TypeError("a bug"), False, None),
        (KeyError("a bug"), False, None),
    ],
)
def test_what_is_retried_and_what_exits_2(exc: BaseException, transient: bool, user: type | None) -> None:
    assert is_transient(exc) is transient
    got = user_error(exc)
    if user is None:
        assert got is None
    else:
        assert isinstance(got, user) and isinstance(got, CrowdflowError) and got.exit_code == 2
    if isinstance(exc, OSError) and exc.filename:
        assert exc.filename in str(got)


def test_a_full_disk_names_the_run_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import crowdflow.storage.run_store as io_mod

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")  # as pyarrow raises it: no file name

    monkeypatch.setattr(io_mod.pq, "write_table", full)
    with pytest.raises(OSError) as exc:
        write_run(tmp_path / "out", "pipe", "r1", {"t": pd.DataFrame({"a": [1]})}, {})
    err = user_error(exc.value)
    assert isinstance(err, ResourceError)
    assert str(tmp_path / "out" / "pipe" / "r1") in str(err) and "no space left on the device" in str(err)
    assert not [p for p in (tmp_path / "out").rglob("*") if p.is_file()]


def test_an_output_folder_that_is_a_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "out"
    target.write_text("not a folder")
    with pytest.raises(InputError, match="the output folder is a file"):
        write_run(target, "pipe", "r1", {"t": pd.DataFrame({"a": [1]})}, {})


# --- numeric-looking labels: one rule for labels, truth and classes ----------------------------------------


def test_a_number_is_one_label_however_it_is_written(tmp_path: Path) -> None:
    from crowdflow.metrics import gold_metrics

    lab = _csv(tmp_path, "task,worker,label\nt1,w1,1.0\nt1,w2,1\nt2,w1,0.0\nt2,w2,+0\nt3,w1,01\nt3,w2,cat\n")
    df = read_table(lab, LABELS).df
    assert df["label"].tolist() == ["1", "1", "0", "0", "1", "cat"]  # '1' and '1.0' were two classes
    truth = read_table(_csv(tmp_path, "task,label\nt1,1\nt2,0\nt3,1\n", "truth.csv"), INPUTS["truth"]).df
    consensus = pd.DataFrame({"task": ["t1", "t2", "t3"], "label": ["1", "0", "1"]})
    assert gold_metrics(consensus, truth).accuracy == 1.0  # a float export against integer gold gave 0.0
    dec = tmp_path / "dec.parquet"
    import decimal

    table = pa.table(
        {
            "task": ["t1", "t1"],
            "worker": ["w1", "w2"],
            "label": pa.array([decimal.Decimal("1.00"), decimal.Decimal("0.50")], type=pa.decimal128(5, 2)),
        }
    )
    pq.write_table(table, dec)
    assert read_table(dec, LABELS).df["label"].tolist() == ["1", "0.5"]  # was '1.00'
    ids = read_table(_csv(tmp_path, "task,worker,label\n007,01,a\n7,1,b\n", "ids.csv"), LABELS).df
    assert ids["task"].tolist() == ["007", "7"] and ids["worker"].tolist() == ["01", "1"]  # ids keep their text


def test_gold_labels_outside_the_fitted_classes_are_counted() -> None:
    from crowdflow.metrics import gold_metrics

    consensus = pd.DataFrame({"task": ["t1", "t2", "t3"], "label": ["yes", "no", "yes"]})
    truth = pd.DataFrame({"task": ["t1", "t2", "t3"], "label": ["Yes", "no", "Y"]})
    m = gold_metrics(consensus, truth, classes=["no", "yes"])
    assert (m.n_gold, m.n_gold_label_unknown) == (3, 2)
    assert gold_metrics(consensus, truth.assign(label=["yes", "no", "no"])).n_gold_label_unknown == 0
