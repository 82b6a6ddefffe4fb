"""The increment store: per-file statistics that survive runs, beside the runs (``<out>/<pipeline>/.increments/``).

A run with ``incremental: true`` reads only the input files whose content it has not seen; what every other file
contributes comes from this store. Layout (format :data:`FORMAT`)::

    <out>/<pipeline>/.increments/
        state.json                      the commit point: format, version, per input kind the files it holds
                                        (content sha256 → stats file, rows, the paths it was seen at), erasures
        <kind>/<sha256>-e<k>.parquet    one file's canonical rows (mapped, coerced, erased workers removed): the
                                        sufficient statistic of every fit, so any method refits exactly from it
        lock                            held by the one process that updates the store (host, pid, time)

Rules (the promises of a run, applied to the store):

- **Atomic.** A stats file is written under a temporary name and renamed; ``state.json`` last, by the same
  temp + fsync + rename; a stats file no committed state names is garbage, removed by the next commit. A process
  killed at any step leaves the previous ``state.json`` (or the new one), never a half-written one, and a state
  never names a stats file that is not on disk.
- **One writer.** :func:`state_lock` is an exclusive lock file (``O_CREAT | O_EXCL``); a second run waits for it
  (up to a timeout, then :class:`StateBusy`), a lock whose process died on this host is removed. A run holds it
  from reading the state to committing the new one, so two racing runs never interleave: one wins, the other waits
  and then starts from the winner's state.
- **Erasure.** :func:`erase` removes a worker's rows from every stored file and records a salted hash of the id and
  the count (never the id); later runs drop the rows of every erased worker from new files too
  (:func:`drop_erased`), so the worker leaves no trace in any later statistic or output.

No Prefect import: the flows call these functions inside their tasks.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import signal
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from crowdflow.contracts.errors import CrowdflowError, InputError

log = logging.getLogger(__name__)

__all__ = [
    "FORMAT",
    "STATE_DIR",
    "FileEntry",
    "State",
    "StateBusy",
    "commit_state",
    "drop_erased",
    "erase",
    "forget",
    "read_state",
    "state_dir",
    "state_lock",
    "stored_rows",
    "write_stats",
]

FORMAT = "crowdflow-increments/1"
STATE_DIR = ".increments"
STATE_FILE = "state.json"
LOCK_FILE = "lock"
#: the column of each input kind that names the person who gave the row (what ``forget`` erases)
PERSON_COLUMN = {"labels": "worker", "comparisons": "annotator"}
TEST_KILL_ENV = "CROWDFLOW_TEST_KILL_STATE_AT_STEP"


class StateBusy(CrowdflowError):
    """Another process holds the increment store's lock for longer than the wait allows."""


@dataclass(frozen=True)
class FileEntry:
    """One input file in the store: its content hash, its stats file, its row count and where it was seen."""

    sha256: str
    stats: str
    rows: int
    paths: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {"stats": self.stats, "rows": self.rows, "paths": list(self.paths)}


@dataclass(frozen=True)
class State:
    """A committed state of the store (:func:`read_state`); an empty store has ``version`` 0.

    Attributes
    ----------
    version : int
        Commit counter (each commit adds one): the state a run started from, recorded in its manifest.
    files : dict
        Input kind → content sha256 → :class:`FileEntry`.
    erasures : list of dict
        ``{"worker_sha256", "rows_removed", "files", "at"}`` per erased worker (a salted hash, never the id).
    salt : str
        The store's salt of the erasure hashes.
    run_id, updated_at : str or None
        The run (or ``forget``) that made this state, and when.
    """

    version: int = 0
    files: dict[str, dict[str, FileEntry]] = field(default_factory=dict)
    erasures: list[dict[str, Any]] = field(default_factory=list)
    salt: str = ""
    run_id: str | None = None
    updated_at: str | None = None

    def record(self) -> dict[str, Any]:
        """What a manifest records of the state a run started from (no ids, no paths of stats files)."""
        return {
            "format": FORMAT,
            "version": self.version,
            "run_id": self.run_id,
            "updated_at": self.updated_at,
            "files": {kind: len(entries) for kind, entries in self.files.items()},
            "erasures": len(self.erasures),
        }

    def erased_hashes(self) -> set[str]:
        return {str(e["worker_sha256"]) for e in self.erasures}


def state_dir(out_dir: str | os.PathLike[str], pipeline: str) -> Path:
    """``<out>/<pipeline>/.increments``: hidden, so run listings (:func:`crowdflow.latest_run`) never see it."""
    return Path(out_dir) / pipeline / STATE_DIR


class _Steps:
    """TEST-ONLY: ``CROWDFLOW_TEST_KILL_STATE_AT_STEP=<k>`` SIGKILLs the process after its k-th store step."""

    count = 0

    @classmethod
    def done(cls, label: str) -> None:
        cls.count += 1
        kill = os.environ.get(TEST_KILL_ENV)
        if kill and int(kill) == cls.count:
            log.warning("test hook: killing the state writer after step %d (%s)", cls.count, label)
            os.kill(os.getpid(), signal.SIGKILL)


def read_state(folder: str | os.PathLike[str]) -> State:
    """The committed state in ``folder`` (:func:`state_dir`); an empty :class:`State` when there is none.

    Raises
    ------
    InputError
        ``state.json`` is not valid JSON, has another format, or names a stats file that is not on disk.
    """
    d = Path(folder)
    path = d / STATE_FILE
    if not path.is_file():
        return State()
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read the increment state: {exc}", path=str(path)) from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        found = raw.get("format") if isinstance(raw, dict) else None
        raise InputError(f"increment state of format {found!r}; this crowdflow reads {FORMAT!r}", path=str(path))
    files: dict[str, dict[str, FileEntry]] = {}
    for kind, entries in (raw.get("files") or {}).items():
        files[kind] = {}
        for sha, e in entries.items():
            if not (d / kind / e["stats"]).is_file():
                raise InputError(f"the increment state names a stats file that is missing: {e['stats']}", path=str(d))
            files[kind][sha] = FileEntry(sha, str(e["stats"]), int(e["rows"]), tuple(e.get("paths") or ()))
    return State(
        version=int(raw.get("version", 0)),
        files=files,
        erasures=list(raw.get("erasures") or []),
        salt=str(raw.get("salt") or ""),
        run_id=raw.get("run_id"),
        updated_at=raw.get("updated_at"),
    )


@contextlib.contextmanager
def state_lock(folder: str | os.PathLike[str], timeout: float = 600.0, poll: float = 0.1) -> Iterator[None]:
    """Hold the store's exclusive lock; wait up to ``timeout`` seconds for another holder, else :class:`StateBusy`.

    A lock left by a process that no longer runs on this host is removed (a killed run never blocks the next).
    """
    d = Path(folder)
    d.mkdir(parents=True, exist_ok=True)
    lock = d / LOCK_FILE
    me = f"{socket.gethostname()} {os.getpid()} {time.time():.0f}\n"
    deadline = time.monotonic() + timeout
    while True:
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if _stale(lock):
                with contextlib.suppress(FileNotFoundError):
                    lock.unlink()
                log.warning("removed the increment lock of a process that is gone: %s", lock)
                continue
            if time.monotonic() >= deadline:
                holder = _read_text(lock)
                raise StateBusy(
                    f"the increment store {d} is locked by another run ({holder.strip() or 'unknown'}) for more than "
                    f"{timeout:g} s; wait for it to finish"
                ) from None
            time.sleep(poll)
            continue
        with os.fdopen(fd, "w") as fh:
            fh.write(me)
        break
    try:
        yield
    finally:
        if _read_text(lock) == me:
            lock.unlink()


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _stale(lock: Path) -> bool:
    try:
        host, pid, _ = _read_text(lock).split()
        if host != socket.gethostname():
            return False
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (OSError, ValueError):
        return False
    return False


def write_stats(folder: str | os.PathLike[str], kind: str, sha256: str, df: pd.DataFrame, epoch: int) -> FileEntry:
    """Write one file's rows as its stats file (temp + rename); nothing is committed until :func:`commit_state`."""
    d = Path(folder) / kind
    d.mkdir(parents=True, exist_ok=True)
    name = f"{sha256}-e{epoch}.parquet"
    tmp = d / f".{name}.{os.getpid()}.tmp"
    pq.write_table(pa.Table.from_pandas(df.reset_index(drop=True), preserve_index=False), tmp)
    os.replace(tmp, d / name)
    _Steps.done(f"stats {kind}/{name}")
    return FileEntry(sha256, name, len(df))


def stored_rows(folder: str | os.PathLike[str], kind: str, entry: FileEntry) -> pd.DataFrame:
    """The rows a stored file contributes (its stats file), as the reader of the file gave them."""
    out: pd.DataFrame = pq.read_table(Path(folder) / kind / entry.stats).to_pandas()
    return out


def commit_state(
    folder: str | os.PathLike[str],
    base: State,
    files: Mapping[str, Mapping[str, FileEntry]],
    run_id: str | None,
    erasures: Sequence[Mapping[str, Any]] | None = None,
) -> State:
    """Commit a new state (``state.json`` by temp + fsync + rename), then remove stats files no state names.

    Call it holding :func:`state_lock`. ``base`` is the state the caller started from: the new version is
    ``base.version + 1``; a store whose committed version moved meanwhile (a writer that ignored the lock) is
    refused rather than overwritten.
    """
    d = Path(folder)
    current = read_state(d)
    if current.version != base.version:
        raise StateBusy(
            f"the increment store {d} moved from version {base.version} to {current.version} while this run held "
            "no lock; run again"
        )
    new = State(
        version=base.version + 1,
        files={k: dict(v) for k, v in files.items()},
        erasures=[dict(e) for e in (base.erasures if erasures is None else erasures)],
        salt=base.salt or secrets.token_hex(16),
        run_id=run_id,
        updated_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    body = {
        "format": FORMAT,
        "version": new.version,
        "run_id": new.run_id,
        "updated_at": new.updated_at,
        "salt": new.salt,
        "erasures": new.erasures,
        "files": {k: {sha: e.as_json() for sha, e in v.items()} for k, v in new.files.items()},
    }
    tmp = d / f".{STATE_FILE}.{os.getpid()}.tmp"
    with tmp.open("w") as fh:
        json.dump(body, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, d / STATE_FILE)
    _Steps.done("state.json")
    keep = {(k, e.stats) for k, v in new.files.items() for e in v.values()}
    for sub in d.iterdir():
        if sub.is_dir():
            for f in sub.iterdir():
                if (sub.name, f.name) not in keep:
                    with contextlib.suppress(OSError):
                        f.unlink()
    _Steps.done("garbage")
    log.info("committed increment state %d in %s", new.version, d)
    return new


def person_hash(salt: str, person: object) -> str:
    """The salted SHA-256 of a worker id, as erasures record it (the id itself is never stored)."""
    return hashlib.sha256(f"{salt}\x00{person}".encode()).hexdigest()


def drop_erased(state: State, df: pd.DataFrame, kind: str) -> tuple[pd.DataFrame, int]:
    """``df`` without the rows of every worker the store has erased; returns the rows kept and how many were dropped.

    Hashes each distinct id once (not each row). A store without erasures returns ``df`` itself.
    """
    column = PERSON_COLUMN.get(kind)
    erased = state.erased_hashes()
    if not erased or column is None or column not in df.columns or len(df) == 0:
        return df, 0
    ids = pd.unique(df[column].to_numpy())
    gone = [i for i in ids if person_hash(state.salt, i) in erased]
    if not gone:
        return df, 0
    mask = df[column].isin(gone).to_numpy()
    return df.loc[~mask], int(mask.sum())


@dataclass(frozen=True)
class Erasure:
    """What :func:`erase` did: the recorded hash and counts (the id is not kept anywhere)."""

    worker_sha256: str
    rows_removed: int
    files: int
    version: int


def erase(folder: str | os.PathLike[str], worker: str, timeout: float = 600.0) -> Erasure:
    """Remove every row of ``worker`` from the stored statistics and record the erasure (a salted hash and counts).

    The stats files of the files that held the worker are rewritten without its rows (no refit: the next run
    starts from them); the erasure record makes every later run drop the worker's rows from new files too.
    Runs written before stay as they are (delete them if they must go: their folders are listed by
    ``crowdflow.latest_run``). Erasing a worker twice records nothing new.
    """
    d = Path(folder)
    with state_lock(d, timeout):
        base = read_state(d)
        salt = base.salt or secrets.token_hex(16)
        base = State(base.version, base.files, base.erasures, salt, base.run_id, base.updated_at)
        digest = person_hash(salt, str(worker))
        epoch = len(base.erasures) + 1
        removed, touched = 0, 0
        files: dict[str, dict[str, FileEntry]] = {}
        for kind, entries in base.files.items():
            column = PERSON_COLUMN.get(kind)
            files[kind] = {}
            for sha, entry in entries.items():
                df = stored_rows(d, kind, entry)
                hit = (df[column].astype(str) == str(worker)).to_numpy() if column in df.columns else None
                if hit is None or not hit.any():
                    files[kind][sha] = entry
                    continue
                new = write_stats(d, kind, sha, df.loc[~hit], epoch)
                files[kind][sha] = FileEntry(sha, new.stats, new.rows, entry.paths)
                removed += int(hit.sum())
                touched += 1
        erasures = list(base.erasures)
        if digest not in base.erased_hashes():
            erasures.append(
                {
                    "worker_sha256": digest,
                    "rows_removed": removed,
                    "files": touched,
                    "at": datetime.now(UTC).isoformat(timespec="seconds"),
                }
            )
        new_state = commit_state(d, base, files, run_id="forget", erasures=erasures)
    log.info("erased one worker: %d rows from %d stored files", removed, touched)
    return Erasure(digest, removed, touched, new_state.version)


def forget(out_dir: str | os.PathLike[str], pipeline: str, worker: str, timeout: float = 600.0) -> Erasure:
    """Erase ``worker`` from pipeline ``pipeline`` under ``out_dir`` (``crowdflow forget``; :func:`erase`).

    Every later run of the pipeline, incremental or not, leaves the worker's rows out; the store records a salted
    hash of the id and how many rows went, never the id. Earlier run folders are not changed.
    """
    from crowdflow.contracts.names import check_name

    try:
        check_name(pipeline, "pipeline name")
    except ValueError as exc:
        raise InputError(str(exc)) from None
    if not str(worker).strip():
        raise InputError("forget needs a worker id", path=str(out_dir))
    return erase(state_dir(out_dir, pipeline), str(worker), timeout)
