"""The flow's memory step by step: one ``crowdflow run`` in this process, its RSS sampled every 2 ms (issue #36).

Run (in the folder of a spec, with the environment ``benchmarks.scale_out`` gives its runs, e.g. ``PREFECT_HOME``):
``python -m benchmarks.flow_steps spec.yaml [--trace fit_on_workers]``.

Each pipeline step the skills flow calls (the Prefect tasks and library calls that ``flows.skills`` and
``flows.common`` name: ingest, split, encode, check, fit, review, export …) is wrapped: before and after it, one
line with the largest RSS sampled since the previous line (*peak*), the RSS now (*end*), the Arrow pool's bytes
allocated now and its high-water mark (MB). With ``--trace NAME``, ``tracemalloc`` runs from that step's start to
its end (Python-level allocations only: numpy's included, Arrow's and Parquet's not) and the library calls inside
a partitioned skills fit (the EM, the consensus pass, the skills table, its missing reasons, the review) print
their traced size and peak, with the step's 10 largest live allocation sites at its end. Only the flow process is
measured: with a Dask runner the workers are other processes. The account in docs/scale.md ("The account per
step") was made with it, at 2·10^3 and 2·10^5 workers on the ``benchmarks.skills_growth`` data sets.
"""

from __future__ import annotations

import argparse
import threading
import time
import tracemalloc
from collections.abc import Callable
from types import ModuleType
from typing import Any

STEPS = {
    "flows.skills": (
        "load_inputs",
        "encode_labels",
        "list_dataset",
        "split_on_workers",
        "encode_on_workers",
        "check_graph",
        "fit_step",
        "fit_on_workers",
        "majority_vote",
        "output_metrics",
        "review_skills",
        "output_tables",
        "finish_run",
    ),
    "flows.common": ("build_manifest", "render_report_task", "export_run"),
}
INNER = (
    "elsewhere",
    "em_fit",
    "consensus_pass",
    "worker_table",
    "diagnostics_table",
    "explain_missing_skills",
    "merge_review_parts",
)


def _rss() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * 4096


class _Sampler(threading.Thread):
    """The largest RSS since the last :meth:`take`, sampled every 2 ms."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0

    def run(self) -> None:
        while True:
            self.peak = max(self.peak, _rss())
            time.sleep(0.002)

    def take(self) -> int:
        p, self.peak = max(self.peak, _rss()), _rss()
        return p


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec")
    ap.add_argument("--trace", default=None, help="a step name: tracemalloc from its start to its end")
    a = ap.parse_args(argv)
    import importlib

    import pyarrow as pa

    sampler = _Sampler()
    sampler.start()

    def line(name: str) -> None:
        traced = ""
        if tracemalloc.is_tracing():
            cur, peak = tracemalloc.get_traced_memory()
            traced = f"  traced {cur / 1e6:7.1f} peak {peak / 1e6:7.1f}"
            tracemalloc.reset_peak()
        pool = pa.default_memory_pool()
        print(
            f"STEP {name:26s} peak {sampler.take() / 1e6:7.1f}  end {_rss() / 1e6:7.1f}  arrow "
            f"{pa.total_allocated_bytes() / 1e6:6.1f} max {pool.max_memory() / 1e6:6.1f}{traced}",
            flush=True,
        )

    def wrap(mod: ModuleType, name: str, traced: bool = False) -> None:
        fn: Callable[..., Any] = getattr(mod, name)

        def step(*args: Any, **kwargs: Any) -> Any:
            if traced:
                tracemalloc.start(4)
            line("<" + name)
            try:
                return fn(*args, **kwargs)
            finally:
                line(">" + name)
                if traced:
                    for st in tracemalloc.take_snapshot().statistics("lineno")[:10]:
                        print("     ", st, flush=True)
                    tracemalloc.stop()

        setattr(mod, name, step)

    for mod_name, names in STEPS.items():
        mod = importlib.import_module(mod_name)
        for n in names:
            if hasattr(mod, n):
                wrap(mod, n, traced=n == a.trace)
    if a.trace:
        part = importlib.import_module("crowdflow.skills.partitioned")
        for n in INNER:
            if hasattr(part, n):
                wrap(part, n)
    from flows.cli import main as cli

    line("start")
    rc = cli(["run", a.spec])
    line("end")
    with open("/proc/self/status", encoding="ascii") as f:
        hwm = next(x for x in f if x.startswith("VmHWM"))
    print(f"STEP rc {rc}; {hwm.strip()}")
    return int(rc)


if __name__ == "__main__":
    raise SystemExit(main())
