"""This machine's memory bandwidth, for the per-pass limit of the large runs (docs/scale.md, issue #36).

``python -m benchmarks.bandwidth [--gb 2] [--repeats 5]`` prints JSON: the streaming read bandwidth of one core
(``a.sum()`` over a float64 array of ``--gb`` GB, far larger than the caches; best of ``--repeats``, after a warm-up
pass that also faults the pages in) and the copy bandwidth (``np.copyto``, read + write counted). The best run is
reported because the host is shared: the others measure its load, not its memory. The load average is recorded.

The limit of one pass is ``bytes read per pass ÷ read bandwidth``; :func:`pass_limit_s` gives it for a ranking pass
over held rows (:mod:`crowdflow.ranking.held`) and for a Dawid–Skene EM pass over encoded labels.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import numpy as np


def measure(gb: float = 2.0, repeats: int = 5) -> dict[str, Any]:
    """Best-of-``repeats`` streaming read (sum) and copy bandwidth in GB/s (10^9 bytes) over ``gb`` GB."""
    n = int(gb * 1e9 / 8)
    a = np.ones(n)
    a.sum()  # warm-up: pages faulted in
    read = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a.sum()
        read.append(a.nbytes / (time.perf_counter() - t0) / 1e9)
    b = np.empty_like(a)
    copy = []
    for _ in range(max(repeats // 2, 1)):
        t0 = time.perf_counter()
        np.copyto(b, a)
        copy.append(2 * a.nbytes / (time.perf_counter() - t0) / 1e9)
    return {
        "array_gb": a.nbytes / 1e9,
        "read_gb_s": max(read),
        "read_gb_s_all": [round(x, 2) for x in read],
        "copy_gb_s": max(copy),
        "load_average": os.getloadavg(),
    }


def ranking_pass_bytes(rows: int, pairs_held: int, outcome_bytes: int = 8, weight_bytes: int = 0) -> int:
    """Bytes one edge-sum pass reads from held rows: the outcome (and weight) per row, u, v, offset per held pair."""
    return rows * (outcome_bytes + weight_bytes) + pairs_held * 16


def ds_pass_bytes(labels: int, tasks: int, classes: int) -> int:
    """Bytes of one Dawid–Skene EM pass over encoded labels: int32 task + int32 worker + int8 label per label, and
    the T×M posteriors read and written (float64)."""
    return labels * 9 + 2 * tasks * classes * 8


def pass_limit_s(bytes_per_pass: int, read_gb_s: float) -> float:
    """The bandwidth limit of one pass, seconds."""
    return bytes_per_pass / (read_gb_s * 1e9)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    print(json.dumps(measure(args.gb, args.repeats), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
