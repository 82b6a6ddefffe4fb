"""Parts the workers write in their final form are moved into the run, not read and rewritten (issue #36).

A partitioned run's row tables (ranking residuals/outliers: up to one row per comparison) used to be read back by
the flow and rewritten through the missing-value rule and the schema. :func:`write_final_part` applies that rule
(:func:`final_part`) on the worker and marks the file; :func:`write_run` moves a part whose mark names its table and
run. The run must read back the same tables as when the export rewrites plain parts, on both layouts and a family
of frames (float columns with and without explained NaNs, integer-only frames, empty parts); a part marked for
another run or table is rewritten.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from crowdflow.contracts.missing import explain_missing
from crowdflow.storage.run_store import write_final_part, write_run
from crowdflow.storage.runs import read_run


def _frames(seed: int) -> list[pd.DataFrame]:
    rng = np.random.default_rng(seed)
    out = []
    for k in range(int(rng.integers(1, 4))):
        n = int(rng.integers(0, 50)) if k else int(rng.integers(1, 50))
        df = pd.DataFrame({"part": np.full(n, k, np.int64), "row_id": np.arange(n, dtype=np.int64)})
        if seed % 3:
            df["residual"] = rng.standard_normal(n)
            if seed % 3 == 2 and n:  # an explained missing value
                df.loc[0, "residual"] = np.nan
                df = explain_missing(df, ["residual"], "not estimable")
        out.append(df)
    return out


@pytest.mark.parametrize("layout", ["flat", "hive"])
def test_final_parts_are_moved_and_read_back_as_rewritten_parts(tmp_path: Path, layout: str) -> None:
    for seed in range(6):
        frames = _frames(seed)
        runs = {}
        for how in ("plain", "final"):
            run_id = f"2026-11-29T05-00-0{seed}-{how}"
            src = tmp_path / f"scratch-{seed}-{how}"
            src.mkdir()
            parts, inodes = [], []
            for k, df in enumerate(frames):
                path = str(src / f"part-{k:05d}.parquet")
                if how == "plain":
                    df.to_parquet(path, index=False)
                else:
                    write_final_part(df, path, "residuals", None, run_id if layout == "hive" else None)
                    inodes.append(os.stat(path).st_ino)
                parts.append(path)
            tables = {"ranking": pd.DataFrame({"item": ["a", "b"], "score": [1.0, -1.0]})}
            written = write_run(tmp_path / "out", "pipe", run_id, tables, {"run_id": run_id}, layout=layout,
                                datasets={"residuals": parts})  # fmt: skip
            assert not any(Path(p).exists() for p in parts)  # consumed either way
            run = read_run(written.path)
            runs[how] = run.tables["residuals"]
            assert written.outputs["residuals"]["rows"] == sum(len(f) for f in frames)
            if how == "final":  # moved: the very files the worker wrote (same inode), not rewritten copies
                folder = Path(written.path) / written.outputs["residuals"]["path"]
                moved = sorted(p for p in folder.glob("*.parquet"))
                assert [os.stat(p).st_ino for p in moved] == inodes
        pd.testing.assert_frame_equal(runs["plain"], runs["final"], check_exact=True)


def test_a_part_marked_for_another_run_is_rewritten(tmp_path: Path) -> None:
    df = pd.DataFrame({"row_id": np.arange(5, dtype=np.int64), "residual": np.linspace(0, 1, 5)})
    path = str(tmp_path / "part-00000.parquet")
    write_final_part(df, path, "residuals", None, "some-other-run")
    inode = os.stat(path).st_ino
    run_id = "2026-11-29T05-00-00-x"
    written = write_run(tmp_path / "out", "pipe", run_id, {}, {"run_id": run_id}, layout="hive",
                        datasets={"residuals": [path]})  # fmt: skip
    folder = Path(written.path) / written.outputs["residuals"]["path"]
    (part,) = sorted(folder.glob("*.parquet"))
    assert os.stat(part).st_ino != inode
    assert set(pq.read_table(part).column("run_id").to_pylist()) == {run_id}  # the run's own id, rewritten
    pd.testing.assert_frame_equal(read_run(written.path).tables["residuals"][["row_id", "residual"]], df)


def test_runs_started_in_the_same_second_are_ordered_by_their_commit(tmp_path: Path) -> None:
    """Run ids have a one-second prefix and a random suffix: the newer of two runs started in the same second is the
    one committed later (its manifest written last), whatever the suffixes; an earlier second is always older."""
    import time

    from crowdflow.storage.run_store import latest_run
    from crowdflow.storage.runs import run_history

    frame = {"ranking": pd.DataFrame({"item": ["a"], "score": [0.0]})}
    ids = ["20261129T070000Z-ffffffff", "20261129T070001Z-ffffffff", "20261129T070001Z-00000000"]
    for run_id in ids:  # committed in this order: the last one has the smaller suffix
        write_run(tmp_path / "out", "pipe", run_id, frame, {"run_id": run_id, "status": "completed"})
        time.sleep(0.02)
    assert latest_run(tmp_path / "out" / "pipe").name == ids[-1]
    assert [m["run_id"] for m in run_history(tmp_path / "out" / "pipe")] == ids
