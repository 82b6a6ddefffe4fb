"""Seconds per step of the skills ingest on one 10^6-label file, in process: the row reader vs the coded reader.

``python -m benchmarks.ingest_steps [--data DIR] [--buckets 64] [--repeats 5]`` times, best of ``--repeats`` after a
warm-up call, each step a Dask worker runs on one input file of a labels dataset written by
:mod:`benchmarks.scale_data` (default: the shared 10^8 set, 2,000 workers), then the encode of one bucket from the
pieces of ``--files`` files (a real bucket at 10^8 / 64 holds ~1.5·10^6 labels from 100 files):

* the **row reader** (the peer: the path every file took before issue #36's ingest change and the fallback now):
  ``read_partition`` (Parquet read + the contract's rules a row), Great Expectations on the rows (categoricals built
  from the strings), ``bucket_order`` (pandas factorize of the tasks, hash, stable argsort, Arrow gather), its text
  pieces coded;
* the **coded reader** (:mod:`crowdflow.skills.ingest`): the Parquet read with dictionaries, the rules on the distinct
  values, the task hash on the distinct tasks, the counting sort and the pieces' own dictionaries; Great Expectations
  on the columns' distinct values;
* the **encode** of one bucket: :func:`crowdflow.skills.buckets.encode_pieces` on coded pieces vs
  :func:`~crowdflow.skills.buckets.encode_table` on the text pieces (which codes them first, as the disk path does).

Prints a markdown table (load average before and after) and writes ``benchmarks/results/ingest_steps.md``
(``--no-write``: print only).
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEFAULT_DATA = Path("/tmp/crowdflow-scale/data-1e8-w2000-k2-s0")
OUT = Path(__file__).resolve().parent / "results" / "ingest_steps.md"


def _best(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    out = fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--buckets", type=int, default=64)
    ap.add_argument("--files", type=int, default=8, help="files whose bucket-0 pieces the encode step takes")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)

    from crowdflow.contracts.tables import INPUTS
    from crowdflow.skills.buckets import bucket_order, coded_piece, encode_pieces, encode_table
    from crowdflow.skills.ingest import read_coded
    from crowdflow.skills.partitioned import IdUnion
    from crowdflow.skills.pieces import read_and_keep, read_and_keep_rows
    from crowdflow.storage.datasets import list_partitions, read_partition
    from schemas.validation import validate_loaded

    parts = list_partitions(args.data / "labels")
    part, b = parts[0], args.buckets
    load0 = os.getloadavg()
    check = functools.partial(validate_loaded, kind="labels")
    rows: list[tuple[str, float, float | None]] = []

    t_read, loaded = _best(lambda: read_partition(part, INPUTS["labels"]), args.repeats)
    t_gx_rows, _ = _best(lambda: validate_loaded(loaded, "labels"), args.repeats)
    t_order, (table, bounds, _) = _best(lambda: bucket_order(loaded.df, b), args.repeats)

    def code_text() -> list[Any]:
        return [coded_piece(0, table.slice(int(bounds[k]), int(bounds[k + 1] - bounds[k]))) for k in range(b)]

    t_code_text, _ = _best(code_text, args.repeats)
    seen: dict[str, Any] = {}

    def keep_frame(lt: Any) -> None:
        seen["lt"] = lt

    t_coded, _ = _best(lambda: read_coded(part, INPUTS["labels"], b, None, None), args.repeats)
    read_coded(part, INPUTS["labels"], b, None, keep_frame)
    t_gx_distinct, _ = _best(lambda: validate_loaded(seen["lt"], "labels"), args.repeats)
    t_all_rows, _ = _best(lambda: read_and_keep_rows(part, b, None, check), args.repeats)
    t_all_coded, _ = _best(lambda: read_and_keep(part, b, None, check), args.repeats)
    rows += [
        ("read + contract rules (row reader: a rule a row)", t_read, None),
        (
            "bucket order (row reader) / read + rules on distinct values + bucket order + pieces (coded)",
            t_order,
            t_coded,
        ),
        ("pieces coded (row reader's text pieces)", t_code_text, None),
        ("Great Expectations (rows / distinct values)", t_gx_rows, t_gx_distinct),
        ("**one file, all steps** (`read_and_keep_rows` / `read_and_keep`)", t_all_rows, t_all_coded),
        (
            "one file as main cbb398c did it (read + rules, GX on rows, bucket order; no coding)",
            t_read + t_gx_rows + t_order,
            t_all_coded,
        ),
    ]

    kept = [read_and_keep(p, b) for p in parts[: args.files]]
    union = IdUnion()
    for k in kept:
        union.add(k.summary)
    workers, classes = union.finish(None)
    pieces = [k.pieces[0] for k in kept if k.pieces[0] is not None]
    texts = [p.text() for p in pieces]
    origin = [(p.partition, p.n_rows) for p in pieces]
    names = [p.name for p in parts]
    n_labels = sum(p.n_rows for p in pieces)
    with tempfile.TemporaryDirectory() as tmp:
        t_enc_text, _ = _best(
            lambda: encode_table(tmp, texts, origin, workers, classes, "error", names, False, True), args.repeats
        )
        t_enc_coded, _ = _best(
            lambda: encode_pieces(tmp, pieces, workers, classes, "error", names, False, True), args.repeats
        )
    piece_bytes = sum(
        p.task_idx.nbytes + p.worker_idx.nbytes + p.label_idx.nbytes + p.rows.nbytes + p.tasks.nbytes + p.workers.nbytes
        for p in pieces
    )
    text_bytes = sum(t.nbytes for t in texts)
    rows.append(
        (
            f"encode one bucket ({n_labels:,} labels from {len(pieces)} files; text pieces / coded)",
            t_enc_text,
            t_enc_coded,
        )
    )
    load1 = os.getloadavg()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        "# Skills ingest steps on one file (issue #36)",
        "",
        f"{stamp}; load average {load0[0]:.1f} before, {load1[0]:.1f} after. "
        f"`python -m benchmarks.ingest_steps --data {args.data} --buckets {b} --files {args.files} "
        f"--repeats {args.repeats}`; file `{part.name}` ({loaded.df.shape[0]:,} rows), best of {args.repeats}.",
        "",
        "| step | row reader (peer) s | coded reader s | ratio |",
        "|---|---|---|---|",
    ]
    for name, a, c in rows:
        ratio = f"{a / c:.2f}×" if c else ""
        lines.append(f"| {name} | {a:.3f} | {'' if c is None else f'{c:.3f}'} | {ratio} |")
    lines += [
        "",
        f"Bytes a label held between the read and the encode (the pieces of that bucket): text {text_bytes / n_labels:.1f}, "
        f"coded {piece_bytes / n_labels:.1f}.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        OUT.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
