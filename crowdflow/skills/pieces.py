"""One read of the labels: each file split into task-bucket pieces kept in the memory of the worker that read it.

A partitioned skills run on an executor that holds (:func:`crowdflow.executors.holds`: the pipeline's Dask
executor, :class:`~crowdflow.executors.InlineMemory`) reads, checks and splits every input file once
(:func:`read_and_keep`) and keeps the file's rows in bucket order (:class:`KeptFile`) where it was read; each
file's pieces are held in runs of consecutive buckets (:func:`chunk_of`), one task encodes a run's buckets from
their pieces in file order (:func:`encode_chunk`) — the executor moves the pieces another worker holds through
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
from pathlib import Path
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
    "PIECE_CHUNKS",
    "BucketChunk",
    "KeptFile",
    "chunk_items",
    "chunk_of",
    "encode_chunk",
    "item_at",
    "kept_summary",
    "read_and_keep",
    "read_and_keep_rows",
]


@dataclass(frozen=True)
class KeptFile:
    """One input file as the first read keeps it: its rows of each bucket (``pieces[b]``, a
    :class:`~crowdflow.skills.buckets.CodedPiece` of its own arrays, None for a bucket without rows), its summary and
    what the run's check found (a validation report).

    Each piece owns its arrays (not a slice of the file's): a piece sent to another worker is pickled inside
    a :class:`BucketChunk`, and pickling an Arrow slice writes its parent's whole buffers."""

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


#: Buckets are held and encoded in this many runs of consecutive buckets (issue #36): a file's pieces of one run are
#: held as one item (:func:`chunk_of`) and one task encodes a run's buckets (:func:`encode_chunk`), so a 10⁸-label run
#: of 100 files and 64 buckets schedules 800 piece items and 8 encode tasks instead of 6,400 and 64 (a Dask task costs
#: ~1-3 ms of scheduler and worker time), and each file's run of pieces moves to the encoding worker once.
PIECE_CHUNKS = 8


@dataclass(frozen=True)
class BucketChunk:
    """One file's pieces of a run of consecutive buckets (bucket → :class:`~crowdflow.skills.buckets.CodedPiece`)."""

    partition: int
    pieces: dict[int, CodedPiece]


def chunk_of(item: tuple[KeptFile, int, int]) -> BucketChunk:
    """The pieces of buckets ``lo:hi`` of a kept file, held on their own (the same arrays, no copy)."""
    kept, lo, hi = item
    return BucketChunk(kept.summary.partition, {b: p for b in range(lo, hi) if (p := kept.pieces[b]) is not None})


def chunk_items(
    handles: list[Any], buckets: list[list[int]], n_buckets: int, n_chunks: int = PIECE_CHUNKS
) -> tuple[list[tuple[Any, int, int]], dict[int, list[int]]]:
    """The items of :func:`chunk_of` for the kept files' handles (file order) and their non-empty buckets, and for
    each bucket with rows the positions of its run's items (in file order; the same list for every bucket of a run)."""
    size = max(-(-n_buckets // max(n_chunks, 1)), 1)
    items: list[tuple[Any, int, int]] = []
    of_chunk: dict[int, list[int]] = {}
    used: set[int] = set()
    for handle, found in zip(handles, buckets, strict=True):
        for c in sorted({b // size for b in found}):
            of_chunk.setdefault(c, []).append(len(items))
            items.append((handle, c * size, min((c + 1) * size, n_buckets)))
        used.update(found)
    return items, {b: of_chunk[b // size] for b in sorted(used)}


def encode_chunk(item: tuple[list[str], list[BucketChunk], EncodeArgs]) -> list[BucketStats]:
    """Encode a run of buckets (their folders, in order) from the files' chunks that hold their pieces
    (:func:`crowdflow.skills.buckets.encode_pieces` per bucket, pieces in file order)."""
    folders, chunks, args = item
    chunks = sorted(chunks, key=lambda c: c.partition)
    out = []
    for folder in folders:
        b = int(Path(folder).name.split("-")[-1])
        pieces = [c.pieces[b] for c in chunks if b in c.pieces]
        out.append(
            encode_pieces(
                folder,
                pieces,
                args.workers,
                args.classes,
                args.duplicates,
                args.file_names,
                args.pairs,
                args.keep,
                value_sets=args.value_sets(),
            )
        )
    return out


def item_at(item: tuple[list[Any], int]) -> Any:
    """Element ``k`` of a held list (a bucket's result of :func:`encode_chunk`, held on its own)."""
    values, k = item
    return values[k]
