"""The ``crowdflow`` command.

    crowdflow run SPEC.yaml [--out DIR]       run a pipeline spec (Prefect flow, embedded API)
    crowdflow validate SPEC.yaml              check the spec and its inputs (schema + graph); writes nothing
    crowdflow serve SPEC.yaml [--cron CRON]   serve the spec as a deployment (needs PREFECT_API_URL)
    crowdflow demo [--out DIR]                the bundled Snow et al. RTE example
    crowdflow skills --labels PATH [--truth PATH] [--method M] --out DIR

Exit codes: 0 success, 2 bad spec or input (one-line message; ``--debug`` for the traceback),
1 unexpected error. Prefect, Great Expectations and the models are imported only when a command
needs them, so ``crowdflow --help`` is fast.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from importlib import resources
from pathlib import Path
from typing import Any

DEMO_SPEC = "demo-rte.yaml"


def _prefect_env() -> None:
    """Sensible defaults for Prefect's embedded (ephemeral) API; the user's own settings win."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    # The first ephemeral start on a fresh PREFECT_HOME runs migrations (~19 s): the default 20 s is too tight.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")


class _NoTraceback(logging.Filter):
    """Drop tracebacks from Prefect's run loggers: the CLI prints the one-line reason itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info = None
        record.exc_text = None
        return True


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at emit time (safe when the CLI runs in-process, e.g. tests)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def _configure_logging() -> None:
    root = logging.getLogger()
    if not any(isinstance(h, _StderrHandler) for h in root.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    root.setLevel(logging.WARNING)


def _quiet_tracebacks() -> None:
    for name in ("prefect.flow_runs", "prefect.task_runs", "prefect.flow_engine", "prefect.task_engine"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _NoTraceback) for f in logger.filters):
            logger.addFilter(_NoTraceback())


def _demo_spec_path() -> Path:
    return Path(str(resources.files("crowdflow") / "data" / DEMO_SPEC))


def _load(spec_path: str, out: str | None) -> Any:
    from crowdflow.spec import load_spec

    spec = load_spec(spec_path)
    if out:
        spec = spec.model_copy(update={"output": spec.output.model_copy(update={"dir": str(Path(out).resolve())})})
    return spec


class _ProgressBar:
    """``description [#####-----]  50%`` redrawn in place on a terminal's stderr (fit progress)."""

    def __init__(self, stream: Any, width: int = 30) -> None:
        self.stream = stream
        self.width = width
        self.shown: tuple[str, int] | None = None

    def __call__(self, description: str, fraction: float) -> None:
        pct = round(100 * fraction)
        if self.shown == (description, pct):
            return
        self.shown = (description, pct)
        done = round(self.width * fraction)
        bar = "#" * done + "-" * (self.width - done)
        self.stream.write(f"\r{description} [{bar}] {pct:3d}%" + ("\n" if pct >= 100 else ""))
        self.stream.flush()


def _run_spec(spec: Any, debug: bool) -> int:
    _prefect_env()
    if not debug:
        _quiet_tracebacks()
    from flows.pipeline import run_spec
    from tasks.progress import add_listener, remove_listener

    bar = _ProgressBar(sys.stderr) if sys.stderr.isatty() else None
    if bar is not None:
        add_listener(bar)
    try:
        summary = run_spec(spec)
    finally:
        if bar is not None:
            remove_listener(bar)
    print(f"run {summary['run_id']} completed: {summary['run_dir']}")
    metrics = summary.get("metrics") or {}
    if "error" in metrics:
        print(f"gold tasks: {metrics['n_gold']}, accuracy {metrics['accuracy']:.4f}, error {metrics['error']:.4f}")
    report = Path(summary["run_dir"]) / "report.html"
    if report.is_file():
        print(f"report: {report}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    return _run_spec(_load(args.spec, args.out), args.debug)


def cmd_demo(args: argparse.Namespace) -> int:
    return _run_spec(_load(str(_demo_spec_path()), args.out or "crowdflow-out"), args.debug)


def cmd_skills(args: argparse.Namespace) -> int:
    from crowdflow.spec import parse_spec

    data: dict[str, Any] = {
        "name": args.name,
        "labels": {"path": str(Path(args.labels).resolve())},
        "skills": {
            "method": args.method,
            "tie_break": args.tie_break,
            "seed": args.seed,
            "duplicates": args.duplicates,
        },
        "output": {"dir": str(Path(args.out).resolve())},
    }
    if args.truth:
        data["truth"] = {"path": str(Path(args.truth).resolve())}
    if args.warn_identifiability:
        data["checks"] = {"identifiability": "warn"}
    return _run_spec(parse_spec(data, origin="command line", base_dir=Path.cwd()), args.debug)


def cmd_rank(args: argparse.Namespace) -> int:
    from crowdflow.spec import parse_spec

    data: dict[str, Any] = {
        "name": args.name,
        "job": "ranking",
        "comparisons": {"path": str(Path(args.comparisons).resolve())},
        "ranking": {"outliers": args.outliers, "budget": args.budget},
        "output": {"dir": str(Path(args.out).resolve())},
    }
    if args.require_connected:
        data["checks"] = {"connectivity": "block"}
    return _run_spec(parse_spec(data, origin="command line", base_dir=Path.cwd()), args.debug)


def cmd_personal_rank(args: argparse.Namespace) -> int:
    from crowdflow.spec import parse_spec

    ranks = [int(r) for r in args.rank.split(",")]
    data: dict[str, Any] = {
        "name": args.name,
        "job": "personal_rankings",
        "comparisons": {"path": str(Path(args.comparisons).resolve())},
        "personal_rankings": {"rank": ranks[0] if len(ranks) == 1 else ranks, "method": args.method, "seed": args.seed},
        "output": {"dir": str(Path(args.out).resolve())},
    }
    return _run_spec(parse_spec(data, origin="command line", base_dir=Path.cwd()), args.debug)


def cmd_personal_models(args: argparse.Namespace) -> int:
    from crowdflow.spec import parse_spec

    data: dict[str, Any] = {
        "name": args.name,
        "job": "personal_models",
        "agents": {"path": str(Path(args.agents).resolve())},
        "edges": {"path": str(Path(args.edges).resolve())},
        "personal_models": {"loss": args.loss, "method": args.method, "seed": args.seed},
        "output": {"dir": str(Path(args.out).resolve())},
    }
    if args.reg is not None:
        data["personal_models"]["reg"] = args.reg
    return _run_spec(parse_spec(data, origin="command line", base_dir=Path.cwd()), args.debug)


def cmd_assign(args: argparse.Namespace) -> int:
    from crowdflow.spec import parse_spec

    data: dict[str, Any] = {
        "name": args.name,
        "job": "assignment",
        "candidates": {"path": str(Path(args.candidates).resolve())},
        "assignment": {
            "budget": args.budget,
            "worker_cap": args.worker_cap,
            "task_cap": args.task_cap,
            "backend": args.backend,
        },
        "output": {"dir": str(Path(args.out).resolve())},
    }
    if args.worker_caps:
        data["worker_caps"] = {"path": str(Path(args.worker_caps).resolve())}
    if args.task_caps:
        data["task_caps"] = {"path": str(Path(args.task_caps).resolve())}
    return _run_spec(parse_spec(data, origin="command line", base_dir=Path.cwd()), args.debug)


def cmd_next_batch(args: argparse.Namespace) -> int:
    from crowdflow.spec import parse_spec

    data: dict[str, Any] = {
        "name": args.name,
        "job": "next_batch",
        "skills_run": str(Path(args.skills_run).resolve()),
        "open_tasks": {"path": str(Path(args.open_tasks).resolve())},
        "workers": {"path": str(Path(args.workers).resolve())},
        "assignment": {"budget": args.budget, "worker_cap": args.worker_cap, "task_cap": args.task_cap},
        "output": {"dir": str(Path(args.out).resolve())},
    }
    return _run_spec(parse_spec(data, origin="command line", base_dir=Path.cwd()), args.debug)


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve ``run_pipeline`` with this spec as its default parameters (blocks until interrupted)."""
    _prefect_env()
    spec = _load(args.spec, args.out)
    from flows.deploy import run_pipeline

    run_pipeline.serve(
        name=args.name or spec.name,
        cron=args.cron,
        parameters={"spec": spec.model_dump(mode="json")},
        description=f"crowdflow {spec.job} pipeline from {Path(args.spec).resolve()}",
        tags=["crowdflow", spec.job.replace("_", "-")],
        pause_on_shutdown=False,
    )
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from flows.pipeline import check_spec

    _prefect_env()  # a password_secret source reads its Prefect Secret block through the API
    spec = _load(args.spec, None)
    lines = check_spec(spec)
    print("\n".join(lines))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="crowdflow",
        description="Worker skills, consensus labels and rankings from crowdsourcing data, as Prefect pipelines.",
    )
    parser.add_argument("--debug", action="store_true", help="show full tracebacks and Prefect error logs")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("run", help="run a pipeline spec (YAML)")
    p.add_argument("spec", help="path to the pipeline spec")
    p.add_argument("--out", help="output folder (overrides output.dir of the spec)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("validate", help="check a spec and its inputs without fitting or writing")
    p.add_argument("spec")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("serve", help="serve a spec as a Prefect deployment (with --cron: on a schedule)")
    p.add_argument("spec", help="path to the pipeline spec")
    p.add_argument("--cron", help='cron schedule, e.g. "0 2 * * *" (UTC); without it runs start from the UI/API')
    p.add_argument("--name", help="deployment name (default: the spec's name)")
    p.add_argument("--out", help="output folder (overrides output.dir of the spec)")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("demo", help="run the bundled example (Snow et al. RTE labels, rank-one skills)")
    p.add_argument("--out", help="output folder (default ./crowdflow-out)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("skills", help="consensus labels (and skills) from one labels file")
    p.add_argument("--labels", required=True, help="labels table: task, worker, label (CSV/Parquet/folder)")
    p.add_argument("--truth", help="gold labels: task, label (enables accuracy/error metrics)")
    p.add_argument(
        "--method",
        default="pgd",
        choices=["pgd", "onecoin_ds", "ds", "mv"],
        help="pgd = rank-one skills (default); onecoin_ds / ds = Dawid-Skene EM; mv = majority vote",
    )
    p.add_argument("--solver", default="scaled", choices=["scaled", "gd", "eg"], help="PGD solver")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--name", default="skills", help="pipeline name (output sub-folder)")
    p.add_argument("--tie-break", default="random", choices=["random", "smallest"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--duplicates", default="error", choices=["error", "keep_last", "keep_first"])
    p.add_argument(
        "--warn-identifiability", action="store_true", help="warn instead of blocking on bipartite components"
    )
    p.set_defaults(func=cmd_skills)

    p = sub.add_parser("rank", help="robust global ranking from pairwise comparisons (HodgeRank + outliers)")
    p.add_argument("--comparisons", required=True, help="annotator, item_a, item_b, outcome (or winner)")
    p.add_argument("--outliers", default="lbi", choices=["lbi", "hlasso", "none"])
    p.add_argument("--budget", type=float, default=0.05, help="share of comparisons allowed to be outliers")
    p.add_argument("--require-connected", action="store_true", help="block on a disconnected comparison graph")
    p.add_argument("--out", required=True)
    p.add_argument("--name", default="ranking")
    p.set_defaults(func=cmd_rank)

    p = sub.add_parser("personal-rank", help="per-user rankings from pairwise comparisons (low-rank BTL)")
    p.add_argument("--comparisons", required=True, help="annotator, item_a, item_b, outcome (or winner)")
    p.add_argument("--rank", default="5", help="rank r, or a comma list to choose on held-out data")
    p.add_argument("--method", default="lbfgs", choices=["lbfgs", "rtr"])
    p.add_argument("--out", required=True)
    p.add_argument("--name", default="personal-rankings")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_personal_rank)

    p = sub.add_parser("personal-models", help="per-agent models smoothed over an agent graph (DJAM)")
    p.add_argument("--agents", required=True, help="agent, y, feature columns (several rows per agent)")
    p.add_argument("--edges", required=True, help="source, target, weight (undirected, weight > 0)")
    p.add_argument("--loss", default="quadratic", choices=["quadratic", "ridge", "huber", "logistic"])
    p.add_argument("--method", default="djam", choices=["djam", "centralized", "cl_admm", "djam_blocked"])
    p.add_argument("--reg", type=float, help="ridge / prior strength (default 0.1)")
    p.add_argument("--out", required=True)
    p.add_argument("--name", default="personal-models")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_personal_models)

    p = sub.add_parser("assign", help="next-batch task-worker assignment (exact TVCS selection)")
    p.add_argument("--candidates", required=True, help="task, worker, score")
    p.add_argument("--budget", type=int, help="total pairs (default unlimited)")
    p.add_argument("--worker-cap", type=int, help="max tasks per worker (default for workers --worker-caps omits)")
    p.add_argument("--worker-caps", metavar="PATH", help="per-worker caps table: worker, capacity")
    p.add_argument("--task-cap", type=int, help="max workers per task (default for tasks --task-caps omits)")
    p.add_argument("--task-caps", metavar="PATH", help="per-task caps table: task, cap")
    p.add_argument("--backend", default="flow", choices=["flow", "lp", "pgd"])
    p.add_argument("--out", required=True)
    p.add_argument("--name", default="assignment")
    p.set_defaults(func=cmd_assign)

    p = sub.add_parser("next-batch", help="closed loop: newest skills run + open tasks + workers -> assignment")
    p.add_argument("--skills-run", required=True, help="a skills pipeline output folder (or one run folder)")
    p.add_argument("--open-tasks", required=True, help="task (one row per open task)")
    p.add_argument("--workers", required=True, help="worker[, capacity] (available workers)")
    p.add_argument("--budget", type=int)
    p.add_argument("--worker-cap", type=int)
    p.add_argument("--task-cap", type=int)
    p.add_argument("--out", required=True)
    p.add_argument("--name", default="next-batch")
    p.set_defaults(func=cmd_next_batch)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``crowdflow`` console script.

    Exit codes follow one rule (:func:`crowdflow.errors.user_error`): 0 success; 2 for anything the user or
    the environment can fix (a bad spec, option or input, a full or read-only disk, a missing permission,
    out of memory, a database still down after the retries), with one line naming the file, column,
    option or path; 1 for a bug ("unexpected error", ``--debug`` shows the traceback); 130 when interrupted.
    """
    args = build_parser().parse_args(argv)
    _configure_logging()
    from crowdflow.errors import user_error

    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("crowdflow: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.debug:
            raise
        err = user_error(exc)
        if err is None:
            print(f"crowdflow: unexpected error: {type(exc).__name__}: {exc} (rerun with --debug)", file=sys.stderr)
            return 1
        print(f"crowdflow: error: {err}", file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
