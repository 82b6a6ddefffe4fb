"""One dataset, the same rows whoever reads it (issue #33, item 3): the listing rule on a family of folder shapes.

A generator draws Parquet folders of many shapes: nested hive keys, links to files and to folders (inside and
outside the dataset), loops (a link back to an ancestor), files reached twice, 0-byte parts (as some writers leave
for an empty partition), 0-row parts, hidden and underscore files (``_SUCCESS``, ``.crc``), stray non-Parquet
files. Each is read three ways: in process (:func:`crowdflow.storage.io.read_table`, what an inline run does), part
by part as the Dask workers do (:func:`list_partitions` + :func:`read_partition`), and through ``crowdflow validate``'s
path; the same dataset given as a ``file://`` URL and copied to a remote fsspec file system (``memory://``) must read
the same too. Every reader must see exactly the rows the generator meant (each real file once).
"""

from __future__ import annotations

import os
from pathlib import Path

import fsspec
import numpy as np
import pandas as pd
import pytest

from crowdflow.contracts.errors import InputError
from crowdflow.contracts.tables import INPUTS
from crowdflow.storage.datasets import list_partitions, read_partition
from crowdflow.storage.io import fingerprint, read_table

LABELS = INPUTS["labels"]


def _frame(rng: np.random.Generator, n: int, tag: str) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "task": [f"{tag}-t{int(i)}" for i in rng.integers(0, 50, n)],
            "worker": [f"w{int(i)}" for i in rng.integers(0, 9, n)],
            "label": rng.integers(0, 3, n).astype(str),
        }
    )


def draw_dataset(root: Path, seed: int) -> pd.DataFrame:
    """A folder of Parquet parts of a drawn shape under ``root/data``; returns the rows a reader must see."""
    rng = np.random.default_rng(seed)
    data = root / "data"
    data.mkdir(parents=True)
    outside = root / "outside"
    outside.mkdir()
    expected = []
    depth = int(rng.integers(0, 3))
    for k in range(int(rng.integers(1, 5))):
        keys = [f"k{d}={int(rng.integers(0, 2))}" for d in range(depth)]
        folder = data.joinpath(*keys) if keys else data
        folder.mkdir(parents=True, exist_ok=True)
        df = _frame(rng, int(rng.integers(1, 40)), f"p{k}")
        name = f"part-{k}{rng.choice(['.parquet', '.pq', '.parq'])}"
        df.to_parquet(folder / name, index=False)
        expected.append(df)
    if rng.random() < 0.5:  # an empty part: 0 bytes
        (data / "part-empty.parquet").write_bytes(b"")
    if rng.random() < 0.5:  # a 0-row part with the columns
        _frame(rng, 1, "zero").iloc[:0].to_parquet(data / "part-zero.parquet", index=False)
    if rng.random() < 0.7:  # what writers leave beside the data
        (data / "_SUCCESS").write_bytes(b"")
        (data / ".part-0.parquet.crc").write_bytes(b"crc")
        hidden = data / "_temporary"
        hidden.mkdir()
        _frame(rng, 5, "hidden").to_parquet(hidden / "part-9.parquet", index=False)
    if rng.random() < 0.5:  # a stray file that is not Parquet
        (data / "README.txt").write_text("not data")
    if rng.random() < 0.6:  # a linked folder outside the dataset: followed
        df = _frame(rng, int(rng.integers(1, 20)), "linked-dir")
        (outside / "more").mkdir()
        df.to_parquet(outside / "more" / "part-x.parquet", index=False)
        os.symlink(outside / "more", data / "more")
        expected.append(df)
    if rng.random() < 0.6:  # a linked file outside the dataset: followed
        df = _frame(rng, int(rng.integers(1, 20)), "linked-file")
        df.to_parquet(outside / "single.parquet", index=False)
        os.symlink(outside / "single.parquet", data / "single.parquet")
        expected.append(df)
    if rng.random() < 0.6:  # a loop: a link back to the dataset itself, and a second path to a file
        os.symlink(data, data / "loop")
        first = next(data.rglob("part-0.*"))
        os.symlink(first, data / "again-part-0.parquet")
    return pd.concat(expected, ignore_index=True)


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    cols = ["task", "worker", "label"]
    return df[cols].astype(str).sort_values(cols).reset_index(drop=True)


SEEDS = list(range(24))


@pytest.mark.parametrize("seed", SEEDS)
def test_every_reader_sees_the_same_rows(tmp_path: Path, seed: int) -> None:
    expected = _sorted(draw_dataset(tmp_path, seed))
    data = tmp_path / "data"

    inline = read_table(data, LABELS, fmt="parquet")
    assert_frame = pd.testing.assert_frame_equal
    assert_frame(_sorted(inline.df), expected)

    parts = list_partitions(data)
    on_workers = pd.concat([read_partition(p, LABELS).df for p in parts], ignore_index=True)
    assert_frame(_sorted(on_workers), expected)
    assert len({os.path.realpath(p.path) for p in parts}) == len(parts)  # each real file once

    as_url = read_table(data.as_uri(), LABELS, fmt="parquet")
    assert_frame(_sorted(as_url.df), expected)
    assert as_url.sha256 == inline.sha256 == fingerprint(data)

    # the same files on a remote file system (fsspec's memory://): the remote reader lists and reads alike
    fs = fsspec.filesystem("memory")
    remote = f"/listing-{seed}"
    for p in parts:
        fs.pipe(f"{remote}/{p.rel}", Path(p.path).read_bytes())
    fs.pipe(f"{remote}/_SUCCESS", b"")
    fs.pipe(f"{remote}/empty.parquet", b"")
    try:
        got = read_table(f"memory://{remote}", LABELS, fmt="parquet")
        assert_frame(_sorted(got.df), expected)
    finally:
        fs.rm(remote, recursive=True)


def test_validate_reads_the_listed_rows(tmp_path: Path) -> None:
    """``crowdflow validate`` on a Dask spec over a folder with a loop, a link and an empty part: the listed rows."""
    import contextlib
    import io
    import json

    from flows.cli import main

    expected = draw_dataset(tmp_path, 3)
    spec = {"name": "x", "labels": {"path": "data"}, "runner": {"kind": "dask", "n_workers": 1, "processes": False}}
    (tmp_path / "spec.yaml").write_text(json.dumps(spec))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["validate", str(tmp_path / "spec.yaml")])
    assert code in (0, 2)
    assert f"{len(expected)} rows" in out.getvalue() or f"{len(expected):,} rows" in out.getvalue(), out.getvalue()


@pytest.mark.parametrize("kind", ["self", "dangling", "file_self"])
def test_a_broken_link_is_named(tmp_path: Path, kind: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    _frame(np.random.default_rng(0), 5, "a").to_parquet(data / "part-0.parquet", index=False)
    if kind == "self":
        os.symlink(data / "me.parquet", data / "me.parquet")
        target = data / "me.parquet"
    elif kind == "dangling":
        os.symlink(tmp_path / "nowhere.parquet", data / "gone.parquet")
        target = data / "gone.parquet"
    else:
        target = tmp_path / "labels.parquet"
        os.symlink(target, target)
        data = target
    with pytest.raises(InputError, match="symbolic link") as err:
        read_table(data, LABELS, fmt="parquet")
    assert str(target) in str(err.value)
    with pytest.raises(InputError, match="symbolic link"):
        list_partitions(data)


def test_a_labels_file_that_links_to_itself_exits_2(tmp_path: Path) -> None:
    import contextlib
    import io
    import json

    from flows.cli import main

    os.symlink(tmp_path / "labels.csv", tmp_path / "labels.csv")
    (tmp_path / "spec.yaml").write_text(json.dumps({"name": "x", "labels": {"path": "labels.csv"}}))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["validate", str(tmp_path / "spec.yaml")]) == 2
    assert "labels.csv" in err.getvalue() and "unexpected" not in err.getvalue()


def test_only_empty_parts_is_no_data(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "part-0.parquet").write_bytes(b"")
    with pytest.raises(InputError, match="empty"):
        read_table(data, LABELS, fmt="parquet")


@pytest.mark.parametrize("given", ["path", "relative", "file_url", "linked"])
def test_an_output_inside_its_input_is_refused_however_the_input_is_named(tmp_path: Path, given: str) -> None:
    """The output-inside-input check compares real local paths: a path, a relative path, a file:// URL, a link."""
    from crowdflow.contracts.errors import SpecError
    from crowdflow.spec import parse_spec
    from flows.pipeline import check_locations

    data = tmp_path / "data"
    draw_dataset(tmp_path, 1)
    os.symlink(data, tmp_path / "via-link")
    path = {
        "path": str(data),
        "relative": "data",
        "file_url": data.as_uri(),
        "linked": str(tmp_path / "via-link"),
    }[given]
    for out in (data / "out", data):
        spec = parse_spec(
            {"name": "x", "labels": {"path": path}, "output": {"dir": str(out)}, "runner": {"kind": "dask"}},
            base_dir=str(tmp_path),
        )
        with pytest.raises(SpecError, match="output dir"):
            check_locations(spec)
    ok = parse_spec(
        {"name": "x", "labels": {"path": path}, "output": {"dir": str(tmp_path / "out")}}, base_dir=str(tmp_path)
    )
    check_locations(ok)
