"""The increment store: per-file statistics that survive runs, beside the runs (``<out>/<pipeline>/.increments/``).

A run with ``incremental: true`` reads only the input files whose content it has not seen; what every other file
contributes comes from this store. Layout (format :data:`FORMAT`)::

    <out>/<pipeline>/.increments/
        state.json                      the commit point: format, version, per input kind the files it holds
                                        (content sha256 → stats file, rows, the paths it was seen at), erasures
        <kind>/<sha256>-e<k>.parquet    one file's canonical rows (mapped, coerced, erased workers removed): the
                                        sufficient statistic of every fit, so any method refits exactly from it
        <kind>/<sha256>-e<k>.sums.parquet   one file's per-method sums (format 2: per-task class counts of a
                                        labels file, per-pair sums of a comparisons file; see
                                        :mod:`crowdflow.storage.increment_folds`)
        <kind>/fold-<v>.parquet         the sums folded over every file the state holds (format 2), with the
                                        identity of the files it sums (``folds`` in ``state.json``)
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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from crowdflow.contracts.errors import CrowdflowError, InputError

log = logging.getLogger(__name__)

__all__ = [
    "FORMAT",
    "STATE_DIR",
    "FileEntry",
    "Fold",
    "State",
    "StateBusy",
    "SumsRule",
    "commit_state",
    "drop_erased",
    "erase",
    "forget",
    "read_state",
    "state_dir",
    "state_lock",
    "step_done",
    "stored_rows",
    "stored_rows_of",
    "update_fold",
    "with_sums",
    "write_stats",
    "write_table",
]

FORMAT = "crowdflow-increments/2"
#: the formats :func:`read_state` reads: a format-1 state (rows only) is read as a format-2 state whose files have
#: no sums yet; the next folded run derives each file's sums from its stored rows (once) and commits format 2
READS = ("crowdflow-increments/1", FORMAT)
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
    sums: str | None = None
    exact: bool = False

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"stats": self.stats, "rows": self.rows, "paths": list(self.paths)}
        if self.sums is not None:
            out["sums"] = self.sums
            out["exact"] = self.exact
        return out

    def at(self, paths: tuple[str, ...]) -> FileEntry:
        """This entry seen at ``paths``."""
        return FileEntry(self.sha256, self.stats, self.rows, paths, self.sums, self.exact)


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
    folds : dict
        Input kind → ``{"file", "digest"}``: the stored fold of that kind's per-file sums and the identity of the
        files (and sums) it folds (:func:`fold_digest`); a fold whose digest is not the state's is not used.
    """

    version: int = 0
    files: dict[str, dict[str, FileEntry]] = field(default_factory=dict)
    erasures: list[dict[str, Any]] = field(default_factory=list)
    salt: str = ""
    run_id: str | None = None
    updated_at: str | None = None
    folds: dict[str, dict[str, Any]] = field(default_factory=dict)

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
    """TEST-ONLY: ``CROWDFLOW_TEST_KILL_STATE_AT_STEP=<k>`` SIGKILLs the process after its k-th store step;
    ``=before-commit`` SIGKILLs it when it starts to commit (a run killed after its export, before its commit)."""

    count = 0

    @classmethod
    def done(cls, label: str) -> None:
        cls.count += 1
        kill = os.environ.get(TEST_KILL_ENV)
        if kill and kill.isdigit() and int(kill) == cls.count:
            log.warning("test hook: killing the state writer after step %d (%s)", cls.count, label)
            os.kill(os.getpid(), signal.SIGKILL)

    @staticmethod
    def point(label: str) -> None:
        if os.environ.get(TEST_KILL_ENV) == label:
            log.warning("test hook: killing the state writer at %s", label)
            os.kill(os.getpid(), signal.SIGKILL)


def step_done(label: str) -> None:
    """One store step done (a file written under its final name): the kill point of the store's tests."""
    _Steps.done(label)


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
    if not isinstance(raw, dict) or raw.get("format") not in READS:
        found = raw.get("format") if isinstance(raw, dict) else None
        raise InputError(
            f"increment state of format {found!r}; this crowdflow reads {' and '.join(map(repr, READS))}",
            path=str(path),
        )
    files: dict[str, dict[str, FileEntry]] = {}
    for kind, entries in (raw.get("files") or {}).items():
        files[kind] = {}
        for sha, e in entries.items():
            for name in (e["stats"], e.get("sums")):
                if name is not None and not (d / kind / name).is_file():
                    raise InputError(f"the increment state names a stats file that is missing: {name}", path=str(d))
            files[kind][sha] = FileEntry(
                sha, str(e["stats"]), int(e["rows"]), tuple(e.get("paths") or ()), e.get("sums"), bool(e.get("exact"))
            )
    folds = {k: dict(v) for k, v in (raw.get("folds") or {}).items() if all(p.is_file() for p in fold_paths(d, k, v))}
    return State(
        version=int(raw.get("version", 0)),
        files=files,
        erasures=list(raw.get("erasures") or []),
        salt=str(raw.get("salt") or ""),
        run_id=raw.get("run_id"),
        updated_at=raw.get("updated_at"),
        folds=folds,
    )


def fold_paths(folder: str | os.PathLike[str], key: str, record: Mapping[str, Any]) -> list[Path]:
    """The files a ``folds`` record names: its ``file`` in folder ``key``, or, for a fold kept in parts (a record
    with ``dir`` and ``files``: :mod:`crowdflow.skills.folded_parts`), each of its files in folder ``dir``.
    A record whose files are not all on disk is not used (a reader of an older layout drops it and refolds)."""
    d = Path(folder)
    if "files" in record:
        sub = d / str(record.get("dir"))
        return [sub / str(f) for f in record["files"]]
    return [d / key / str(record.get("file"))]


def fold_digest(entries: Mapping[str, FileEntry]) -> str:
    """The identity of a fold: the content hashes of the files it sums and the sums files it read (sorted)."""
    h = hashlib.sha256()
    for sha in sorted(entries):
        h.update(f"{sha}:{entries[sha].sums}:{max(len(entries[sha].paths), 1)}\n".encode())
    return h.hexdigest()


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


def write_table(folder: str | os.PathLike[str], kind: str, name: str, df: pd.DataFrame | pa.Table) -> str:
    """Write a sums or fold table ``<kind>/<name>`` (temp + rename); committed only by :func:`commit_state`."""
    d = Path(folder) / kind
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{name}.{os.getpid()}.tmp"
    table = df if isinstance(df, pa.Table) else pa.Table.from_pandas(df.reset_index(drop=True), preserve_index=False)
    pq.write_table(table, tmp)
    os.replace(tmp, d / name)
    _Steps.done(f"table {kind}/{name}")
    return name


def read_table(folder: str | os.PathLike[str], kind: str, name: str) -> pd.DataFrame:
    """A stored sums or fold table."""
    out: pd.DataFrame = pq.read_table(Path(folder) / kind / name).to_pandas()
    return out


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
    folds: Mapping[str, Mapping[str, Any]] | None = None,
) -> State:
    """Commit a new state (``state.json`` by temp + fsync + rename), then remove stats files no state names.

    Call it holding :func:`state_lock`. ``base`` is the state the caller started from: the new version is
    ``base.version + 1``; a store whose committed version moved meanwhile (a writer that ignored the lock) is
    refused rather than overwritten.
    """
    _Steps.point("before-commit")
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
        folds={k: dict(v) for k, v in (base.folds if folds is None else folds).items()},
    )
    body = {
        "format": FORMAT,
        "version": new.version,
        "run_id": new.run_id,
        "updated_at": new.updated_at,
        "salt": new.salt,
        "erasures": new.erasures,
        "files": {k: {sha: e.as_json() for sha, e in v.items()} for k, v in new.files.items()},
        "folds": new.folds,
    }
    tmp = d / f".{STATE_FILE}.{os.getpid()}.tmp"
    with tmp.open("w") as fh:
        json.dump(body, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, d / STATE_FILE)
    _Steps.done("state.json")
    keep = {(k, e.stats) for k, v in new.files.items() for e in v.values()}
    keep |= {(k, e.sums) for k, v in new.files.items() for e in v.values() if e.sums is not None}
    keep |= {(p.parent.name, p.name) for k, f in new.folds.items() for p in fold_paths(d, k, f)}
    for sub in d.iterdir():
        if sub.is_dir():
            for f in sub.iterdir():
                if (sub.name, f.name) not in keep:
                    with contextlib.suppress(OSError):
                        f.unlink()
    _Steps.done("garbage")
    log.info("committed increment state %d in %s", new.version, d)
    return new


@dataclass(frozen=True)
class SumsRule:
    """How one input kind's files reduce to sums and how sums fold (kept by the job's package, used here).

    Attributes
    ----------
    name : str
        The statistic (``label_counts``, ``pair_sums``); a stored fold of another statistic is not used.
    sums : callable
        One file's canonical rows → its sums table.
    exact : callable
        A sums table → whether adding and subtracting it is exact in any order (integers in float64 or int64).
    update : callable
        ``(fold, add, remove)`` → the fold plus the ``add`` sums minus the ``remove`` sums (used only when every
        file involved is exact).
    refold : callable
        Sums tables in the files' content-hash order → their fold (the canonical order of a non-exact fold).
    """

    name: str
    sums: Callable[[pd.DataFrame], pd.DataFrame]
    exact: Callable[[pd.DataFrame], bool]
    update: Callable[[pd.DataFrame, Sequence[pd.DataFrame], Sequence[pd.DataFrame]], pd.DataFrame]
    refold: Callable[[Sequence[pd.DataFrame]], pd.DataFrame]


def with_sums(folder: str | os.PathLike[str], kind: str, entry: FileEntry, rule: SumsRule, epoch: int) -> FileEntry:
    """``entry`` with its sums file: written from its stored rows when it has none (a format-1 state, an erasure)."""
    if entry.sums is not None:
        return entry
    sums = rule.sums(stored_rows(folder, kind, entry))
    name = write_table(folder, kind, f"{entry.sha256}-e{epoch}.sums.parquet", sums)
    return FileEntry(entry.sha256, entry.stats, entry.rows, entry.paths, name, rule.exact(sums))


@dataclass(frozen=True)
class Fold:
    """A fold made by :func:`update_fold`: the table, its state record, and how it was made.

    ``rows_read``: stored rows read to sum files that had no sums yet (a format-1 store, once; else 0).
    """

    table: pd.DataFrame
    record: dict[str, Any]
    files: dict[str, FileEntry]
    how: str
    added: int = 0
    removed: int = 0
    rows_read: int = 0
    #: ``deferred``: the stored fold is kept in parts and the caller folds these sums into the parts it holds
    #: (:func:`update_fold` with ``defer``; ``how`` is ``updated``); ``table`` is then empty
    add_sums: list[pd.DataFrame] = field(default_factory=list)
    remove_sums: list[pd.DataFrame] = field(default_factory=list)
    deferred: bool = False


#: files whose sums an exact refold holds at once (:func:`update_fold`)
REFOLD_CHUNK = 8


def update_fold(
    folder: str | os.PathLike[str],
    kind: str,
    base: State,
    files: Mapping[str, FileEntry],
    rule: SumsRule,
    epoch: int,
    defer: bool = False,
) -> Fold:
    """The fold of ``files`` (the kind's files the new state holds), from the stored fold where it can.

    A stored fold kept in parts (a record with ``parts``, :mod:`crowdflow.skills.folded_parts`) is never read here:
    with ``defer`` and a usable fold the added and removed files' sums are handed back (``deferred``,
    ``add_sums``/``remove_sums``) for the caller to fold into the parts they touch; without ``defer`` (a caller
    that needs the whole table) the fold is refolded from the per-file sums.

    Every file gets its sums (:func:`with_sums`; only files without them read their stored rows). When the state
    ``base`` holds a fold of this statistic whose digest is that of its files, and every file it holds and every
    file removed is exact (a non-integral sum anywhere makes the order matter), the new fold is
    ``rule.update(stored fold, added sums, removed sums)``: the cost is the new and removed files' sums plus one
    pass over the fold. Otherwise every file's sums are refolded in content-hash order
    (``rule.refold``), which never reads rows either; when every file's sums are exact the refold takes
    :data:`REFOLD_CHUNK` files at a time (``rule.update`` of the fold so far: the same sums in another grouping, so
    the same fold), which bounds its memory by a chunk of files' sums plus the fold, not every file's sums at once
    (a first run over 100 files of 10^6 comparisons held ~6 GB of per-file pair sums that way). The fold table
    is written (uncommitted) as
    ``<kind>/fold-<version>.parquet``.
    """
    rows_read = sum(e.rows for e in files.values() if e.sums is None)  # files without sums: a format-1 store
    entries = {sha: with_sums(folder, kind, e, rule, epoch) for sha, e in files.items()}
    old = base.files.get(kind, {})
    stored = base.folds.get(kind)

    def ident(sha: str, e: FileEntry) -> tuple[str, str | None, int]:
        return sha, e.sums, max(len(e.paths), 1)  # a file at k paths is read k times by a full read

    before = {ident(sha, e): e for sha, e in old.items()}
    after = {ident(sha, e): e for sha, e in entries.items()}
    add = [after[k] for k in sorted(set(after) - set(before), key=str)]
    gone = [before[k] for k in sorted(set(before) - set(after), key=str)]

    def tables(es: Sequence[FileEntry]) -> list[pd.DataFrame]:
        out = []
        for e in es:
            t = read_table(folder, kind, str(e.sums))
            out += [t] * max(len(e.paths), 1)
        return out

    usable = (
        stored is not None
        and stored.get("rule") == rule.name
        and stored.get("digest") == fold_digest(old)
        and all(e.exact and e.sums is not None for e in (*entries.values(), *gone))  # exact only if all are
    )
    parted = stored is not None and "parts" in stored
    if usable and parted and defer:
        record = {"digest": fold_digest(entries), "rule": rule.name}
        return Fold(rule.refold([]), record, entries, "updated", len(add), len(gone), rows_read, tables(add),
                    tables(gone), deferred=True)  # fmt: skip
    if usable and stored is not None and not parted:
        table = rule.update(read_table(folder, kind, str(stored["file"])), tables(add), tables(gone))
        how = "updated"
    else:
        order = [entries[sha] for sha in sorted(entries)]
        if all(e.exact for e in order):  # exact sums: any grouping gives the same fold, so a chunk at a time
            table = rule.refold([])
            for k in range(0, len(order), REFOLD_CHUNK):
                table = rule.update(table, tables(order[k : k + REFOLD_CHUNK]), [])
        else:  # the order of a non-exact fold is canonical: every file's sums at once, in hash order
            table = rule.refold(tables(order))
        how = "refolded"
    name = write_table(folder, kind, f"fold-{base.version + 1}-e{epoch}.parquet", table)
    record = {"file": name, "digest": fold_digest(entries), "rule": rule.name}
    return Fold(table, record, entries, how, len(add), len(gone), rows_read)


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


def erase(
    folder: str | os.PathLike[str], worker: str, timeout: float = 600.0, rules: Mapping[str, SumsRule] | None = None
) -> Erasure:
    """Remove every row of ``worker`` from the stored statistics and record the erasure (a salted hash and counts).

    The stats files of the files that held the worker are rewritten without its rows (no refit: the next run
    starts from them); only their person column is read to find them. Their sums are re-derived from their own
    rows and, with the kind's ``rules``, the stored fold is updated at once (the old sums subtracted, the new
    added: exact for sums of integers; otherwise refolded from the per-file sums, never from other files' rows).
    Without a rule the kind's fold is dropped and the next run refolds it. The erasure record makes every later run
    drop the worker's rows from new files too. Runs written before stay as they are (delete them if they must
    go: their folders are listed by ``crowdflow.latest_run``). Erasing a worker twice records nothing new.
    """
    d = Path(folder)
    with state_lock(d, timeout):
        base = read_state(d)
        salt = base.salt or secrets.token_hex(16)
        base = State(base.version, base.files, base.erasures, salt, base.run_id, base.updated_at, base.folds)
        digest = person_hash(salt, str(worker))
        epoch = len(base.erasures) + 1
        removed, touched = 0, 0
        files: dict[str, dict[str, FileEntry]] = {}
        folds = dict(base.folds)
        for kind, entries in base.files.items():
            column = PERSON_COLUMN.get(kind)
            files[kind] = {}
            hit_kind = False
            for sha, entry in entries.items():
                path = d / kind / entry.stats
                names = pq.read_schema(path).names
                if column not in names:
                    files[kind][sha] = entry
                    continue
                persons = pq.read_table(path, columns=[column]).column(0).to_pandas()
                hit = (persons.astype(str) == str(worker)).to_numpy()
                if not hit.any():
                    files[kind][sha] = entry
                    continue
                df = stored_rows(d, kind, entry)
                new = write_stats(d, kind, sha, df.loc[~hit], epoch)
                files[kind][sha] = FileEntry(sha, new.stats, new.rows, entry.paths)  # sums re-derived below
                removed += int(hit.sum())
                touched += 1
                hit_kind = True
            rule = (rules or {}).get(kind)
            if hit_kind and rule is not None and kind in base.folds and "parts" not in base.folds[kind]:
                fold = update_fold(d, kind, base, files[kind], rule, epoch)
                files[kind], folds[kind] = fold.files, fold.record
            elif hit_kind and rule is not None:  # a fold in parts (it names workers): dropped, the sums re-derived
                files[kind] = {sha: with_sums(d, kind, e, rule, epoch) for sha, e in files[kind].items()}
                folds.pop(kind, None)
            elif hit_kind:
                folds.pop(kind, None)
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
        new_state = commit_state(d, base, files, run_id="forget", erasures=erasures, folds=folds)
    log.info("erased one worker: %d rows from %d stored files", removed, touched)
    return Erasure(digest, removed, touched, new_state.version)


def forget(
    out_dir: str | os.PathLike[str],
    pipeline: str,
    worker: str,
    timeout: float = 600.0,
    rules: Mapping[str, SumsRule] | None = None,
) -> Erasure:
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
    return erase(state_dir(out_dir, pipeline), str(worker), timeout, rules)


@dataclass(frozen=True)
class StoredRows:
    """Stored rows read back by :func:`stored_rows_of`: the rows, and the files and rows scanned to find them."""

    rows: pd.DataFrame
    files_scanned: int
    rows_scanned: int


def stored_rows_of(
    folder: str | os.PathLike[str],
    kind: str,
    entries: Sequence[FileEntry],
    column: str,
    values: Sequence[str] | pa.Array | None,
    columns: Sequence[str],
) -> StoredRows:
    """The stored rows of ``entries`` whose ``column`` (as text) is one of ``values`` (``None``: every row).

    A file whose sums file names none of ``values`` in its ``column`` is skipped without opening its rows (the sums
    of a labels file list its tasks); the others have ``columns`` read and filtered. Rows come back in file order.
    """
    d = Path(folder) / kind
    if values is None or isinstance(values, pa.Array):
        wanted = values
    else:
        wanted = pa.array([str(v) for v in values], pa.string())
    frames: list[pd.DataFrame] = []
    scanned = rows = 0
    span = None
    if wanted is not None and len(wanted):
        got = pc.min_max(wanted.cast(pa.string()))
        span = (str(got["min"].as_py()), str(got["max"].as_py()))
    for e in entries:
        if wanted is not None:
            if len(wanted) == 0:
                break
            if e.sums is not None and span is not None and _outside(d / e.sums, column, span):
                continue  # the sums file's own statistics: none of its ids is in the wanted range
            if e.sums is not None:
                listed = pq.read_table(d / e.sums, columns=[column]).column(0).cast(pa.string())
                if not pc.any(pc.is_in(listed, value_set=wanted)).as_py():
                    continue
        table = pq.read_table(d / e.stats, columns=list(columns))
        scanned += 1
        rows += table.num_rows
        if wanted is not None:
            table = table.filter(pc.is_in(table[column].cast(pa.string()), value_set=wanted))
        frames.append(table.to_pandas())
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame({c: [] for c in columns})
    return StoredRows(out, scanned, rows)


def _outside(path: Path, column: str, span: tuple[str, str]) -> bool:
    """Whether the Parquet statistics of ``column`` (text) in ``path`` put every row group outside ``span``
    (the smallest and largest wanted id): then no row of the file can be wanted, and it is not read. Files without
    statistics are read."""
    try:
        meta = pq.read_metadata(path)
        k = meta.schema.names.index(column)
    except (OSError, ValueError):
        return False
    lo, hi = span
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(k).statistics
        if stats is None or not stats.has_min_max:
            return False
        smin, smax = stats.min, stats.max
        if isinstance(smin, bytes) or isinstance(smax, bytes) or not isinstance(smin, str):
            return False
        if not (smax < lo or smin > hi):
            return False
    return True
