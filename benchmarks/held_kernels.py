"""Nanoseconds a row of the compiled loops of a partitioned ranking pass, in process (issue #36 part 3).

``python -m benchmarks.held_kernels [--data DIR] [--files 10] [--repeats 7]`` reads ``--files`` files of a
comparisons dataset written by :mod:`benchmarks.scale_data` (default: the shared 10^8 set), encodes them into one
held block (:func:`crowdflow.ranking.held.encode_block`: rows grouped by pair) and times, best of ``--repeats``
after a warm-up call, each loop a pass runs on a worker: a trimming step with and without the previous rule
(:func:`~crowdflow.ranking.held.held_kept`), the same step sending back only the pairs whose kept rows changed
(``changed_only``; from a far previous rule, as in a start's first steps, and from a near one, as in its last), the ±1
rule, the histogram of ``|r|/scale``
(:func:`~crowdflow.ranking.held.held_histogram`) and the first pass's keyed sums
(:func:`~crowdflow.ranking.held.held_sums`). The peer, measured in the same run on the same block: numpy's streaming
sum of the held outcomes (the memory-bandwidth floor of a pass). θ is the data's truth plus noise (so about the
share of rows a real step keeps is kept). Prints a markdown table with the load average before and after and
writes it to ``benchmarks/results/held_kernels.md`` (``--no-write``: print only).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_DATA = Path("/tmp/crowdflow-scale/cmp-1e8-i1000-a5000-graded-s0")


def _block(data: Path, files: int) -> tuple[Any, np.ndarray]:
    """The first ``files`` files as one held block, and the truth's θ in the block's item order."""
    import pandas as pd
    import pyarrow.parquet as pq

    from crowdflow.ranking.held import encode_block

    truth = pq.read_table(data / "truth.parquet").to_pandas()
    items = pd.Index(truth["item"].to_numpy(dtype=object))
    us, vs, ys = [], [], []
    parts = sorted((data / "comparisons").glob("*.parquet"))[:files]
    for p in parts:
        t = pq.read_table(p, columns=["item_a", "item_b", "outcome"])
        i = items.get_indexer(t.column("item_a").to_numpy(zero_copy_only=False))
        j = items.get_indexer(t.column("item_b").to_numpy(zero_copy_only=False))
        s = np.where(i < j, 1.0, -1.0)
        us.append(np.minimum(i, j))
        vs.append(np.maximum(i, j))
        ys.append(s * t.column("outcome").to_numpy())
    u, v = np.concatenate(us).astype(np.int64), np.concatenate(vs).astype(np.int64)
    yo = np.concatenate(ys)
    return encode_block(u, v, yo, np.ones(u.size), items.size), truth["theta"].to_numpy()


def _best(fn: Callable[[], Any], repeats: int) -> float:
    fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return min(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="a comparisons dataset of benchmarks.scale_data")
    ap.add_argument("--files", type=int, default=10, help="files in the block (10^6 rows each in the scale sets)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--no-write", action="store_true", help="print, do not touch benchmarks/results")
    args = ap.parse_args(argv)
    from crowdflow.ranking.held import held_histogram, held_kept, held_sums

    rows, theta = _block(args.data, args.files)
    rng = np.random.default_rng(0)
    th = theta + 0.01 * rng.standard_normal(theta.size)
    prev = theta + 0.02 * rng.standard_normal(theta.size)
    near = th + 1e-4 * rng.standard_normal(theta.size)  # a late step: few rows change status
    m = rows.n_rows
    load0 = os.getloadavg()[0]
    cases: dict[str, Callable[[], Any]] = {
        "trimming step (with the previous rule)": lambda: held_kept(rows, (th, 1.25, 0), (prev, 1.3, 0)),
        "trimming step (first)": lambda: held_kept(rows, (th, 1.25, 0), None),
        "trimming step (changed pairs only, far previous rule)": lambda: held_kept(
            rows, (th, 1.25, 0), (prev, 1.3, 0), changed_only=True
        ),
        "trimming step (changed pairs only, near previous rule)": lambda: held_kept(
            rows, (th, 1.25, 0), (near, 1.2501, 0), changed_only=True
        ),
        "±1 rule step": lambda: held_kept(rows, (th, 0.5, 1), (prev, 0.5, 1)),
        "histogram of abs(r)/scale": lambda: held_histogram(rows, th, 0.5),
        "first pass (keyed sums)": lambda: held_sums(rows, None, None),
        "peer: numpy sum of the outcomes": lambda: rows.yo.sum(),
    }
    times = {name: _best(fn, args.repeats) for name, fn in cases.items()}
    peer = times["peer: numpy sum of the outcomes"]
    from datetime import UTC, datetime

    lines = [
        "# Compiled loops of a partitioned ranking pass (issue #36 part 3)",
        "",
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, `python -m benchmarks.held_kernels --files {args.files} "
        f"--repeats {args.repeats}` (module docstring for the method). {m:,} rows of `{args.data.name}`, "
        f"{rows.pu.size:,} pairs, outcomes {rows.yo.dtype}, {rows.nbytes / 1e9:.3f} GB held; best of {args.repeats}; "
        f"load average {load0:.1f} before, {os.getloadavg()[0]:.1f} after (2 cores, shared).",
        "",
        "| loop | ms | ns a row | GB/s of held bytes | × numpy's sum |",
        "|---|---|---|---|---|",
    ]
    for name, t in times.items():
        lines.append(f"| {name} | {t * 1e3:.1f} | {t / m * 1e9:.2f} | {rows.nbytes / t / 1e9:.2f} | {t / peer:.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        (Path(__file__).resolve().parent / "results" / "held_kernels.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
