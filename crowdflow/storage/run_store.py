"""Writing runs and finding completed ones: the run folder, its manifest, hive-partitioned datasets.

Writers are atomic at the run level: every table of a run is written into a hidden staging folder
``<out>/<pipeline>/.<run_id>.partial`` (each file under a temporary name, then renamed), the manifest
last, and the folder is renamed to ``<out>/<pipeline>/<run_id>`` only when everything is written. A
failure removes the staging folder, so a failed run leaves no table behind and never a manifest
with ``status: completed``; earlier runs are never touched. Reading inputs is :mod:`crowdflow.storage.io`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from crowdflow.contracts.errors import InputError
from crowdflow.contracts.missing import MISSING_REASON, reasons_as_text, with_reasons
from crowdflow.contracts.names import check_name
from crowdflow.memory import give_back_arrow
from crowdflow.storage.manifest import json_safe

log = logging.getLogger(__name__)

_RUN_DATE_RE = re.compile(r"^(\d{4})(\d{2})(\d{2})T")
RUN_ID_COLUMN = "run_id"

_OWNER = ".owner"
TEST_PAUSE_ENV = "CROWDFLOW_TEST_PAUSE_EXPORT"
TEST_KILL_ENV = "CROWDFLOW_TEST_KILL_AT_STEP"


class _ExportSteps:
    """TEST-ONLY fault hooks at each file-system step of an export, inert unless an environment variable is set.

    - ``CROWDFLOW_TEST_PAUSE_EXPORT=<file>`` (tests/test_faults.py): after the first table the writer writes
      the staging folder's path into ``<file>`` and waits until the file is deleted, so a test can kill the
      whole command at that point.
    - ``CROWDFLOW_TEST_KILL_AT_STEP=<k>``: the process SIGKILLs itself right after its k-th step (1-based),
      so a test can crash a writer at every step and check what a reader sees and what the next run repairs.
    """

    def __init__(self, staging: Path) -> None:
        self.staging = staging
        self.count = 0
        self.pause = os.environ.get(TEST_PAUSE_ENV)
        kill = os.environ.get(TEST_KILL_ENV)
        self.kill_at = int(kill) if kill else None

    def done(self, label: str) -> None:
        self.count += 1
        if self.kill_at is not None and self.count == self.kill_at:
            log.warning("test hook: killing the writer after step %d (%s)", self.count, label)
            os.kill(os.getpid(), signal.SIGKILL)
        if self.pause and label.startswith("table"):
            marker = Path(self.pause)
            if marker.exists():  # already paused once in this run: don't stop again
                return
            marker.write_text(str(self.staging))
            while marker.exists():
                time.sleep(0.05)
            marker.write_text("resumed")
            self.pause = None


def remove_stale_staging(base: Path) -> list[Path]:
    """Remove staging folders ``.<run_id>.partial`` left by a killed writer on this machine.

    A staging folder is stale when the process that created it (``.owner``: host and pid) is no
    longer alive on this host. Folders of live writers, of other hosts (a shared file system) or
    without an owner file are left alone; readers ignore staging folders anyway (:func:`latest_run`).
    Returns the removed folders.
    """
    removed: list[Path] = []
    host = socket.gethostname()
    for d in base.glob(".*.partial"):
        try:
            owner_host, pid = (d / _OWNER).read_text().split()
            if owner_host != host or int(pid) == os.getpid():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
            log.warning("removed the staging folder %s of a killed run (pid %s)", d, pid)
        except (OSError, ValueError):
            continue
    return removed


@dataclass(frozen=True)
class WrittenRun:
    """Where a completed run landed."""

    path: Path
    outputs: dict[str, dict[str, Any]]


def _fsync_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _to_arrow(df: pd.DataFrame, schema: pa.Schema | None, run_id: str | None = None) -> pa.Table:
    return _as_written(pa.Table.from_pandas(df, preserve_index=False), schema, run_id)


def _as_written(table: pa.Table, schema: pa.Schema | None, run_id: str | None = None) -> pa.Table:
    """An Arrow table converted from a frame (``from_pandas``) as the run stores it: reasons as text, the schema's
    columns and types, the run id column (hive)."""
    table = reasons_as_text(table)  # the reasons' codes become text here
    if schema is not None:
        table = table.select(schema.names).cast(schema)
    if run_id is not None and RUN_ID_COLUMN not in table.column_names:
        table = table.append_column(RUN_ID_COLUMN, pa.array([run_id] * table.num_rows, type=pa.string()))
    return table


def table_parts(run_dir: str | os.PathLike[str], name: str, info: Mapping[str, Any]) -> list[Path]:
    """The Parquet files of output table ``name`` of a run: **the one rule of the run format**, used by every reader.

    A table's manifest entry (``outputs[name]``) names its ``path`` relative to the run folder, and that path is
    either one Parquet file (``<name>.parquet``, or a hive part ``../../<name>/…/part-<run>.parquet``) or a folder
    of parts (``<name>/`` in a flat run, ``…/part-<run>/`` in a hive dataset: a table the Dask workers wrote),
    whose files are its ``*.parquet`` children in name order (hidden ``.``/``_`` names skipped, not recursive).

    Raises
    ------
    InputError
        Naming the path: the manifest has no path for the table, or nothing is on disk there.
    """
    rel = info.get("path")
    if not isinstance(rel, str) or not rel:
        raise InputError(f"the completed run lists a '{name}' table without a path", path=str(run_dir))
    where = Path(run_dir) / rel
    if where.is_file():
        return [where]
    if where.is_dir():
        return sorted(p for p in where.glob("*.parquet") if not p.name.startswith((".", "_")) and p.is_file())
    raise InputError(f"the completed run lists a '{name}' table that is not on disk", path=str(where))


def read_output_table(
    run_dir: str | os.PathLike[str], name: str, info: Mapping[str, Any], layout: str = "flat"
) -> pa.Table:
    """Output table ``name`` of a completed run as it was written (:func:`table_parts`), checked against its row count.

    The ``run_id`` column a hive part carries (the dataset's key of the run) is dropped: the table is the run's
    own columns whatever the layout, so :func:`crowdflow.read_run`, the next batch, the report and the warehouse
    load all read the same table. Each part is read as a file (a hive path's ``key=value`` folders never become
    columns).

    Raises
    ------
    InputError
        The table is not on disk, or holds another number of rows than the manifest records.
    """
    parts = table_parts(run_dir, name, info)
    pieces = [pq.ParquetFile(p).read() for p in parts]
    if pieces:
        table = pa.concat_tables(pieces, promote_options="default") if len(pieces) > 1 else pieces[0]
    else:
        table = pa.table({})
    if layout == "hive" and RUN_ID_COLUMN in table.column_names:
        table = table.drop_columns([RUN_ID_COLUMN])
    rows = info.get("rows")
    if isinstance(rows, int) and table.num_rows != rows:
        raise InputError(
            f"the '{name}' table on disk has {table.num_rows} rows where the run's manifest records {rows}",
            path=str(Path(run_dir) / str(info.get("path"))),
        )
    return table


def written_frame(df: pd.DataFrame, schema: pa.Schema | None = None) -> pd.DataFrame:
    """``df`` as a reader of the Parquet file :func:`write_parquet` writes gets it back.

    Cast to ``schema`` the way the writer does (exactly its columns, in order, with its types), or converted
    through Arrow as it is without one; the index becomes a RangeIndex.
    """
    out: pd.DataFrame = _to_arrow(df, schema).to_pandas()
    return out


#: Parquet key-value metadata of a part written in its final form by :func:`write_final_part`.
FINAL_PART_KEY = b"crowdflow.final_part"


def final_part(df: pd.DataFrame, name: str, schema: pa.Schema | None, run_id: str | None) -> pa.Table:
    """One part of a table the workers write, as the run stores it: **the one rule for such parts**.

    :func:`crowdflow.contracts.missing.with_reasons` (a NaN must be explained; a float table gets its
    ``missing_reason`` column), the table's schema when it has one, and, for the hive layout (``run_id`` given),
    the run id column.
    """
    return _to_arrow(with_reasons({name: df})[name], schema, run_id)


def write_final_part(df: pd.DataFrame, path: str, name: str, schema: pa.Schema | None, run_id: str | None) -> int:
    """Write a worker's part of table ``name`` in its final form (:func:`final_part`), marked as such, so that
    :func:`write_run` moves it into the run instead of reading and rewriting it; returns its rows.

    The mark (Parquet metadata ``crowdflow.final_part``) names the table and the run id the part was made for; a
    part whose mark does not match what the export expects is rewritten as any other part.
    """
    table = final_part(df, name, schema, run_id)
    mark = json.dumps({"table": name, "run_id": run_id}).encode()
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), FINAL_PART_KEY: mark})
    pq.write_table(table, path)
    return int(table.num_rows)


def _final_rows(src: str, name: str, run_id: str | None) -> int | None:
    """The rows of a part :func:`write_final_part` made for this table and run, or None (the part is rewritten)."""
    meta = pq.read_metadata(src)
    mark = (meta.metadata or {}).get(FINAL_PART_KEY)
    if mark is None or json.loads(mark) != {"table": name, "run_id": run_id}:
        return None
    return int(meta.num_rows)


def place_file(src: str, target: Path) -> None:
    """Move a finished file into the staging folder (a rename; a copy and delete across file systems)."""
    try:
        os.replace(src, target)
    except OSError:
        shutil.move(src, target)


def write_output_table(df: pd.DataFrame, args: tuple[str, str, pa.Schema | None, str | None]) -> int:
    """Write output table ``df`` as :func:`write_run` writes it into a run: ``args`` = (name, path, schema, run id
    of a hive part or None); the missing-value rule (:func:`~crowdflow.contracts.missing.with_reasons`), then
    :func:`_write_frame`. The one writer of an in-memory table, in the flow or where a worker holds the table
    (:class:`crowdflow.storage.held_tables.HeldTable`), so both give the same bytes; returns the rows."""
    name, path, schema, run_id = args
    return _write_frame(with_reasons({name: df})[name], Path(path), schema, run_id)


#: rows converted to Arrow at a time when a table's ``missing_reason`` is dictionary-encoded (see :func:`_write_frame`)
REASON_CHUNK_ROWS = 16_384


def _write_frame(df: pd.DataFrame, path: Path, schema: pa.Schema | None = None, run_id: str | None = None) -> int:
    """Write ``df`` as one Parquet file (:func:`_to_arrow`'s columns and types); returns its row count.

    A ``missing_reason`` held as a ``category`` is written as text (:func:`reasons_as_text`), and its text is as
    long as the reason (100–350 bytes) on every row: decoded whole, a skills table of 1.3·10^5 workers took 46 MB of
    text over its 14 MB in memory, the flow's peak at 2·10^5 workers (issue #36). Such a table longer than
    :data:`REASON_CHUNK_ROWS` is converted and written that many rows at a time, one row group each, so at most one
    chunk's text exists at once; the file reads back the same table, schema and pandas metadata included. Any
    other table is written whole, as before.
    """
    by_chunk = MISSING_REASON in df.columns and isinstance(df[MISSING_REASON].dtype, pd.CategoricalDtype)
    if not by_chunk or len(df) <= REASON_CHUNK_ROWS:
        table = _to_arrow(df, schema, run_id)
        pq.write_table(table, path)
        return int(table.num_rows)
    rows = 0
    coded = pa.Table.from_pandas(df, preserve_index=False)  # the reasons still as codes: no row's text yet
    writer: pq.ParquetWriter | None = None
    try:
        for start in range(0, coded.num_rows, REASON_CHUNK_ROWS):
            part = _as_written(coded.slice(start, REASON_CHUNK_ROWS), schema, run_id)
            if writer is None:
                writer = pq.ParquetWriter(path, part.schema)
            writer.write_table(part)
            rows += part.num_rows
            # the chunk's text and the encoder's pages go back to the system before the next chunk: mimalloc would
            # otherwise keep each chunk's pages and the write would hold ~3 chunks' worth (issue #36: at 1.3·10^5
            # rows +30 → +20 MB RSS; the row groups, and so the file, stay as they were)
            del part
            give_back_arrow()
    finally:
        if writer is not None:
            writer.close()
    return rows


def write_parquet(df: pd.DataFrame, path: Path, schema: pa.Schema | None = None) -> int:
    """Write one table atomically (temp name + rename); returns its row count."""
    tmp = path.with_name(path.name + ".tmp")
    rows = _write_frame(df, tmp, schema)
    os.replace(tmp, path)
    return rows


class WrittenElsewhere(Protocol):
    """An output table another process holds and writes (:class:`crowdflow.storage.held_tables.HeldTable`)."""

    def __len__(self) -> int: ...

    def write_to(self, path: Path, schema: pa.Schema | None, run_id: str | None) -> int: ...


def run_date_of(run_id: str) -> str:
    """``YYYY-MM-DD`` of a run: the UTC start date in a crowdflow run id, else today's UTC date."""
    m = _RUN_DATE_RE.match(run_id)
    if m:
        return f"{m[1]}-{m[2]}-{m[3]}"
    return datetime.now(UTC).date().isoformat()


def hive_part(out_dir: str | os.PathLike[str], table: str, pipeline: str, run_date: str, run_id: str) -> Path:
    """``<out>/<table>/pipeline=<pipeline>/run_date=<YYYY-MM-DD>/part-<run_id>.parquet``."""
    return Path(out_dir) / table / f"pipeline={pipeline}" / f"run_date={run_date}" / f"part-{run_id}.parquet"


def write_run(
    out_dir: str | os.PathLike[str],
    pipeline: str,
    run_id: str,
    tables: Mapping[str, pd.DataFrame | WrittenElsewhere],
    manifest: dict[str, Any],
    schemas: Mapping[str, pa.Schema] | None = None,
    extra_files: Mapping[str, bytes] | None = None,
    layout: Literal["flat", "hive"] = "flat",
    run_date: str | None = None,
    datasets: Mapping[str, Sequence[str]] | None = None,
) -> WrittenRun:
    """Write all tables of a run and its manifest, atomically, to ``<out>/<pipeline>/<run_id>/``.

    The manifest gets ``outputs`` (table → path relative to the run folder, rows) and ``status:
    completed``; it is the last file written, and the staging folder is renamed into place only after
    it. On any error the staging folder is removed and the exception propagates. Before anything is
    written the tables pass :func:`crowdflow.contracts.missing.with_reasons`: a NaN without a ``missing_reason`` or
    an infinity refuses the run, and every table with a float column gets its ``missing_reason`` column.

    With ``layout="hive"`` each table is written instead as one part of a hive-partitioned dataset,
    ``<out>/<table>/pipeline=<pipeline>/run_date=<date>/part-<run_id>.parquet`` with a ``run_id``
    column (DuckDB ``read_parquet(..., hive_partitioning=true)``, ``pyarrow.dataset(...,
    partitioning="hive")``, Spark and Trino read it directly); the run folder holds the manifest.
    Parts are written under hidden names (``.part-<run_id>.parquet.pending``, which those readers skip);
    the run folder with its completed manifest is renamed into place (the commit point), and only then are
    the parts renamed to their visible names. So a reader of a dataset never sees a part of a run whose
    manifest is not completed. A failure before the commit removes every part of the run; a process killed
    before it leaves hidden parts that the next hive export of the pipeline removes, and one killed after it
    leaves hidden parts that the next export publishes (:func:`recover_hive_parts`).

    Parameters
    ----------
    out_dir : path
    pipeline, run_id : str
        Validated with :func:`check_name`.
    tables : mapping of name → DataFrame
        Or a table held and written elsewhere (:class:`WrittenElsewhere`, a Dask worker's
        :class:`~crowdflow.storage.held_tables.HeldTable`): it writes itself to the same path with the same writer
        (:func:`write_output_table`), in its place in the order.
    manifest : dict
        JSON-serialisable run metadata (``run_id``, ``spec``, ``inputs``, ``metrics``…).
    schemas : mapping of name → pyarrow.Schema, optional
        Stable output schemas to cast to.
    extra_files : mapping of file name → bytes, optional
        Other files of the run (the report): written into the staging folder before the manifest and
        listed in its ``outputs`` under the file's stem (``path``, ``bytes``).
    layout : {"flat", "hive"}
    run_date : str, optional
        Hive partition date (default: :func:`run_date_of` the run id).
    datasets : mapping of name → list of paths, optional
        Tables already written as Parquet parts by the workers of a partitioned run: each part, one at a time,
        goes through :func:`final_part` (the missing-value rule and the table's schema) into the run folder as
        ``<name>/part-<k>.parquet`` (a hive part's folder with the hive layout), so no process ever holds the whole
        table; a part the worker already wrote by :func:`write_final_part` for this table and run is moved as is.

    Returns
    -------
    WrittenRun
    """
    check_name(pipeline, "pipeline name")
    check_name(run_id, "run id")
    if layout not in ("flat", "hive"):
        raise ValueError(f"layout must be flat or hive, got {layout!r}")
    # a table held elsewhere passes the same rule where it is written (write_output_table)
    checked = with_reasons({n: t for n, t in tables.items() if isinstance(t, pd.DataFrame)})
    tables = {n: checked.get(n, t) for n, t in tables.items()}
    del checked
    base = Path(out_dir) / pipeline
    final = base / run_id
    for folder in (Path(out_dir), base):
        if folder.exists() and not folder.is_dir():
            raise InputError("the output folder is a file; choose another output dir", path=str(folder))
    if final.exists():
        raise FileExistsError(f"run directory {final} already exists; run ids must be unique")
    parts: dict[str, Path] = {}
    if layout == "hive":
        if pipeline in tables:
            raise ValueError(
                f"pipeline name {pipeline!r} is also an output table name: with layout hive the table's "
                f"dataset folder {Path(out_dir) / pipeline} would hold the run folders; rename the pipeline"
            )
        date = run_date or run_date_of(run_id)
        for name in tables:
            check_name(name, "table name")
            parts[name] = hive_part(out_dir, name, pipeline, date, run_id)
            if parts[name].exists():
                raise FileExistsError(f"dataset part {parts[name]} already exists; run ids must be unique")
    staging = base / f".{run_id}.partial"
    base.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(base)
    if layout == "hive":
        recover_hive_parts(out_dir, pipeline)
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    steps = _ExportSteps(staging)
    try:
        (staging / _OWNER).write_text(f"{socket.gethostname()} {os.getpid()}\n")
        outputs: dict[str, dict[str, Any]] = {}
        for name, df in tables.items():
            check_name(name, "table name")
            schema = (schemas or {}).get(name)
            if layout == "flat":
                target = staging / f"{name}.parquet"
                if isinstance(df, pd.DataFrame):
                    rows = write_parquet(df, target, schema)
                else:
                    rows = df.write_to(target, schema, None)
                outputs[name] = {"path": f"{name}.parquet", "rows": rows}
                steps.done(f"table {name}")
                continue
            part = parts[name]
            part.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(df, pd.DataFrame):
                n_rows = _write_frame(df, _pending(part), schema, run_id)
            else:
                n_rows = df.write_to(_pending(part), schema, run_id)
            outputs[name] = {
                "path": os.path.relpath(part, final),
                "rows": n_rows,
                "dataset": os.path.relpath(Path(out_dir) / name, final),
                "partition": {"pipeline": pipeline, "run_date": part.parent.name.split("=", 1)[1]},
            }
            steps.done(f"table {name}")
        for name, files in (datasets or {}).items():
            check_name(name, "table name")
            if name in outputs:
                raise ValueError(f"dataset {name!r} is also an in-memory table of the run")
            if layout == "flat":
                folder, suffix = staging / name, ""
            else:  # a folder of parts in the table's hive partition, hidden until the run commits
                parts[name] = hive_part(out_dir, name, pipeline, run_date or run_date_of(run_id), run_id).with_suffix(
                    ""
                )
                if parts[name].exists():
                    raise FileExistsError(f"dataset part {parts[name]} already exists; run ids must be unique")
                folder, suffix = _pending(parts[name]), ".pending"
            folder.mkdir(parents=True)
            rows = 0
            part_run = None if layout == "flat" else run_id
            for k, src in enumerate(files):  # one part in memory at a time, through the same rule (final_part)
                target = folder / f"part-{k:05d}.parquet{suffix}"
                done = _final_rows(src, name, part_run)
                if done is not None:  # written in its final form by the worker: moved, not read
                    place_file(src, target)
                    rows += done
                    continue
                piece = pq.read_table(src)
                if FINAL_PART_KEY in (piece.schema.metadata or {}) and RUN_ID_COLUMN in piece.column_names:
                    piece = piece.drop_columns([RUN_ID_COLUMN])  # made for another run: its id is not this run's
                table = final_part(piece.to_pandas(), name, (schemas or {}).get(name), part_run)
                tmp = target.with_name(target.name + ".tmp")
                pq.write_table(table, tmp)
                os.replace(tmp, target)
                rows += table.num_rows
                os.unlink(src)
            if layout == "flat":
                outputs[name] = {"path": f"{name}/", "rows": rows, "parts": len(files)}
            else:
                outputs[name] = {
                    "path": os.path.relpath(parts[name], final) + "/",
                    "rows": rows,
                    "parts": len(files),
                    "dataset": os.path.relpath(Path(out_dir) / name, final),
                    "partition": {"pipeline": pipeline, "run_date": parts[name].parent.name.split("=", 1)[1]},
                }
            steps.done(f"table {name}")
        for fname, data in (extra_files or {}).items():
            check_name(fname, "file name")
            key = Path(fname).stem
            if key in outputs:
                raise ValueError(f"extra file {fname!r} clashes with the output table {key!r}")
            _fsync_write(staging / fname, data)
            outputs[key] = {"path": fname, "bytes": len(data)}
            steps.done(f"file {fname}")
        full = dict(manifest)
        full["outputs"] = outputs
        full["layout"] = layout
        full["status"] = "completed"
        full["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")  # the age a next batch checks
        text = json.dumps(json_safe(full), indent=2, default=str, allow_nan=False)  # strict JSON: no NaN
        _fsync_write(staging / "manifest.json", text.encode())
        steps.done("manifest")
        (staging / _OWNER).unlink()
        os.rename(staging, final)  # the commit point: from here on the run is completed
    except BaseException as exc:
        for part in parts.values():
            _remove_pending(_pending(part))
            _remove_empty_dirs(part.parent, Path(out_dir))
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(exc, OSError) and exc.filename is None:  # e.g. ENOSPC from a writer: say where
            raise OSError(exc.errno, exc.strerror or str(exc), str(final)) from exc
        raise
    steps.done("commit")
    # hive parts become visible only now, after the manifest says completed: a reader of a dataset never
    # sees a part of an uncommitted run; a crash from here on is finished by the next run's recovery
    for name, part in parts.items():
        _publish(_pending(part), part)
        steps.done(f"publish {name}")
    log.info("wrote run %s (%d tables, %s layout)", final, len(outputs), layout)
    return WrittenRun(path=final, outputs=outputs)


def _pending(part: Path) -> Path:
    """The hidden name a hive part has until its run commits (``.part-<run>.parquet.pending``).

    A part is one file (``part-<run>.parquet``) or, for a table the Dask workers wrote, a folder of files
    (``part-<run>/part-<k>.parquet``: hidden as ``.part-<run>.pending/part-<k>.parquet.pending``). Hidden from
    every reader: pyarrow datasets skip names starting with ``.``, and globs such as DuckDB's ``**/*.parquet``
    (which do descend into hidden folders) do not match the suffix.
    """
    return part.with_name(f".{part.name}.pending")


def _publish(pending: Path, part: Path) -> None:
    """Give a committed run's hidden part its visible name: the folder first, then each file in it.

    Interrupted half way, what is left is finished by :func:`recover_hive_parts` (the run has committed).
    """
    if pending.exists():
        os.replace(pending, part)
    if part.is_dir():
        for piece in sorted(part.glob("*.pending")):
            os.replace(piece, piece.with_name(piece.name[: -len(".pending")]))


def _remove_pending(pending: Path) -> None:
    if pending.is_dir():
        shutil.rmtree(pending, ignore_errors=True)
    else:
        pending.unlink(missing_ok=True)


def recover_hive_parts(out_dir: str | os.PathLike[str], pipeline: str) -> tuple[list[Path], list[Path]]:
    """Finish or undo what a killed hive export of ``pipeline`` left in the datasets under ``out_dir``.

    A pending part ``<out>/<table>/pipeline=<pipeline>/run_date=<d>/.part-<run>.parquet.pending`` is
    published (renamed to its visible name) when its run folder ``<out>/<pipeline>/<run>`` exists with a
    completed manifest: the writer was killed after the commit point. It is removed when the run never
    committed and no live writer owns it (its staging folder is gone, or belongs to a dead process on this
    host); parts of a live writer's run are left alone. Leftover temporary files (``.*.tmp``) of dead
    writers go too, and folders left empty.

    Returns
    -------
    (published, removed) : lists of Path
    """
    out = Path(out_dir)
    base = out / pipeline
    published: list[Path] = []
    removed: list[Path] = []
    found = [*out.glob(f"*/pipeline={pipeline}/run_date=*/.part-*.pending")]
    found += [p.parent for p in out.glob(f"*/pipeline={pipeline}/run_date=*/part-*/*.parquet.pending")]
    for pending in sorted(set(found)):
        name = pending.name.removeprefix(".").removesuffix(".pending")
        run_id = name.removeprefix("part-").removesuffix(".parquet")
        if _run_completed(base / run_id):
            _publish(pending, pending.with_name(name))
            published.append(pending)
            log.warning("published %s of run %s, whose export was interrupted after it committed", pending, run_id)
        elif not (base / f".{run_id}.partial").exists():
            _remove_pending(pending)
            _remove_empty_dirs(pending.parent, out)
            removed.append(pending)
            log.warning("removed %s: a part of run %s, which never committed", pending, run_id)
    return published, removed


def _run_completed(run_dir: Path) -> bool:
    try:
        return bool(json.loads((run_dir / "manifest.json").read_text()).get("status") == "completed")
    except (OSError, json.JSONDecodeError):
        return False


def _remove_empty_dirs(folder: Path, stop: Path) -> None:
    """Remove ``folder`` and its empty parents up to (not including) ``stop``."""
    try:
        while folder != stop and stop in folder.parents:
            folder.rmdir()
            folder = folder.parent
    except OSError:
        pass


def run_order(run_dir: Path) -> tuple[str, int]:
    """The sort key of run folders, oldest first: **the one rule for which run is newer**.

    Run ids start with their UTC start second (:func:`crowdflow.storage.manifest.new_run_id`), then a random
    suffix, so two runs started in the same second would be ordered by chance: within a second (the id's time
    prefix, before its first ``-``), the run whose manifest was written later (it is written last, at the commit)
    is the newer.
    """
    try:
        written = (run_dir / "manifest.json").stat().st_mtime_ns
    except OSError:
        written = 0
    return run_dir.name.split("-", 1)[0], written


def latest_run(path: str | os.PathLike[str]) -> Path:
    """The newest completed run under a pipeline folder (``<out>/<pipeline>``), or ``path`` itself.

    A run counts when its ``manifest.json`` says ``status: completed``; the newest is the last by
    :func:`run_order` (start second, then commit time). Raises :class:`InputError` when there is none.
    """
    p = Path(path)
    if (p / "manifest.json").is_file():
        runs = [p]
    else:
        runs = (
            sorted(
                (
                    d
                    for d in p.iterdir()
                    # staging folders (.<run_id>.partial) of unfinished or killed runs are never runs
                    if d.is_dir() and not d.name.startswith(".") and (d / "manifest.json").is_file()
                ),
                key=run_order,
            )
            if p.is_dir()
            else []
        )
    for run in reversed(runs):
        try:
            if json.loads((run / "manifest.json").read_text()).get("status") == "completed":
                return run
        except (OSError, json.JSONDecodeError):
            continue
    raise InputError("no completed run (manifest.json with status completed) found", path=str(p))


def read_skills_run(
    path: str | os.PathLike[str], max_age_hours: float | None = None, *, now: datetime | None = None
) -> dict[str, Any]:
    """The newest completed skills run under ``path`` (or that run): its ``skills`` and ``consensus`` tables.

    Returns ``run_dir``, ``run_id``, ``started_at``, ``finished_at``, ``age_hours`` and the two tables. Refused
    with :class:`InputError` naming the path: no completed run, a run of another job, a table the manifest lists
    that is missing on disk, and, with ``max_age_hours``, a run that finished longer ago than that (the message
    names the run and its age: a late or failed skills run is never silently replaced by an old one).
    """
    run = latest_run(path)
    manifest = json.loads((run / "manifest.json").read_text())
    if manifest.get("job") != "skills":
        raise InputError(f"run {run.name} is a '{manifest.get('job')}' run, not a skills run", path=str(run))
    age = run_age_hours(manifest, now)
    if max_age_hours is not None and (age is None or age > max_age_hours):
        shown = "of unknown age (no finished_at/started_at in its manifest)" if age is None else f"{age:.1f} h old"
        raise InputError(
            f"the newest completed skills run {manifest.get('run_id') or run.name} is {shown} "
            f"(finished {manifest.get('finished_at') or manifest.get('started_at') or '?'}), older than "
            f"max_skills_run_age_hours: {max_age_hours:g}; run the skills pipeline again or raise the limit",
            path=str(run),
        )
    outputs = manifest.get("outputs") or {}
    layout = str(manifest.get("layout") or "flat")
    tables: dict[str, Any] = {}
    for name in ("skills", "consensus"):
        info = outputs.get(name) or {"path": f"{name}.parquet"}
        tables[name] = read_output_table(run, name, info, layout).to_pandas()
    return {
        "run_dir": str(run),
        "run_id": manifest.get("run_id"),
        "started_at": manifest.get("started_at"),
        "finished_at": manifest.get("finished_at"),
        "age_hours": age,
        **tables,
    }


def run_age_hours(manifest: Mapping[str, Any], now: datetime | None = None) -> float | None:
    """Hours since a run finished (``finished_at``; runs written before it was recorded: ``started_at``)."""
    stamp = manifest.get("finished_at") or manifest.get("started_at")
    if not stamp:
        return None
    try:
        when = datetime.fromisoformat(str(stamp))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, ((now or datetime.now(UTC)) - when).total_seconds() / 3600.0)
