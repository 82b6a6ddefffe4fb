"""Pipeline overhead: the full Prefect flow vs. the bare library call, and the CLI's cold start.

Run: ``python -m benchmarks.pipeline_overhead`` (``--sizes 4 6`` = 10^4 and 10^6 labels, ``--repeats``;
writes ``benchmarks/results/pipeline_overhead.md``).

1. **Flow vs. library** (skills job, rank-one PGD with the ``scaled`` solver). Synthetic one-coin binary
   labels from :mod:`crowdflow.synth.skills` (10 labels per task, 30 % near-spammers) are written to Parquet.
   The peer is what a notebook user runs: ``pd.read_parquet`` + ``fit_skills(df, method="pgd", solver="scaled", spectral=False)``.
   The flow is ``skills_flow(spec)`` in the same process on the same file: ingest, Great Expectations
   validation, worker-graph check, fit, manifest, ``report.html``, atomic Parquet export, Prefect task
   runs and artifacts. The fit cache is bypassed (``PREFECT_TASKS_REFRESH_CACHE``), so every repeat pays
   for a real fit, as a first run on new data does. One warm-up flow run starts Prefect's embedded API
   before timing. Medians of ``--repeats``; ratio = flow / library.
2. **Cold start** (one subprocess per call, wall time): ``crowdflow --help``, ``crowdflow validate`` and
   ``crowdflow run`` on the bundled ``deployments/specs/rte-skills.yaml`` (majority vote on Snow et al.
   RTE, 8,000 labels), against ``python -c 'import crowdflow'`` as the named peer. ``PREFECT_HOME`` is
   a temporary folder migrated by one untimed run (its first-run time is reported separately).
"""

from __future__ import annotations

import os
import tempfile

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
_HOME = tempfile.mkdtemp(prefix="crowdflow-bench-prefect-")
os.environ["PREFECT_HOME"] = _HOME
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ["PREFECT_TASKS_REFRESH_CACHE"] = "true"  # every repeat fits for real
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")  # in-process flows: keep the console quiet
os.environ.pop("PREFECT_API_URL", None)

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "pipeline_overhead.md"
SPEC = ROOT / "deployments" / "specs" / "rte-skills.yaml"


def _labels(exp: int, path: Path) -> int:
    from crowdflow.synth import skills as synth

    n_labels = 10**exp
    per_task = 10
    n_tasks = n_labels // per_task
    n_workers = 100 if exp <= 4 else 2000
    rng = np.random.default_rng(exp)
    s = np.where(rng.random(n_workers) < 0.3, rng.uniform(-0.05, 0.05, n_workers), rng.uniform(0.3, 0.9, n_workers))
    wi, ti = synth.random_assignment(n_workers, n_tasks, per_task, seed=exp)
    data = synth.one_coin_labels(s, wi, ti, 2, seed=exp)
    data.labels.to_parquet(path, index=False)
    return n_workers


def _library(path: Path) -> float:
    from crowdflow.skills import fit_skills

    t = time.perf_counter()
    df = pd.read_parquet(path)
    fit_skills(df, method="pgd", solver="scaled", spectral=False)
    return time.perf_counter() - t


def _flow(path: Path, out: Path, name: str) -> tuple[float, dict[str, float]]:
    from crowdflow.spec import parse_spec
    from flows.skills import skills_flow

    spec = parse_spec(
        {
            "name": name,
            "labels": {"path": str(path)},
            "skills": {"method": "pgd", "solver": "scaled"},
            "output": {"dir": str(out)},
        }
    )
    t = time.perf_counter()
    summary = skills_flow(spec)
    wall = time.perf_counter() - t
    man = json.loads((Path(summary["run_dir"]) / "manifest.json").read_text())
    return wall, {k: float(v) for k, v in man["timings"].items()}


def flow_vs_library(sizes: list[int], repeats: dict[int, int], work: Path) -> list[dict]:
    rows = []
    warm = work / "warm.parquet"
    _labels(3, warm)
    _flow(warm, work / "out", "warmup")  # starts the embedded API; not timed
    for exp in sizes:
        path = work / f"labels_1e{exp}.parquet"
        n_workers = _labels(exp, path)
        reps = repeats.get(exp, 3)
        lib = [_library(path) for _ in range(reps)]
        flows = [_flow(path, work / "out", f"bench-1e{exp}") for _ in range(reps)]
        walls = [w for w, _ in flows]
        steps = {k: statistics.median(t[k] for _, t in flows) for k in flows[0][1]}
        row = {
            "labels": 10**exp,
            "workers": n_workers,
            "repeats": reps,
            "library s": statistics.median(lib),
            "flow s": statistics.median(walls),
            "steps": steps,
        }
        row["ratio"] = row["flow s"] / row["library s"]
        row["rest"] = row["flow s"] - sum(steps.values())
        rows.append(row)
        print(
            f"1e{exp}: library {row['library s']:.3f} s, flow {row['flow s']:.3f} s, ratio {row['ratio']:.1f}x",
            flush=True,
        )
    return rows


def _wall(cmd: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-1500:]}")
    return wall


def cold_start(repeats: int, work: Path) -> tuple[list[dict], float]:
    exe = Path(sys.executable)
    cli = shutil.which("crowdflow", path=str(exe.parent)) or str(exe.parent / "crowdflow")
    home = work / "prefect-home"
    home.mkdir()
    env = {**os.environ, "PREFECT_HOME": str(home)}
    for var in ("PREFECT_TASKS_REFRESH_CACHE", "PREFECT_LOGGING_LEVEL"):  # the CLI as users run it
        env.pop(var, None)
    first = _wall([cli, "run", str(SPEC), "--out", str(work / "cold-first")], env)  # migrates PREFECT_HOME
    commands = [
        ("python -c 'import crowdflow' (peer)", [str(exe), "-c", "import crowdflow"]),
        ("crowdflow --help", [cli, "--help"]),
        ("crowdflow validate rte-skills.yaml", [cli, "validate", str(SPEC)]),
    ]
    rows = []
    for label, cmd in commands:
        rows.append({"command": label, "s": statistics.median(_wall(cmd, env) for _ in range(repeats))})
        print(f"{label}: {rows[-1]['s']:.2f} s", flush=True)
    runs = [_wall([cli, "run", str(SPEC), "--out", str(work / f"cold-{k}")], env) for k in range(repeats)]
    rows.append({"command": "crowdflow run rte-skills.yaml", "s": statistics.median(runs)})
    print(f"crowdflow run: {rows[-1]['s']:.2f} s (first run on a fresh PREFECT_HOME {first:.2f} s)", flush=True)
    peer = rows[0]["s"]
    for r in rows:
        r["ratio"] = r["s"] / peer
    return rows, first


def _host() -> str:
    try:
        model = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        model = platform.processor() or "unknown CPU"
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    load = os.getloadavg()[0]
    return (
        f"{model}, {os.cpu_count()} cores, {mem:.0f} GiB, Python {platform.python_version()}, "
        f"{platform.system()} {platform.machine()}; single-threaded BLAS; load average {load:.1f} at start "
        "(shared host: other jobs ran at the same time, so timings are indicative)"
    )


def render(flow_rows: list[dict], cold_rows: list[dict], first: float, host: str, total: float) -> str:
    from crowdflow._version import __version__

    lines = [
        "# Pipeline overhead: full flow vs. bare library call, and CLI cold start",
        "",
        f"Generated by `python -m benchmarks.pipeline_overhead` (crowdflow {__version__}) on {host}.",
        "",
        "## 1. Skills flow vs. `read_parquet` + `fit_skills` (same Parquet file, same process)",
        "",
        "Synthetic one-coin binary labels (10 per task, 30 % near-spammers). Library = `pd.read_parquet` + "
        '`fit_skills(df, method="pgd", solver="scaled", spectral=False)`. Flow = `skills_flow(spec)`: ingest + Great Expectations '
        "validation, worker-graph check, fit (cache bypassed), report.html, atomic export, Prefect task runs "
        "and artifacts; the embedded API was started by an untimed warm-up run. Medians of the repeats; "
        "step times are the medians of the manifest's `timings`; *rest* = flow wall time minus the timed steps "
        "(export, manifest, Prefect orchestration).",
        "",
        "| labels | workers | repeats | library s | flow s | **flow / library** | ingest + validate s | graph check s "
        "| fit s | report s | rest s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in flow_rows:
        st = r["steps"]
        lines.append(
            f"| {r['labels']:,} | {r['workers']:,} | {r['repeats']} | {r['library s']:.3f} | {r['flow s']:.2f} | "
            f"**{r['ratio']:.1f}×** | {st.get('ingest_validate', float('nan')):.2f} | "
            f"{st.get('check_graph', float('nan')):.2f} | {st.get('fit', float('nan')):.2f} | "
            f"{st.get('report', float('nan')):.2f} | {r['rest']:.2f} |"
        )
    lines += [
        "",
        "## 2. Cold start (one subprocess per call, wall time)",
        "",
        "`deployments/specs/rte-skills.yaml`: majority vote on Snow et al. RTE (8,000 labels, 800 gold). "
        "`PREFECT_HOME` migrated beforehand; each `run` starts Prefect's embedded API. Medians; ratio against "
        "`python -c 'import crowdflow'`.",
        "",
        "| command | median s | ratio vs. `import crowdflow` |",
        "|---|---|---|",
    ]
    for r in cold_rows:
        lines.append(f"| `{r['command']}` | {r['s']:.2f} | {r['ratio']:.1f}× |")
    lines += [
        "",
        f"First `crowdflow run` on a fresh `PREFECT_HOME` (database migrations included): {first:.1f} s.",
        "",
        f"Total benchmark time: {total:.0f} s.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[4, 6], help="label counts as powers of ten")
    ap.add_argument("--repeats", type=int, default=None, help="repeats per size (default 5 at ≤1e4, 3 above)")
    ap.add_argument("--cold-repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    host = _host()
    t0 = time.perf_counter()
    repeats = {e: args.repeats or (5 if e <= 4 else 3) for e in args.sizes}
    with tempfile.TemporaryDirectory(prefix="crowdflow-overhead-") as tmp:
        work = Path(tmp)
        flow_rows = flow_vs_library(args.sizes, repeats, work)
        cold_rows, first = cold_start(args.cold_repeats, work)
    text = render(flow_rows, cold_rows, first, host, time.perf_counter() - t0)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    shutil.rmtree(_HOME, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
