"""Scratch folders a run owns: removed when it ends, and what a dead run left removed by the next one.

A run's scratch (``crowdflow-run-*`` under ``runner.scratch_dir`` or the system temp folder, holding the label
buckets, a full copy of the input) and its Dask local directory (``crowdflow-dask-*``) are made by
:func:`owned_scratch`. The folder holds ``.crowdflow-lock``, a file the owning process keeps locked (``fcntl.flock``,
exclusive) for as long as the run lives, and ``.crowdflow-owner`` (host, pid) for people. The operating system
releases the lock when the owner dies, however it dies (SIGKILL included), so the rule of :func:`sweep` is exact on
one host: **a folder whose lock can be taken belongs to a dead run and is removed; a locked one is never touched.**
A folder written by another host (its owner file names another host) is left alone, since a lock on a shared file
system may not be seen across hosts; a folder without a lock file (a run older than this rule, or one caught
between creating the folder and locking it) is removed only when it has not changed for an hour.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

LOCK_FILE = ".crowdflow-lock"
OWNER_FILE = ".crowdflow-owner"
#: The prefixes of the folders runs own (:func:`sweep` looks only at these).
PREFIXES = ("crowdflow-run-", "crowdflow-dask-")
UNLOCKED_GRACE_SECONDS = 3600.0


@contextlib.contextmanager
def owned_scratch(prefix: str, parent: str | os.PathLike[str] | None = None) -> Iterator[str]:
    """A new folder ``<parent>/<prefix>XXXX`` locked by this process while the block runs, removed when it ends.

    Ends by return, exception, ``KeyboardInterrupt`` or ``SystemExit`` (the CLI turns SIGTERM into the latter)
    remove it here; after a SIGKILL the lock is released by the system and :func:`sweep` removes it.
    """
    folder = tempfile.mkdtemp(prefix=prefix, dir=parent)
    fd = os.open(os.path.join(folder, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        Path(folder, OWNER_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid()}))
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        os.close(fd)


def _owner_host(folder: Path) -> str | None:
    try:
        return str(json.loads((folder / OWNER_FILE).read_text()).get("host"))
    except (OSError, ValueError):
        return None


def is_dead(folder: Path, now: float | None = None) -> bool:
    """Whether ``folder`` (a run's scratch) belongs to no live run on this host (the rule in the module's text)."""
    lock = folder / LOCK_FILE
    if not lock.exists():
        try:
            age = (time.time() if now is None else now) - folder.stat().st_mtime
        except OSError:
            return False
        return age > UNLOCKED_GRACE_SECONDS
    host = _owner_host(folder)
    if host is not None and host != socket.gethostname():
        return False
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: a live run
    finally:
        os.close(fd)  # closing releases a lock taken here
    return True


def sweep(*roots: str | os.PathLike[str] | None) -> list[str]:
    """Remove what dead runs left in ``roots`` (None: the system temp folder); returns the folders removed."""
    removed: list[str] = []
    for root in roots:
        base = Path(tempfile.gettempdir() if root is None else root)
        if not base.is_dir():
            continue
        for folder in sorted(base.iterdir()):
            if folder.name.startswith(PREFIXES) and folder.is_dir() and not folder.is_symlink() and is_dead(folder):
                shutil.rmtree(folder, ignore_errors=True)
                if not folder.exists():
                    removed.append(str(folder))
                    log.info("removed %s, left by a run that is no longer alive", folder)
    return removed
