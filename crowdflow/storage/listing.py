"""Which files a Parquet dataset is made of: one listing, for every runner and every validator.

The in-process reader (:func:`crowdflow.storage.io.read_table`), the Dask workers
(:func:`crowdflow.storage.datasets.list_partitions` hands them these files), ``crowdflow validate`` and the input
fingerprint all read the files this module lists, so one dataset is the same rows whoever reads it. The rule:

- a dataset is a Parquet file, a folder, or an fsspec URL of either (``file://`` URLs are local paths: listed by
  the local rule, so a path and its URL are the same dataset);
- a folder's files are the files below it, at any depth (hive sub-folders such as ``day=2026-11-01/`` included;
  their ``key=value`` names are not columns), whose name ends in ``.parquet``, ``.pq`` or ``.parq`` and whose
  path below the folder has no part starting with ``.`` or ``_`` (``_SUCCESS``, ``.crc`` files and staging
  folders are skipped, as Arrow and Spark do);
- symbolic links are **followed**, to files and to folders, and each real file is listed once: a folder reached
  twice (a link back to an ancestor: a loop) is walked once, and a file reached by two paths is listed under the
  first in sorted order. A link that points nowhere, or to itself, is an error naming it;
- an empty file (0 bytes, as some writers leave for an empty partition) is an empty part: zero rows, not listed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from crowdflow.contracts.errors import InputError

log = logging.getLogger(__name__)

PARQUET_SUFFIXES = (".parquet", ".pq", ".parq")


@dataclass(frozen=True)
class Partition:
    """One Parquet file of a dataset.

    Attributes
    ----------
    path : str
        The file (a local path or a path on the fsspec file system of ``dataset``).
    index : int
        Position in the dataset's sorted file list (0-based); messages and output parts use it.
    dataset : str
        The dataset as the spec names it (for messages).
    n_bytes : int
        The file's size.
    protocol : str
        ``"file"`` for a local file, else the fsspec protocol (``s3``, ``gs``…).
    storage_options : tuple of (str, value)
        Options of the fsspec file system (sorted items, so the partition is hashable and picklable).
    rel : str
        The file's path relative to the dataset (what fingerprints hash).
    """

    path: str
    index: int
    dataset: str
    n_bytes: int
    protocol: str = "file"
    storage_options: tuple[tuple[str, Any], ...] = ()
    rel: str = ""

    @property
    def name(self) -> str:
        """How messages name the file: its path, with the URL scheme for a remote one."""
        return self.path if self.protocol == "file" else f"{self.protocol}://{self.path}"


def is_url(path: str) -> bool:
    """``True`` for an fsspec URL (``scheme://…``)."""
    return "://" in path


def local_path(source: str | os.PathLike[str]) -> Path | None:
    """The local path a source names (a path, or a ``file://`` URL), or None for a remote URL."""
    text = str(source)
    if not is_url(text):
        return Path(text)
    parsed = urlparse(text)
    if parsed.scheme == "file" and parsed.netloc in ("", "localhost"):
        return Path(unquote(parsed.path))
    return None


def _visible(rel: str) -> bool:
    return not any(part.startswith((".", "_")) for part in rel.replace("\\", "/").split("/") if part)


def _stat(path: Path, dataset: str) -> os.stat_result:
    try:
        return path.stat()  # follows links
    except OSError as exc:
        if path.is_symlink():
            target = os.readlink(path)
            why = "points to itself or to a loop of links" if exc.errno == 40 else f"points to {target!r}, not found"
            raise InputError(f"a symbolic link in the dataset {why}", path=str(path)) from None
        raise InputError(f"cannot read: {exc.strerror or exc}", path=str(path)) from None


def _walk_local(root: Path, dataset: str) -> list[tuple[str, str, int]]:
    """(path, path relative to root, size) of the visible Parquet files below ``root``, links followed once."""
    found: list[tuple[str, str, int]] = []
    seen_dirs: set[tuple[int, int]] = set()
    seen_files: set[tuple[int, int]] = set()
    stack = [root]
    while stack:
        folder = stack.pop()
        st = _stat(folder, dataset)
        if (st.st_dev, st.st_ino) in seen_dirs:
            log.info("dataset %s: %s reached again through a link, walked once", dataset, folder)
            continue
        seen_dirs.add((st.st_dev, st.st_ino))
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            raise InputError(f"cannot list the folder: {exc.strerror or exc}", path=str(folder)) from None
        for entry in entries:
            path = Path(entry.path)
            rel = os.path.relpath(path, root)
            if not _visible(rel):
                continue
            est = _stat(path, dataset)
            if path.is_dir():
                stack.append(path)
            elif path.name.endswith(PARQUET_SUFFIXES):
                found.append((str(path), rel, est.st_size))
    found.sort(key=lambda f: f[1])
    unique: list[tuple[str, str, int]] = []
    for path_s, rel, size in found:
        st = os.stat(path_s)
        if (st.st_dev, st.st_ino) in seen_files:
            log.info("dataset %s: %s is a file already listed (through a link), read once", dataset, rel)
            continue
        seen_files.add((st.st_dev, st.st_ino))
        unique.append((path_s, rel, size))
    return unique


def list_partitions(
    source: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None
) -> list[Partition]:
    """The Parquet files of a dataset by the module's rule, sorted by their path in it (no row is read).

    Parameters
    ----------
    source : str or PathLike
        A local folder, a single Parquet file, or an fsspec URL of either.
    storage_options : mapping, optional
        Options of the fsspec file system of a remote URL.

    Returns
    -------
    list of Partition
        Empty files are left out (zero rows); so may be every file of a dataset of empty parts.

    Raises
    ------
    InputError
        The source does not exist or cannot be listed, a link in it is broken or loops on itself, or it holds no
        Parquet file at all.
    """
    text = str(source)
    opts = tuple(sorted((storage_options or {}).items()))
    local = local_path(text)
    if local is not None:
        protocol = "file"
        if not local.exists() and not local.is_symlink():
            raise InputError("dataset not found", path=text)
        st = _stat(local, text)
        if local.is_dir():
            rows = _walk_local(local, text)
        else:
            rows = [(str(local), local.name, st.st_size)]
    else:
        import fsspec

        try:
            fs, root = fsspec.core.url_to_fs(text, **dict(opts))
            protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
            found = {root: fs.info(root)} if fs.isfile(root) else fs.find(root, detail=True)
        except ImportError as exc:
            raise InputError(
                f"cannot open the dataset: {exc} (install the file system's fsspec package on the flow and the "
                "workers)",
                path=text,
            ) from None
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot list the dataset: {exc}", path=text) from None
        rows = []
        for p, info in found.items():
            rel = os.path.relpath(p, root) if p != root else Path(p).name
            if p.endswith(PARQUET_SUFFIXES) and _visible(rel):
                rows.append((p, rel, int(info.get("size") or 0)))
        rows.sort(key=lambda r: r[1])
    if not rows:
        raise InputError("no Parquet file in this dataset (expected *.parquet files)", path=text)
    empty = [r for r in rows if r[2] == 0]
    if empty:
        log.info("dataset %s: %d empty file(s) (0 bytes) read as zero rows", text, len(empty))
    parts = [
        Partition(p, k, text, size, protocol, opts, rel) for k, (p, rel, size) in enumerate(r for r in rows if r[2] > 0)
    ]
    log.info("dataset %s: %d Parquet files, %.1f MB", text, len(parts), sum(p.n_bytes for p in parts) / 1e6)
    return parts
