"""Scale-out: a skills, ranking or personal-models run on a partitioned Parquet dataset through ``crowdflow run``.

Run: ``python -m benchmarks.scale_out --labels 1e7`` (skills; ``--runner dask|inline|both``, ``--method``,
``--n-workers``, ``--memory-limit``, ``--partitions``, ``--keep-data``) or ``python -m benchmarks.scale_out
--job ranking --comparisons 1e7 --outliers none|trimmed`` (``--items``, ``--annotators``, ``--outcome
graded|pm1``) or ``--job personal_models --samples 1e7 --agents 100000`` (``--blocks``, ``--tol``); adds its
runs to ``benchmarks/results/scale_out.json`` and rewrites
``benchmarks/results/scale_out.md`` from all recorded runs (issue #21: the flow process's peak RSS under 2 GB,
wall time and peak RSS per process).

1. **Data** (:mod:`benchmarks.scale_data`): skills, N Dawid–Skene labels as Parquet files of ~10^6 rows, some
   tasks spanning two files, and gold labels for 1 % of the tasks; ranking, N pairwise comparisons of n items
   (θ ~ N(0, 1), Zipf item popularity, graded ``θ_a − θ_b + N(0, 0.5²)`` or ±1 outcomes, 5 % outliers against
   the true order, 2 % of the annotators flipping 80 % of their answers) and ``truth.parquet`` (item, theta).
   Generated into ``--data-root`` if missing (and deleted after the runs unless ``--keep-data`` or it was
   there before).
2. **Spec**: ``labels: {path: <the folder>}``, ``truth``, ``skills: {method}`` (or ``job: ranking``,
   ``comparisons: {path}``, ``ranking: {outliers}``), ``runner: {kind: dask, n_workers, memory_limit,
   partitions, scratch_dir}``, ``output: {report: false}``, ``cache: {enabled: false}``; ``--runner inline``
   runs the same spec with ``runner: {kind: inline}`` (the flow reads every file into its own memory: the
   baseline the Dask path is compared with; sensible up to ~10^7 rows).
3. **Run**: ``python -m flows.cli run spec.yaml`` as a subprocess (``PREFECT_HOME`` in the data root, kept
   between runs so only the first run pays Prefect's database migrations; the ephemeral API starts a uvicorn
   server as a child process).
4. **Memory**: every 0.2 s the whole process tree is listed with psutil and each process's RSS read, and its
   kernel high-water mark ``VmHWM`` from ``/proc/<pid>/status`` (a peak the sampling cannot miss, as long
   as the process was seen once). Processes are classed by command line: *flow* (the CLI process; with a
   LocalCluster it also hosts the Dask scheduler and the nannies, which run inside the process that starts
   the cluster), *prefect-server* (uvicorn), *dask-worker* (the nannies' ``multiprocessing.spawn``
   children), *scheduler*/*nanny* (separate ``dask scheduler``/``dask worker`` processes, for a cluster
   started by hand), *other* (the multiprocessing resource tracker…).
5. **Record**: wall time of the subprocess, the manifest's per-step ``timings`` and ``metrics`` (skills:
   accuracy on the gold tasks; ranking: n_outliers, and Kendall's τ and Spearman's ρ of the run's
   ``ranking`` scores against the true θ), the partitioned record (files, buckets, passes), peak RSS per
   process and class.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import shlex  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import psutil  # noqa: E402
import yaml  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
OUT_MD = RESULTS / "scale_out.md"
OUT_JSON = RESULTS / "scale_out.json"
TARGET_FLOW_RSS = 2 * 10**9  # issue #21: the flow process under 2 GB
NOTES_MARK = "<!-- notes: everything below this line is kept when the script rewrites the file -->"
CLASSES = ("flow", "prefect-server", "dask-worker", "scheduler", "nanny", "other")
GB = 1e9


def classify(proc: psutil.Process, root_pid: int) -> str:
    """The class of a process of the run's tree, from its pid and command line (see the module docstring)."""
    if proc.pid == root_pid:
        return "flow"
    try:
        cmd = " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return "other"
    if "uvicorn" in cmd or "prefect.server" in cmd or "prefect server" in cmd:
        return "prefect-server"
    if re.search(r"dask[- ]scheduler|distributed\.cli\.dask_scheduler", cmd):
        return "scheduler"
    if re.search(r"dask[- ]worker|distributed\.cli\.dask_worker", cmd):
        return "nanny"
    if "multiprocessing.spawn" in cmd or "--multiprocessing-fork" in cmd:
        return "dask-worker"
    return "other"


def _hwm(pid: int) -> int | None:
    """The kernel's peak RSS of a process (``VmHWM``, bytes), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


@dataclass
class ProcStat:
    """What the sampler saw of one process."""

    pid: int
    cls: str
    cmd: str
    peak_rss: int = 0
    hwm: int = 0
    first_s: float = 0.0
    last_s: float = 0.0


@dataclass
class TreeSampler:
    """Polls a process tree: RSS and VmHWM per process, the sum per class at each sample."""

    root_pid: int
    interval: float = 0.2
    procs: dict[int, ProcStat] = field(default_factory=dict)
    class_sum_peak: dict[str, int] = field(default_factory=dict)
    tree_peak: int = 0
    n_samples: int = 0
    flow_trace: list[tuple[float, int]] = field(default_factory=list)
    _t0: float = field(default_factory=time.perf_counter)

    def sample(self) -> None:
        try:
            root = psutil.Process(self.root_pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        now = time.perf_counter() - self._t0
        sums: dict[str, int] = {}
        for p in tree:
            try:
                rss = p.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            st = self.procs.get(p.pid)
            if st is None:
                try:
                    cmd = " ".join(p.cmdline())
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    cmd = "?"
                st = ProcStat(p.pid, classify(p, self.root_pid), cmd, first_s=now)
                self.procs[p.pid] = st
            st.peak_rss = max(st.peak_rss, rss)
            st.hwm = max(st.hwm, _hwm(p.pid) or 0, rss)
            st.last_s = now
            if p.pid == self.root_pid:
                self.flow_trace.append((round(now, 2), rss))
            sums[st.cls] = sums.get(st.cls, 0) + rss
        for cls, s in sums.items():
            self.class_sum_peak[cls] = max(self.class_sum_peak.get(cls, 0), s)
        self.tree_peak = max(self.tree_peak, sum(sums.values()))
        self.n_samples += 1

    def summary(self) -> dict[str, Any]:
        per_class: dict[str, dict[str, Any]] = {}
        for st in self.procs.values():
            c = per_class.setdefault(st.cls, {"n": 0, "max_peak_rss": 0, "max_hwm": 0})
            c["n"] += 1
            c["max_peak_rss"] = max(c["max_peak_rss"], st.peak_rss)
            c["max_hwm"] = max(c["max_hwm"], st.hwm)
        for cls, c in per_class.items():
            c["sum_peak_rss"] = self.class_sum_peak.get(cls, 0)
        return {
            "interval_s": self.interval,
            "samples": self.n_samples,
            "tree_peak_rss": self.tree_peak,
            "flow_trace": self.flow_trace,
            "classes": per_class,
            "processes": [
                {
                    "pid": st.pid,
                    "class": st.cls,
                    "cmd": st.cmd[:160],
                    "peak_rss": st.peak_rss,
                    "hwm": st.hwm,
                    "seen_s": [round(st.first_s, 1), round(st.last_s, 1)],
                }
                for st in sorted(self.procs.values(), key=lambda s: (CLASSES.index(s.cls), s.pid))
            ],
        }


def _fmt_n(n: int) -> str:
    exp = len(str(n)) - 1
    return f"1e{exp}" if n == 10**exp else str(n)


def ensure_data(root: Path, n_labels: int, n_workers: int, n_classes: int, seed: int) -> tuple[Path, dict, bool]:
    """The dataset folder for these arguments, generated if missing; returns (folder, its info, made now)."""
    from benchmarks.scale_data import write_dataset

    folder = root / f"data-{_fmt_n(n_labels)}-w{n_workers}-k{n_classes}-s{seed}"
    info_file = folder / "dataset.json"
    if info_file.is_file():
        return folder, json.loads(info_file.read_text()), False
    print(f"generating {n_labels:,} labels into {folder} …", flush=True)
    shutil.rmtree(folder, ignore_errors=True)
    write_dataset(folder, n_labels, n_workers, n_classes, seed, verbose=True)
    return folder, json.loads(info_file.read_text()), True


def ensure_comparisons(root: Path, args: argparse.Namespace) -> tuple[Path, dict, bool]:
    """The comparisons dataset for these arguments, generated if missing; returns (folder, its info, made now)."""
    from benchmarks.scale_data import write_comparisons

    n = int(args.comparisons)
    folder = root / f"cmp-{_fmt_n(n)}-i{args.items}-a{args.annotators}-{args.outcome}-s{args.seed}"
    info_file = folder / "dataset.json"
    if info_file.is_file():
        return folder, json.loads(info_file.read_text()), False
    print(f"generating {n:,} comparisons into {folder} …", flush=True)
    shutil.rmtree(folder, ignore_errors=True)
    write_comparisons(folder, n, args.items, args.annotators, args.seed, args.outcome, verbose=True)
    return folder, json.loads(info_file.read_text()), True


def ensure_agents(root: Path, args: argparse.Namespace) -> tuple[Path, dict, bool]:
    """The personal-models dataset for these arguments, generated if missing; returns (folder, its info, made now)."""
    from benchmarks.scale_data import write_agents

    n = int(args.samples)
    folder = root / f"agents-{_fmt_n(n)}-n{args.agents}-s{args.seed}"
    info_file = folder / "dataset.json"
    if info_file.is_file():
        return folder, json.loads(info_file.read_text()), False
    print(f"generating {n:,} samples of {args.agents:,} agents into {folder} …", flush=True)
    shutil.rmtree(folder, ignore_errors=True)
    write_agents(folder, n, args.agents, seed=args.seed, verbose=True)
    return folder, json.loads(info_file.read_text()), True


def write_spec(
    path: Path, data: Path, name: str, args: argparse.Namespace, runner: str, scratch: Path
) -> dict[str, Any]:
    """The run's spec (YAML) next to its output folder; returns it as a dict."""
    skills: dict[str, Any] = {"method": args.method}
    for kv in args.skills_option:
        k, _, v = kv.partition("=")
        skills[k] = yaml.safe_load(v)
    run: dict[str, Any] = {"kind": runner}
    if runner == "dask":
        run.update(n_workers=args.n_workers, scratch_dir=str(scratch))
        if args.memory_limit:
            run["memory_limit"] = args.memory_limit
        if args.partitions:
            run["partitions"] = args.partitions
    if args.job == "personal_models":
        run.pop("partitions", None)
        pm = {"method": "djam_blocked", "loss": "quadratic", "n_blocks": args.blocks, "tol": args.tol, "reg": 0.1}
        inputs = {"agents": {"path": str(data / "agents")}, "edges": {"path": str(data / "edges.parquet")},
                  "personal_models": pm}  # fmt: skip
    elif args.job == "ranking":
        run.pop("partitions", None)  # task buckets: a skills setting
        ranking: dict[str, Any] = {"outliers": args.outliers}
        for kv in args.ranking_option:
            k, _, v = kv.partition("=")
            ranking[k] = yaml.safe_load(v)
        inputs: dict[str, Any] = {"comparisons": {"path": str(data / "comparisons")}, "ranking": ranking}
    else:
        inputs = {
            "labels": {"path": str(data / "labels")},
            "truth": {"path": str(data / "truth.parquet")},
            "skills": skills,
        }
    spec = {
        "name": name,
        "job": args.job,
        **inputs,
        "runner": run,
        "output": {"dir": "out", "report": bool(getattr(args, "report", False))},  # off unless asked
        "cache": {"enabled": False},
    }
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return spec


def run_cli(spec_path: Path, workdir: Path, prefect_home: Path, timeout: float) -> dict[str, Any]:
    """``crowdflow run spec`` as a subprocess with the tree sampler; returns wall time, exit code, memory, logs."""
    env = {
        **os.environ,
        "PREFECT_HOME": str(prefect_home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    env.pop("PREFECT_API_URL", None)
    cmd = [sys.executable, "-m", "flows.cli", "run", str(spec_path)]
    out_log = workdir / "stdout.txt"
    err_log = workdir / "stderr.txt"
    t0 = time.perf_counter()
    now = datetime.now()
    day_s = now.hour * 3600 + now.minute * 60 + now.second + now.microsecond / 1e6
    with out_log.open("w") as out, err_log.open("w") as err:
        proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=out, stderr=err)
        sampler = TreeSampler(proc.pid)
        timed_out = False
        while proc.poll() is None:
            sampler.sample()
            if time.perf_counter() - t0 > timeout:
                timed_out = True
                _stop_tree(proc.pid)
                break
            time.sleep(sampler.interval)
        rc = proc.wait()
    wall = time.perf_counter() - t0
    stdout = out_log.read_text()
    stderr = err_log.read_text()
    m = re.search(r"^run (\S+) completed: (.+)$", stdout, re.MULTILINE)
    run_dir = None
    if m:
        run_dir = Path(m.group(2).strip())
        run_dir = run_dir if run_dir.is_absolute() else workdir / run_dir
    return {
        "cmd": " ".join(shlex.quote(c) for c in cmd),
        "returncode": rc,
        "timed_out": timed_out,
        "wall_s": wall,
        "memory": sampler.summary(),
        "run_dir": str(run_dir) if run_dir else None,
        "stdout_tail": stdout[-2000:],
        "stderr_tail": stderr[-4000:],
        "timeline": log_timeline(stderr, day_s),
    }


def _stop_tree(pid: int) -> None:
    """Terminate the run we started and its descendants (by pid), then kill what is left."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
    _, alive = psutil.wait_procs(procs, timeout=10)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()


_LOG_LINE = re.compile(r"^(\d\d):(\d\d):(\d\d\.\d+) \| \w+ +\| (.*)$")


def log_timeline(stderr: str, t0: float | None = None) -> list[tuple[float, str]]:
    """Seconds since ``t0`` (local seconds of the day; default the first log line) of each task's end (and the
    flow's start and end), from the run's log.

    Gives the steps' times of a run that failed before writing its manifest, and where the flow's memory peaked.
    """
    events: list[tuple[float, str]] = []
    for line in stderr.splitlines():
        m = _LOG_LINE.match(line)
        if not m:
            continue
        t = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
        if t0 is None:
            t0 = t
        dt = (t - t0) % 86400  # past midnight
        msg = m.group(4)
        what = re.match(r"(Task run|Flow run) '([^']+)' - (Beginning flow run|Finished in state \w+)", msg)
        if what:
            events.append((round(dt, 1), f"{what.group(2)}: {what.group(3)}"))
    return events


def _load(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text()) if path.is_file() else []


def _key(r: dict[str, Any]) -> tuple:
    c = r["config"]
    if _job(r) == "personal_models":
        return ("personal_models", c["samples"], c["agents"], c["seed"], c["blocks"], c["tol"], c["runner"],
                c.get("n_workers"), c.get("memory_limit"))  # fmt: skip
    if _job(r) == "ranking":
        return ("ranking", c["comparisons"], c["items"], c["annotators"], c["outcome"], c["seed"], c["outliers"],
                c["runner"], c.get("n_workers"), c.get("memory_limit"), tuple(c.get("ranking_options", [])))  # fmt: skip
    return (c["labels"], c["workers"], c["classes"], c["seed"], c["method"], c["runner"], c.get("n_workers"),
            c.get("memory_limit"), c.get("partitions"), tuple(c.get("skills_options", [])))  # fmt: skip


def _job(r: dict[str, Any]) -> str:
    return r["config"].get("job", "skills")


def ranking_accuracy(run_dir: Path, manifest: dict[str, Any], truth: Path) -> dict[str, Any]:
    """Kendall's τ (τ-b) and Spearman's ρ of the run's ranking scores against the true θ (items of both)."""
    import pandas as pd
    from scipy.stats import kendalltau, spearmanr

    rel = (manifest.get("outputs") or {}).get("ranking", {}).get("path", "ranking.parquet")
    path = run_dir / rel
    if not path.is_file():
        return {}
    ranking = pd.read_parquet(path, columns=["item", "score", "component"])
    both = ranking.merge(pd.read_parquet(truth), on="item")
    tau = kendalltau(both["score"], both["theta"]).statistic
    rho = spearmanr(both["score"], both["theta"]).statistic
    return {
        "n_items_scored": len(both),
        "n_components": int(ranking["component"].nunique()),
        "kendall_tau": float(tau),
        "spearman_rho": float(rho),
    }


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
    return f"{model}, {os.cpu_count()} cores, {mem:.0f} GiB, Python {platform.python_version()}"


def one_run(args: argparse.Namespace, runner: str, data: Path, info: dict[str, Any], root: Path) -> dict[str, Any]:
    """Write the spec, run it, read its manifest; the record that goes into scale_out.json."""
    if args.job == "personal_models":
        tag = f"pm{_fmt_n(info['samples'])}-n{info['agents']}-b{args.blocks}-{runner}"
    elif args.job == "ranking":
        tag = f"cmp{_fmt_n(info['comparisons'])}-i{info['items']}-{info['outcome']}-{args.outliers}-{runner}"
    else:
        tag = f"{_fmt_n(info['labels'])}-w{info['workers']}-{args.method}-{runner}"
    work = root / f"run-{tag}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    scratch = root / "scratch"
    spec = write_spec(work / "spec.yaml", data, f"scale-{tag}", args, runner, scratch)
    bandwidth = None
    if args.job in ("ranking", "skills"):
        from benchmarks.bandwidth import measure

        bandwidth = measure(gb=0.5, repeats=3)["read_gb_s"]  # at the load the run starts under
    load = os.getloadavg()
    print(f"[{tag}] crowdflow run {work / 'spec.yaml'} (load average {load[0]:.1f}) …", flush=True)
    res = run_cli(work / "spec.yaml", work, root / "prefect-home", args.timeout)
    manifest: dict[str, Any] = {}
    if res["run_dir"] and (Path(res["run_dir"]) / "manifest.json").is_file():
        manifest = json.loads((Path(res["run_dir"]) / "manifest.json").read_text())
    consensus_bytes = 0
    if res["run_dir"]:
        consensus_bytes = sum(f.stat().st_size for f in Path(res["run_dir"]).rglob("*.parquet"))
    if args.job == "personal_models":
        config: dict[str, Any] = {
            "job": "personal_models",
            "samples": info["samples"],
            "agents": info["agents"],
            "seed": info["seed"],
            "blocks": args.blocks,
            "tol": args.tol,
            "runner": runner,
            "n_workers": args.n_workers if runner == "dask" else None,
            "memory_limit": args.memory_limit if runner == "dask" else None,
        }
    elif args.job == "ranking":
        config = {
            "job": "ranking",
            "comparisons": info["comparisons"],
            "items": info["items"],
            "annotators": info["annotators"],
            "outcome": info["outcome"],
            "seed": info["seed"],
            "outliers": args.outliers,
            "ranking_options": list(args.ranking_option),
            "runner": runner,
            "n_workers": args.n_workers if runner == "dask" else None,
            "memory_limit": args.memory_limit if runner == "dask" else None,
        }
    else:
        config = {
            "labels": info["labels"],
            "workers": info["workers"],
            "classes": info["classes"],
            "seed": info["seed"],
            "method": args.method,
            "runner": runner,
            "n_workers": args.n_workers if runner == "dask" else None,
            "memory_limit": args.memory_limit if runner == "dask" else None,
            "partitions": args.partitions if runner == "dask" else None,
            "skills_options": list(args.skills_option),
            **({"report": True} if getattr(args, "report", False) else {}),
        }
    record = {
        "config": config,
        "dataset": info,
        "spec": spec,
        "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "host": _host(),
        "load_before": [round(x, 1) for x in load],
        "load_after": [round(x, 1) for x in os.getloadavg()],
        "bandwidth_gb_s": bandwidth,
        "command": "python -m benchmarks.scale_out " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "status": "completed" if res["returncode"] == 0 and manifest else "failed",
        "returncode": res["returncode"],
        "timed_out": res["timed_out"],
        "wall_s": round(res["wall_s"], 2),
        "timings": manifest.get("timings", {}),
        "metrics": manifest.get("metrics", {}),
        "fit": manifest.get("fit", {}),
        "partitioned": manifest.get("partitioned"),
        "output_parquet_bytes": consensus_bytes,
        "memory": res["memory"],
    }
    if args.job == "ranking" and res["run_dir"] and manifest:
        record["accuracy"] = ranking_accuracy(Path(res["run_dir"]), manifest, data / "truth.parquet")
    if record["status"] != "completed":
        record["stderr_tail"] = res["stderr_tail"]
        record["stdout_tail"] = res["stdout_tail"]
    record["timeline"] = res["timeline"]
    flow = record["memory"]["classes"].get("flow", {})
    quality = record.get("accuracy") if args.job == "ranking" else record["metrics"].get("accuracy")
    print(
        f"[{tag}] {record['status']} in {record['wall_s']:.1f} s; flow peak RSS {flow.get('max_hwm', 0) / GB:.2f} GB; "
        f"timings {record['timings']}; metrics {record['metrics']}; accuracy {quality}",
        flush=True,
    )
    if record["status"] != "completed":
        print(res["stderr_tail"][-2500:], file=sys.stderr, flush=True)
    if not args.keep_output:
        shutil.rmtree(work / "out", ignore_errors=True)
    return record


def flow_by_step(r: dict[str, Any]) -> list[tuple[float, str, int]]:
    """Each logged step's end with the flow's largest sampled RSS since the previous one."""
    trace = r["memory"].get("flow_trace") or []
    if not trace:
        return []
    out = []
    prev = -1.0
    for t, what in r.get("timeline") or []:
        rss = max((b for s, b in trace if prev < s <= t), default=0)
        out.append((t, re.sub(r"-[0-9a-f]{3}:", ":", what).replace("Finished in state ", ""), rss))
        prev = t
    tail = max((b for s, b in trace if s > prev), default=0)
    if tail:
        out.append((trace[-1][0], "process end", tail))
    return out


def _short(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _gb(b: float | None) -> str:
    return "–" if not b else f"{b / GB:.2f}"


def _cls(r: dict[str, Any], cls: str, key: str = "max_hwm") -> float | None:
    return r["memory"]["classes"].get(cls, {}).get(key)


def _cluster(r: dict[str, Any]) -> str:
    c = r["config"]
    if c["runner"] != "dask":
        return "inline"
    if _job(r) != "skills":
        return f"dask {c['n_workers']} × {c['memory_limit'] or 'default'}"
    return f"dask {c['n_workers']} × {c['memory_limit'] or 'default'}, {c['partitions'] or 'default'} buckets"


def _memory_cells(r: dict[str, Any]) -> str:
    """The memory columns shared by both tables: flow, ≤ 2 GB, workers, Prefect server, tree."""
    flow = _cls(r, "flow")
    ok = "yes" if flow and flow < TARGET_FLOW_RSS else "**no**"
    wk = _cls(r, "dask-worker")
    wk_s = f"{_gb(wk)} ({_gb(_cls(r, 'dask-worker', 'sum_peak_rss'))})" if wk else "–"
    return f"**{_gb(flow)}** | {ok} | {wk_s} | {_gb(_cls(r, 'prefect-server'))} | {_gb(r['memory']['tree_peak_rss'])}"


def _ranking_row(r: dict[str, Any]) -> str:
    c, d, m, a = r["config"], r["dataset"], r["metrics"], r.get("accuracy") or {}
    tau = f"{a['kendall_tau']:.4f}" if a.get("kendall_tau") is not None else "–"
    rho = f"{a['spearman_rho']:.4f}" if a.get("spearman_rho") is not None else "–"
    planted = d["outlier_rows"] + d["flipped_rows"]
    flagged = f"{m['n_outliers']:,}" if m.get("n_outliers") is not None else "–"
    passes = (r.get("partitioned") or {}).get("passes", "–")
    outliers = c["outliers"] + (f" ({', '.join(c['ranking_options'])})" if c.get("ranking_options") else "")
    return (
        f"| {c['comparisons']:,} | {d['files']} | {c['items']:,} | {c['annotators']:,} | {c['outcome']} | "
        f"{outliers} | {_cluster(r)} | {r['wall_s']:.1f} | {_memory_cells(r)} | {tau} | {rho} | "
        f"{flagged} ({planted:,}) | {passes} | {r['status']} |"
    )


#: The stated read bandwidth of this machine (docs/scale.md: `python -m benchmarks.bandwidth`, one core, quiet host).
STATED_READ_GB_S = 31.7


def _pass_row(r: dict[str, Any]) -> str | None:
    """One row of the ranking passes-vs-limit table, or None for a run without the held-pass record."""
    c, f, t = r["config"], r.get("fit") or {}, r.get("timings") or {}
    if not f.get("held_bytes") or not f.get("held_passes"):
        return None
    per = f["held_pass_s"] / f["held_passes"]
    limit = f["held_bytes"] / (STATED_READ_GB_S * 1e9)
    bw = r.get("bandwidth_gb_s")
    limit_now = f["held_bytes"] / (bw * 1e9) if bw else None
    now = f"{bw:.1f} GB/s: {limit_now:.4f} s, **{per / limit_now:.0f}×**" if limit_now else "–"
    load = f"{r['load_before'][0]:.1f} → {r['load_after'][0]:.1f}"
    rest = f["fit_s"] - f["read_s"] - f["held_pass_s"]
    return (
        f"| {c['comparisons']:,} | {c['outliers']} | {load} | {r['wall_s']:.1f} | {t.get('ingest_validate', 0):.1f} | "
        f"{t.get('fit', 0):.1f} | {f['read_s']:.1f} | {f['held_passes']} | {f['held_pass_s']:.1f} | {per:.3f} | "
        f"{rest:.1f} | {f['held_bytes'] / 1e9:.3f} | {limit:.4f} | **{per / limit:.0f}×** | {now} |"
    )


def _em_pass_row(r: dict[str, Any]) -> str | None:
    """One row of the skills EM-passes table (the manifest's ``partitioned.timing``), or None without it."""
    c, t = r["config"], r.get("timings") or {}
    tm = (r.get("partitioned") or {}).get("timing") or {}
    if not tm.get("em_passes") or not tm.get("held_bytes"):
        return None
    n = tm["em_passes"]
    per = tm["em_s"] / n
    limit = tm["held_bytes"] / (STATED_READ_GB_S * 1e9)
    bw = r.get("bandwidth_gb_s")
    now = f"{bw:.1f} GB/s: **{per / (tm['held_bytes'] / (bw * 1e9)):.0f}×**" if bw else "–"
    load = f"{r['load_before'][0]:.1f} → {r['load_after'][0]:.1f}"
    groups = " / ".join(f"{g / 1e6:.1f}" for g in tm.get("group_labels") or [])
    return (
        f"| {c['labels']:,} | {c['workers']:,} | {load} | {r['wall_s']:.1f} | {t.get('ingest_validate', 0):.1f} | "
        f"{t.get('check_graph', 0):.1f} | {t.get('fit', 0):.1f} | {n} | {tm['em_s']:.1f} | {per:.3f} | "
        f"{tm['kernel_s'] / n:.3f} | {tm['worker_s'] / n:.3f} | {(tm['pass_s'] - tm['worker_s']) / n:.3f} | "
        f"{tm['between_passes_s'] / n:.3f} | {tm.get('consensus_s', 0):.1f} | {groups} | "
        f"{tm['held_bytes'] / 1e9:.3f} | {limit:.4f} | **{per / limit:.0f}×** | {now} |"
    )


def render(records: list[dict[str, Any]], notes: str) -> str:
    """The whole markdown file from every recorded run (and the notes kept from the previous file)."""
    skills = sorted(
        (r for r in records if _job(r) == "skills"),
        key=lambda r: (r["config"]["labels"], r["config"]["runner"] != "dask", r["when"]),
    )
    ranking = sorted(
        (r for r in records if _job(r) == "ranking"),
        key=lambda r: (r["config"]["comparisons"], r["config"]["outliers"], r["config"]["runner"] != "dask", r["when"]),
    )
    lines = [
        "# Scale-out: skills, ranking and personal models on partitioned Parquet datasets through `crowdflow run` "
        "(issue #21)",
        "",
        "Generated by `python -m benchmarks.scale_out` (method in its docstring) from `scale_out.json`; one row per "
        "configuration, the latest run of each. Data: `benchmarks/scale_data.py` (Dawid–Skene workers, 20 % weak "
        "and 10 % spammers, log-normal activity; 3–7 labels per task; files of ~10^6 rows, 2 % of each file's rows "
        "moved to the next file so ~10 % of the tasks span two files; gold labels for 1 % of the tasks). The run: "
        "`crowdflow run spec.yaml` in a subprocess (Prefect ephemeral API, `cache.enabled: false`, "
        "`output.report: false`). **Peak RSS** is the kernel's high-water mark `VmHWM` of each process, read with "
        "the RSS of the whole tree every 0.2 s (psutil); *flow* is the CLI process, which with a LocalCluster also "
        "hosts the Dask scheduler and the nannies; *workers* is the largest Dask worker process and, in brackets, "
        "the largest sum over the workers at one sample; *tree* is the largest sum over all processes at one "
        f"sample. Target: the flow under {TARGET_FLOW_RSS / GB:.0f} GB. Shared 2-core host: timings move with its "
        "load (given per run).",
        "",
        "## Skills",
        "",
        "| labels | files | tasks | workers | method | runner | wall s | flow peak RSS GB | ≤ 2 GB | "
        "dask workers GB | prefect server GB | tree GB | accuracy (gold tasks) | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in skills:
        c, d, m = r["config"], r["dataset"], r["metrics"]
        acc = f"{m['accuracy']:.4f} ({m['n_gold']:,})" if m.get("accuracy") is not None else "–"
        lines.append(
            f"| {c['labels']:,} | {d['files']} | {d['tasks']:,} | {c['workers']:,} | {c['method']} | {_cluster(r)} | "
            f"{r['wall_s']:.1f} | {_memory_cells(r)} | {acc} | {r['status']} |"
        )
    if not any(r["config"]["labels"] >= 10**8 for r in skills):
        lines.append(
            "| 100,000,000 | 100 | | 20,000 | ds | dask 2 × 4GB, 64 buckets | *not run yet* | | | | | | | "
            "`python -m benchmarks.scale_out --labels 1e8 --partitions 64` |"
        )
    em_rows = [row for row in (_em_pass_row(r) for r in skills) if row is not None]
    if em_rows:
        lines += [
            "",
            "Dawid–Skene EM passes over the held buckets against the bandwidth limit (issue #36: within 3× of it per "
            "pass), from the run's manifest (`partitioned.timing`, `crowdflow.skills.held_em.PassTiming`). *EM s*: "
            "the flow's wall time of the EM, first pass to the last parameters; *s / pass*: that over the passes; "
            "*kernel*: per pass the slowest Dask worker task's compiled kernels; *worker*: that task's whole time; "
            "*round trip*: the flow's time inside a pass beyond the slowest task (the table sent, the tasks "
            "scheduled, the sums returned and added); *between*: the flow's work between passes (M-step, SQUAREM, "
            "log π); *consensus*: the final E-step pass writing the parts; *labels a task*: each worker task's "
            f"labels (10^6). *limit*: the bytes one pass reads (`crowdflow.skills.held.pass_bytes`) ÷ the stated "
            f"{STATED_READ_GB_S} GB/s (one core, quiet host), and ÷ the bandwidth measured just before the run. "
            "*load*: 1-minute load average before → after (2 cores, shared). *encode*: the `check_graph` lap (the "
            "encode of the buckets and the graph check).",
            "",
            "| labels | workers | load | wall s | ingest s | encode s | fit s | EM passes | EM s | s / pass | "
            "kernel s / pass | worker s / pass | round trip s / pass | between s / pass | consensus s | "
            "labels a task | held GB | limit s / pass | × limit | × limit at the measured bandwidth |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
            *em_rows,
        ]
    lines += [
        "",
        "## Ranking",
        "",
        "Data: `scale_data.write_comparisons` (θ ~ N(0, 1) for every item; Zipf item popularity; graded outcome "
        "`θ_a − θ_b + N(0, 0.5²)` or its sign; 5 % of the rows replaced by an answer against the true order, "
        "graded `−sign(d)·(|d| + U(2, 4)·σ)`; 2 % of the annotators flip 80 % of their answers). *τ*, *ρ*: "
        "Kendall's τ-b and Spearman's ρ of the run's `ranking` scores against the true θ. *flagged (planted)*: "
        "the run's `n_outliers` (trimmed only) and, in brackets, the planted outlier rows plus the flippers' "
        "flipped rows. *passes*: passes over the files after the canonical copy.",
        "",
        "| comparisons | files | items | annotators | outcome | outliers | runner | wall s | flow peak RSS GB | "
        "≤ 2 GB | dask workers GB | prefect server GB | tree GB | τ | ρ | flagged (planted) | passes | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *[_ranking_row(r) for r in ranking],
    ]
    if not any(r["config"]["comparisons"] >= 10**8 for r in ranking):
        lines.append(
            "| 100,000,000 | 100 | 1,000 | 5,000 | graded | none / trimmed | dask 2 × 6GB | *not run yet* | | | | | | "
            "| | | | `python -m benchmarks.scale_out --job ranking --comparisons 1e8 --outliers none` "
            "(or `trimmed`) |"
        )
    pass_rows = [row for row in (_pass_row(r) for r in ranking) if row is not None]
    if pass_rows:
        lines += [
            "",
            "Passes from worker memory against the bandwidth limit (issue #36: within 3× of it per pass). *read*: the "
            "fit's reads of the canonical copies (the scan, the encode into held blocks, the final write pass); "
            "*held passes*: the edge-sum and histogram passes over the held blocks, each timed in the flow from "
            "submission to the folded result (Dask round trip and the flow's fold included); *flow rest*: the fit's "
            "other time (refits of the Laplacian on the kept pairs, diagnostics, scheduling between passes); "
            f"*limit*: held bytes ÷ read bandwidth, at the stated {STATED_READ_GB_S} GB/s (docs/scale.md, one core, "
            "quiet host) and at the bandwidth measured just before the run (`benchmarks.bandwidth.measure`, same "
            "load). *load*: 1-minute load average before → after the run (2 cores, shared).",
            "",
            "| comparisons | outliers | load | wall s | ingest + validate s | fit s | read s | held passes | "
            "held pass s | s / pass | flow rest s | held GB | limit s / pass | × limit | × limit at the measured "
            "bandwidth |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
            *pass_rows,
        ]
    personal = sorted(
        (r for r in records if _job(r) == "personal_models"),
        key=lambda r: (r["config"]["samples"], r["config"]["runner"] != "dask", r["when"]),
    )
    lines += [
        "",
        "## Personal models",
        "",
        "Data: `scale_data.write_agents` (agents at uniform points of the unit square, each linked to its 6 nearest; "
        "true models a smooth field plus a small deviation; Poisson-many samples per agent `y = x·θ_i + N(0, 1)`, "
        "3 features; rows shuffled, so an agent's rows span files). The run: `method: djam_blocked`, quadratic "
        "loss, `reg: 0.1`; on Dask each block reads its samples and builds its losses on a worker. *bound*: the "
        "run's certified ‖Θ̂ − Θ*‖₂; *passes*: executor passes (copy excluded).",
        "",
        "| samples | files | agents | edges | blocks | runner | wall s | flow peak RSS GB | ≤ 2 GB | dask workers GB | "
        "prefect server GB | tree GB | converged | bound | passes | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in personal:
        c, d, m = r["config"], r["dataset"], r["metrics"]
        passes = (r.get("partitioned") or {}).get("passes", "–")
        bound = f"{m['error_bound']:.2e}" if m.get("error_bound") is not None else "–"
        lines.append(
            f"| {c['samples']:,} | {d['files']} | {c['agents']:,} | {d['edges']:,} | {c['blocks']} | {_cluster(r)} | "
            f"{r['wall_s']:.1f} | {_memory_cells(r)} | {m.get('converged', '–')} | {bound} | {passes} | "
            f"{r['status']} |"
        )
    lines.append("")
    for r in skills + ranking + personal:
        c, d = r["config"], r["dataset"]
        if _job(r) == "personal_models":
            head = f"## Personal models: {c['samples']:,} samples, {c['agents']:,} agents, {_cluster(r)}"
            data = (
                f"Dataset: {d['files']} files, {d['agents']:,} agents, {d['edges']:,} edges, {d['features']} "
                f"features, seed {d['seed']}; generated in {d['seconds']:.0f} s."
            )
        elif _job(r) == "ranking":
            head = f"## Ranking: {c['comparisons']:,} comparisons, outliers {c['outliers']}, {_cluster(r)}"
            data = (
                f"Dataset: {d['files']} files, {d['items']:,} items, {d['annotators']:,} annotators ({d['flippers']} "
                f"flippers), {d['outcome']} outcome, σ {d['sigma']}, {d['outlier_rows']:,} outlier rows and "
                f"{d['flipped_rows']:,} flipped rows, seed {d['seed']}; generated in {d['seconds']:.0f} s."
            )
        else:
            head = f"## {c['labels']:,} labels, {c['method']}, {_cluster(r)}"
            data = (
                f"Dataset: {d['files']} files, {d['tasks']:,} tasks ({d['tasks_in_two_files']:,} in "
                f"two files), {d['workers']:,} workers, {d['classes']} classes, seed {d['seed']}, {d['truth_tasks']:,} "
                f"gold tasks; generated in {d['seconds']:.0f} s."
            )
        lines += [
            head,
            "",
            f"{r['when']}, {r['host']}; load average {r['load_before'][0]} before, {r['load_after'][0]} after. "
            f"`{r['command']}`. {data}",
            "",
        ]
        if c.get("ranking_options"):
            lines += [f"Ranking options: `{', '.join(c['ranking_options'])}`.", ""]
        if r.get("skills_options") or c.get("skills_options"):
            lines += [f"Skills options: `{', '.join(c['skills_options'])}`.", ""]
        if r["status"] != "completed":
            lines += [
                f"**The run failed** (exit {r['returncode']}{', timed out' if r['timed_out'] else ''}). "
                "End of its stderr:",
                "",
                "```",
                *r.get("stderr_tail", "").strip().splitlines()[-25:],
                "```",
                "",
            ]
        t = r["timings"]
        if t:
            rest = r["wall_s"] - sum(t.values())
            lines += [
                "| step | s |",
                "|---|---|",
                *[f"| {k} | {v:.2f} |" for k, v in t.items()],
                f"| rest (Prefect server start, orchestration, export, cluster start/stop) | {rest:.2f} |",
                f"| **wall** | **{r['wall_s']:.2f}** |",
                "",
            ]
        extra = []
        if r.get("partitioned"):
            p = r["partitioned"]
            if _job(r) == "ranking":
                extra.append(f"{p.get('files')} files, {p.get('passes')} passes")
            else:
                extra.append(f"{p.get('files')} files → {p.get('buckets')} buckets, {p.get('passes')} passes")
        fit = r.get("fit") or {}
        if fit and _job(r) == "ranking":
            keep = ("method", "solver", "n_edges", "sigma", "t", "trim_iterations", "converged", "n_outliers")
            extra.append("fit: " + ", ".join(f"{k} {_short(fit[k])}" for k in keep if k in fit))
            acc = r.get("accuracy") or {}
            if acc:
                extra.append(
                    f"{acc['n_items_scored']:,} items scored in {acc['n_components']} component(s), "
                    f"Kendall τ {acc['kendall_tau']:.4f}, Spearman ρ {acc['spearman_rho']:.4f}"
                )
            if r["metrics"].get("n_outliers") is not None:
                extra.append(
                    f"{r['metrics']['n_outliers']:,} outliers flagged ({r['metrics']['outlier_share']:.2%} of the rows)"
                )
        elif fit:
            extra.append(
                f"fit: {fit.get('method')} {fit.get('fit_status', '')}, {fit.get('iterations')} iterations, "
                f"converged {fit.get('converged')}"
            )
        if r.get("output_parquet_bytes"):
            extra.append(f"run folder Parquet {r['output_parquet_bytes'] / 1e6:.0f} MB")
        if extra:
            lines += ["; ".join(extra) + ".", ""]
        steps = flow_by_step(r)
        if steps:
            lines += [
                "The flow's RSS over the run (seconds since the subprocess started; the steps are the Prefect "
                "tasks as their log lines end them; max sampled RSS of the flow process in each interval): "
                + "; ".join(f"{t:.0f} s {what} {_gb(rss)} GB" for t, what, rss in steps)
                + ".",
                "",
            ]
        lines += ["| process | class | peak RSS GB (VmHWM) | max sampled RSS GB | seen s |", "|---|---|---|---|---|"]
        for p in r["memory"]["processes"]:
            cmd = p["cmd"].replace("|", "\\|")
            cmd = cmd if len(cmd) <= 70 else cmd[:67] + "…"
            lines.append(
                f"| {p['pid']} `{cmd}` | {p['class']} | {_gb(p['hwm'])} | {_gb(p['peak_rss'])} | "
                f"{p['seen_s'][0]}–{p['seen_s'][1]} |"
            )
        lines.append("")
    lines += [NOTES_MARK, notes.strip("\n"), ""] if notes.strip() else [NOTES_MARK, ""]
    return "\n".join(lines)


def write_results(new: list[dict[str, Any]], json_path: Path = OUT_JSON, md_path: Path = OUT_MD) -> None:
    """Merge ``new`` into the JSON record (replacing runs of the same configuration) and rewrite the markdown."""
    keys = {_key(r) for r in new}
    records = [r for r in _load(json_path) if _key(r) not in keys] + new
    json_path.write_text(json.dumps(records, indent=1) + "\n")
    notes = ""
    if md_path.is_file():
        text = md_path.read_text()
        if NOTES_MARK in text:
            notes = text.split(NOTES_MARK, 1)[1]
    md_path.write_text(render(records, notes))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", default="skills", choices=["skills", "ranking", "personal_models"])
    ap.add_argument("--labels", type=float, default=1e7, help="number of labels, e.g. 1e7")
    ap.add_argument("--workers", type=int, default=20_000, help="crowd workers in the data")
    ap.add_argument("--classes", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--method", default="ds", choices=["ds", "onecoin_ds", "mv", "pgd"])
    ap.add_argument("--runner", default="dask", choices=["dask", "inline", "both"], help="both: dask, then inline")
    ap.add_argument("--n-workers", type=int, default=2, help="Dask workers of the LocalCluster")
    ap.add_argument("--memory-limit", default=None, help="memory per Dask worker (default 4GB skills, 6GB ranking)")
    ap.add_argument("--partitions", type=int, default=None, help="task buckets (runner.partitions)")
    ap.add_argument(
        "--skills-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra skills option (YAML value), e.g. spectral_max_nnz=null; repeatable",
    )
    ap.add_argument("--comparisons", type=float, default=1e6, help="ranking: number of comparisons, e.g. 1e8")
    ap.add_argument("--items", type=int, default=1_000, help="ranking: items in the data")
    ap.add_argument("--annotators", type=int, default=5_000, help="ranking: annotators in the data")
    ap.add_argument("--outcome", default="graded", choices=["graded", "pm1"], help="ranking: graded or ±1 outcomes")
    ap.add_argument("--outliers", default="none", choices=["none", "trimmed"], help="ranking: ranking.outliers")
    ap.add_argument(
        "--ranking-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="ranking: extra ranking option (YAML value), e.g. diagnostics=false; repeatable",
    )
    ap.add_argument("--samples", type=float, default=1e6, help="personal models: samples (rows of agents)")
    ap.add_argument("--agents", type=int, default=10_000, help="personal models: agents")
    ap.add_argument("--blocks", type=int, default=8, help="personal models: personal_models.n_blocks")
    ap.add_argument("--tol", type=float, default=1e-6, help="personal models: personal_models.tol")
    ap.add_argument("--data-root", type=Path, default=Path("/tmp/crowdflow-scale"))
    ap.add_argument("--keep-data", action="store_true", help="keep a dataset generated by this call")
    ap.add_argument("--keep-output", action="store_true", help="keep the run folders (the consensus parts)")
    ap.add_argument("--timeout", type=float, default=4 * 3600.0, help="seconds before a run is stopped")
    ap.add_argument("--no-write", action="store_true", help="print, do not touch benchmarks/results")
    args = ap.parse_args(argv)
    if args.memory_limit is None:
        args.memory_limit = "6GB" if args.job == "ranking" else "4GB"
    root = args.data_root
    root.mkdir(parents=True, exist_ok=True)
    if args.job == "personal_models":
        data, info, made = ensure_agents(root, args)
    elif args.job == "ranking":
        data, info, made = ensure_comparisons(root, args)
    else:
        data, info, made = ensure_data(root, int(args.labels), args.workers, args.classes, args.seed)
    runners = ["dask", "inline"] if args.runner == "both" else [args.runner]
    records = []
    try:
        for runner in runners:
            records.append(one_run(args, runner, data, info, root))
            if not args.no_write:
                write_results(records[-1:])
    finally:
        if made and not args.keep_data:
            shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(root / "scratch", ignore_errors=True)
    if not args.no_write:
        print(f"wrote {OUT_MD.relative_to(ROOT)} and {OUT_JSON.relative_to(ROOT)}")
    return 0 if all(r["status"] == "completed" for r in records) else 1


if __name__ == "__main__":
    raise SystemExit(main())
