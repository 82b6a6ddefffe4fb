"""One read of the labels: each file split into task-bucket pieces kept in the memory of the worker that read it.

A partitioned skills run on an executor that holds (:func:`crowdflow.executors.holds`: the pipeline's Dask
executor, :class:`~crowdflow.executors.InlineMemory`) reads, checks and splits every input file once
(:func:`read_and_keep`) and keeps the file's rows in bucket order (:class:`KeptFile`) where it was read; each
(file, bucket) piece is then held on its own (:func:`piece_of`), each bucket's encode takes
its pieces in file order (:func:`encode_kept`) — the executor moves the pieces another worker holds through
memory — and the files' tables are freed once the buckets are encoded. Nothing is written but each bucket's task
ids (``tasks.parquet``, for the consensus) and nothing is read again: the split pieces on disk and their re-read by
the encode of :func:`crowdflow.skills.buckets.encode_bucket` are the path of an executor that holds nothing.

The file is read as codes (:func:`crowdflow.skills.ingest.read_coded`: the contract and the bucket hash on each
column's distinct values, a counting sort by bucket) and each piece is a :class:`~crowdflow.skills.buckets.CodedPiece`
(16 bytes a label and its distinct texts); a file the coded reader leaves (float ids, nested values, a value a rule
refuses) is read row by row and its text pieces coded (:func:`~crowdflow.skills.buckets.coded_piece`): the same
pieces either way. The encode is :func:`crowdflow.skills.buckets.encode_pieces` on the pieces in file order, as
the disk path's :func:`~crowdflow.skills.buckets.encode_table`, so the codes, the sums, the duplicate policy and its
error (file, row, column) are those of the disk path bit for bit; a task whose labels sit in several files gets
all of them (its pieces of every file are in its bucket's list).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from crowdflow.contracts.tables import INPUTS
from crowdflow.skills.buckets import (
    BucketStats,
    CodedPiece,
    EncodeArgs,
    SplitSummary,
    bucket_order,
    coded_piece,
    encode_pieces,
    split_summary,
)
from crowdflow.skills.ingest import read_coded
from crowdflow.storage.datasets import Partition, read_partition
from crowdflow.storage.io import LoadedTable

__all__ = [
    "BucketPiece",
    "KeptFile",
    "encode_kept",
    "kept_summary",
    "piece_items",
    "piece_of",
    "read_and_keep",
    "read_and_keep_rows",
]


@dataclass(frozen=True)
class BucketPiece:
    """One file's rows of one bucket (:class:`~crowdflow.skills.buckets.CodedPiece`) and the file's index."""

    partition: int
    table: CodedPiece


@dataclass(frozen=True)
class KeptFile:
    """One input file as the first read keeps it: its rows of each bucket (``pieces[b]``, a
    :class:`~crowdflow.skills.buckets.CodedPiece` of its own arrays, None for a bucket without rows), its summary and
    what the run's check found (a validation report).

    Each piece owns its arrays (not a slice of the file's): a piece sent to another worker is pickled inside
    :class:`BucketPiece`, and pickling an Arrow slice writes its parent's whole buffers."""

    summary: SplitSummary
    found: Any
    pieces: list[CodedPiece | None]

    def buckets(self) -> list[int]:
        """The buckets this file has rows of."""
        return [b for b, t in enumerate(self.pieces) if t is not None]


def read_and_keep(
    part: Partition,
    n_buckets: int,
    columns: dict[str, str] | None = None,
    check: Callable[[LoadedTable], Any] | None = None,
) -> KeptFile:
    """The one read of one input file: canonical columns, the optional ``check`` (the run's table validation), its
    rows in bucket order kept as coded pieces (for the executor to hold). The in-memory twin of
    :func:`crowdflow.skills.partitioned.read_and_split`."""
    coded = read_coded(part, INPUTS["labels"], n_buckets, columns, check)
    if coded is not None:
        file, found, _ = coded
        return KeptFile(file.summary, found, file.pieces)
    return read_and_keep_rows(part, n_buckets, columns, check)


def read_and_keep_rows(
    part: Partition,
    n_buckets: int,
    columns: dict[str, str] | None = None,
    check: Callable[[LoadedTable], Any] | None = None,
) -> KeptFile:
    """:func:`read_and_keep` by the row-by-row reader (:func:`~crowdflow.storage.datasets.read_partition`, the text
    pieces of :func:`~crowdflow.skills.buckets.bucket_order`, each then coded): the path of a file the coded reader
    leaves, and the reference it equals."""
    loaded = read_partition(part, INPUTS["labels"], columns)
    found = check(loaded) if check is not None else None
    table, bounds, n_rows = bucket_order(loaded.df, n_buckets)
    summary = replace(split_summary(table, part.index, n_rows), sha256=loaded.sha256)
    pieces: list[CodedPiece | None] = [None] * n_buckets
    for b in range(n_buckets):
        start, stop = int(bounds[b]), int(bounds[b + 1])
        if stop > start:
            pieces[b] = coded_piece(part.index, table.slice(start, stop - start))
    return KeptFile(summary, found, pieces)


def kept_summary(kept: KeptFile) -> tuple[SplitSummary, Any, list[int]]:
    """What the flow gets of a kept file: its summary, its check's result and its non-empty buckets."""
    return kept.summary, kept.found, kept.buckets()


def piece_of(item: tuple[KeptFile, int]) -> BucketPiece:
    """Bucket ``b`` of a kept file, held on its own (the same buffers, no copy)."""
    kept, b = item
    piece = kept.pieces[b]
    assert piece is not None  # piece_items lists the non-empty buckets only
    return BucketPiece(kept.summary.partition, piece)


def piece_items(handles: list[Any], buckets: list[list[int]]) -> tuple[list[tuple[Any, int]], dict[int, list[int]]]:
    """The items of :func:`piece_of` for the kept files' handles (file order) and their non-empty buckets, and for
    each bucket the positions of its pieces among the items (in file order)."""
    items: list[tuple[Any, int]] = []
    where: dict[int, list[int]] = {}
    for handle, found in zip(handles, buckets, strict=True):
        for b in found:
            where.setdefault(b, []).append(len(items))
            items.append((handle, b))
    return items, where


def encode_kept(item: tuple[str, list[BucketPiece], EncodeArgs]) -> BucketStats:
    """Encode one bucket from its kept pieces (:func:`crowdflow.skills.buckets.encode_pieces`); ``item`` is the
    bucket's folder (for its task ids), its pieces and the shared arguments."""
    folder, pieces, args = item
    pieces = sorted(pieces, key=lambda p: p.partition)
    return encode_pieces(
        folder,
        [p.table for p in pieces],
        args.workers,
        args.classes,
        args.duplicates,
        args.file_names,
        args.pairs,
        args.keep,
        value_sets=args.value_sets(),
    )
