"""The ``crowdflow`` command.

    crowdflow run SPEC.yaml [--out DIR] [--dry-run]   run a pipeline spec (Prefect flow, embedded API)
    crowdflow validate SPEC.yaml                      the run's checks on the spec and its inputs; writes nothing
    crowdflow serve SPEC.yaml [--cron CRON]           serve the spec as a deployment (needs PREFECT_API_URL)
    crowdflow demo [--out DIR]                        the bundled Snow et al. RTE example
    crowdflow skills|rank|personal-rank|personal-models|assign|next-batch --<input> PATH ... --out DIR [options]

The per-job commands are generated from the spec models: one ``--<table>`` flag per input table of the job,
one flag per field of the job's options model (``Literal`` choices, ``--x/--no-x`` booleans, comma lists,
the field's description and default as help) and per check of ``ChecksSpec``; ``--dry-run`` checks instead
of running. A flag therefore always reaches the spec the run receives (:func:`spec_from_args`).

Exit codes: 0 success, 2 bad spec, option or input, or an environment fault (one line; ``--debug`` for the
traceback), 1 unexpected error (a bug). Prefect, Great Expectations and the models are imported only when a
command needs them.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import logging
import os
import sys
import threading
import types
import typing
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any, Literal, NoReturn

from pydantic import BaseModel

DEMO_SPEC = "demo-rte.yaml"


def _help(text: str) -> str:
    """Help text taken from a model's description, with ``%`` escaped for argparse (which formats help with ``%``)."""
    return text.replace("%", "%%")


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


# What a run imports on its way anyway (its job's flow, validation, report figures): imported while the embedded
# API boots.
_WARM_IMPORTS = ("great_expectations", "matplotlib.figure")


def _run_spec(load: Callable[[], Any], debug: bool) -> int:
    """Run the spec ``load()`` returns. The embedded API (when no API is configured) is started first, so that it
    boots while the spec, the models, Great Expectations and matplotlib are imported (:mod:`flows.ephemeral`)."""
    _prefect_env()
    from flows.ephemeral import embedded_api

    api = embedded_api()
    try:
        spec = load()
        api.confirm()
    except BaseException:
        api.stop()  # a bad spec: no run, no server
        raise
    if not debug:
        _quiet_tracebacks()
    from flows.pipeline import JOB_FLOWS, run_spec
    from tasks.progress import add_listener, remove_listener

    api.wait(warm=(JOB_FLOWS[spec.job][0], *_WARM_IMPORTS))
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


def cmd_demo(args: argparse.Namespace) -> int:
    return _run_spec(lambda: _load(str(_demo_spec_path()), args.out or "crowdflow-out"), args.debug)


# The per-job commands: name, the job, help text, the default pipeline name. Their flags are generated from
# the spec models (inputs from JOB_INPUTS, options from the job's options model, checks from ChecksSpec), so a
# flag cannot exist without reaching the run, and its choices, default and help are the model's.
JOB_COMMANDS: dict[str, tuple[str, str]] = {
    "skills": ("skills", "consensus labels and worker skills from one labels table"),
    "rank": ("ranking", "robust global ranking from pairwise comparisons (HodgeRank + outliers)"),
    "personal-rank": ("personal_rankings", "per-user rankings from pairwise comparisons (low-rank BTL)"),
    "personal-models": ("personal_models", "per-agent models smoothed over an agent graph (DJAM)"),
    "assign": ("assignment", "task-worker assignment (exact TVCS selection under budget and caps)"),
    "next-batch": ("next_batch", "closed loop: newest skills run + open tasks + workers -> assignment"),
}
_INPUT_HELP = {
    "labels": "labels table: task, worker, label (CSV/Parquet file or Parquet folder)",
    "truth": "gold labels: task, label (enables accuracy/error metrics)",
    "comparisons": "annotator, item_a, item_b, outcome (or winner)",
    "agents": "agent, y, feature columns (several rows per agent)",
    "edges": "source, target, weight (undirected, weight > 0)",
    "candidates": "task, worker, score",
    "worker_caps": "per-worker caps table: worker, capacity",
    "task_caps": "per-task caps table: task, cap",
    "open_tasks": "task (one row per open task)",
    "workers": "worker[, capacity] (available workers)",
}
# Older spellings kept working: each sets one check mode.
_CHECK_SHORTHANDS = {
    "skills": [
        ("--warn-identifiability", "identifiability", "warn", "warn instead of blocking on bipartite components")
    ],
    "ranking": [("--require-connected", "connectivity", "block", "block on a disconnected comparison graph")],
}


def _flag(name: str) -> str:
    return "--" + name.rstrip("_").replace("_", "-")


def _unwrap(annotation: Any) -> Any:
    """``X`` of ``X | None``."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return annotation


def _is_sequence(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (list, tuple) or any(
        typing.get_origin(a) in (list, tuple) for a in typing.get_args(annotation)
    )


def _add_model_flags(parser: argparse.ArgumentParser, model: type[BaseModel], dest_prefix: str) -> None:
    """One flag per field of ``model``: choices from ``Literal``s, --x/--no-x for booleans, comma lists."""
    group = parser.add_argument_group(f"{dest_prefix} options (the spec's '{dest_prefix}:' block)")
    for name, field in model.model_fields.items():
        ann = _unwrap(field.annotation)
        default = field.get_default(call_default_factory=True)
        helptext = _help((field.description or name) + f" (default: {default})")
        kw: dict[str, Any] = {"dest": f"{dest_prefix}.{name}", "default": argparse.SUPPRESS, "help": helptext}
        if typing.get_origin(ann) is Literal:
            values = typing.get_args(ann)
            kw.update(choices=list(values), type=_literal(values))
        elif ann is bool:
            kw.update(action=argparse.BooleanOptionalAction)
        elif _is_sequence(ann):
            kw.update(metavar=name.rstrip("_").upper() + "[,...]", type=_comma_list)
        elif typing.get_origin(ann) is dict:
            kw.update(metavar="NAME=VALUE[,...]", type=_key_values)
        else:
            kw.update(metavar=name.rstrip("_").upper())
        group.add_argument(_flag(name), **kw)


def _literal(values: tuple[Any, ...]) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        for v in values:
            if str(v) == text:
                return v
        return text  # argparse's choices refuse it first

    return convert


def _comma_list(text: str) -> Any:
    """``2,4,8`` → a list; one value stays a scalar (a field such as ``rank`` takes both)."""
    parts = [p.strip() for p in text.split(",")]
    return parts if len(parts) > 1 or text.endswith(",") else parts[0]


def _key_values(text: str) -> dict[str, Any]:
    """``n_iter=50,tol=1e-3`` → ``{"n_iter": 50, "tol": 0.001}`` (each value read as a YAML scalar)."""
    import yaml

    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(f"{part!r} is not NAME=VALUE")
        try:
            out[key.strip()] = yaml.safe_load(value.strip())
        except yaml.YAMLError:
            out[key.strip()] = value.strip()
    return out


def _add_job_command(sub: Any, command: str, job: str, help_text: str) -> None:
    from crowdflow.spec import JOB_INPUTS, JOB_MODELS, JOB_OPTIONS, ChecksSpec

    p = sub.add_parser(command, help=help_text, description=help_text)
    required, optional = JOB_INPUTS[job]
    for kind in (*required, *optional):
        p.add_argument(
            _flag(kind), dest=f"input.{kind}", metavar="PATH", required=kind in required, help=_INPUT_HELP[kind]
        )
    if job == "next_batch":
        p.add_argument("--skills-run", required=True, help="a skills pipeline output folder (or one run folder)")
        p.add_argument(
            "--max-skills-run-age-hours",
            type=float,
            metavar="HOURS",
            help=_help(JOB_MODELS["next_batch"].model_fields["max_skills_run_age_hours"].description or ""),
        )
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--name", default=command, help=f"pipeline name, the output sub-folder (default: {command})")
    p.add_argument("--dry-run", action="store_true", help="check the inputs as the run would; fit and write nothing")
    options = JOB_MODELS[job].model_fields[JOB_OPTIONS[job]].annotation
    assert isinstance(options, type) and issubclass(options, BaseModel)
    _add_model_flags(p, options, JOB_OPTIONS[job])
    _add_model_flags(p, ChecksSpec, "checks")
    for flag, check, mode, text in _CHECK_SHORTHANDS.get(job, []):
        p.add_argument(
            flag, dest=f"checks.{check}", action="store_const", const=mode, default=argparse.SUPPRESS, help=text
        )
    p.set_defaults(func=cmd_job, job=job)


def spec_from_args(args: argparse.Namespace) -> Any:
    """The pipeline spec a per-job command describes (exactly what the run receives)."""
    from crowdflow.spec import parse_spec

    data: dict[str, Any] = {"name": args.name, "job": args.job, "output": {"dir": str(Path(args.out).resolve())}}
    for dest, value in vars(args).items():
        if dest.startswith("input."):
            if value is not None:
                data[dest.split(".", 1)[1]] = {"path": str(Path(value).resolve())}
        elif "." in dest:
            block, field = dest.split(".", 1)
            data.setdefault(block, {})[field] = value
    if args.job == "next_batch":
        data["skills_run"] = str(Path(args.skills_run).resolve())
        if args.max_skills_run_age_hours is not None:
            data["max_skills_run_age_hours"] = args.max_skills_run_age_hours
    return parse_spec(data, origin="command line", base_dir=Path.cwd())


def cmd_job(args: argparse.Namespace) -> int:
    if args.dry_run:
        return _validate(spec_from_args(args))
    return _run_spec(lambda: spec_from_args(args), args.debug)


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve ``run_pipeline`` with this spec as its default parameters (blocks until interrupted)."""
    _prefect_env()
    spec = _load(args.spec, args.out)
    from flows.deploy import run_pipeline

    run_pipeline.serve(
        name=args.name or spec.name,
        cron=args.cron,
        parameters={"spec": spec.model_dump(mode="json", exclude_none=True)},
        description=f"crowdflow {spec.job} pipeline from {Path(args.spec).resolve()}",
        tags=["crowdflow", spec.job.replace("_", "-")],
        pause_on_shutdown=False,
    )
    return 0


def _validate(spec: Any) -> int:
    from flows.pipeline import check_spec

    _prefect_env()  # a password_secret source reads its Prefect Secret block through the API
    print("\n".join(check_spec(spec)))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    return _validate(_load(args.spec, None))


def _with_options(spec: Any, **update: Any) -> Any:
    """``spec`` with its job's options updated (``incremental``, ``backfill``); a job without them is refused."""
    from crowdflow.contracts.errors import SpecError
    from crowdflow.spec import JOB_OPTIONS

    name = JOB_OPTIONS[spec.job]
    options = getattr(spec, name)
    if any(k not in type(options).model_fields for k in update):
        raise SpecError(f"the {spec.job} job has no incremental runs (skills and ranking have); drop --incremental")
    return spec.model_copy(update={name: type(options).model_validate({**options.model_dump(), **update})})


def _load_incremental(args: argparse.Namespace, **update: Any) -> Any:
    spec = _load(args.spec, args.out)
    return _with_options(spec, **update) if update else spec


def cmd_run(args: argparse.Namespace) -> int:
    update = {"incremental": True} if args.incremental else {}
    if args.dry_run:
        return _validate(_load_incremental(args, **update))
    return _run_spec(lambda: _load_incremental(args, **update), args.debug)


def cmd_backfill(args: argparse.Namespace) -> int:
    """``crowdflow backfill SPEC --partitions a,b``: an incremental run that reads those partitions again."""
    parts = [p.strip() for p in args.partitions.split(",") if p.strip()]
    if not parts:
        from crowdflow.contracts.errors import SpecError

        raise SpecError("backfill: --partitions names no partition")
    return _run_spec(lambda: _load_incremental(args, incremental=True, backfill=parts), args.debug)


def cmd_forget(args: argparse.Namespace) -> int:
    """``crowdflow forget --worker ID``: erase a worker from a pipeline's stored statistics and every later run."""
    from crowdflow.contracts.errors import SpecError
    from crowdflow.frontdoor.increment_rules import forget

    if args.spec:
        spec = _load(args.spec, args.out)
        out, pipeline = spec.output_dir(), spec.name
    elif args.out and args.pipeline:
        out, pipeline = Path(args.out), args.pipeline
    else:
        raise SpecError("forget: give a SPEC, or --out and --pipeline")
    rec = forget(out, pipeline, args.worker)
    print(
        f"erased one worker from pipeline {pipeline}: {rec.rows_removed} stored rows in {rec.files} file(s); "
        f"recorded as sha256 {rec.worker_sha256[:16]}… (store version {rec.version}); later runs leave the worker "
        "out; earlier run folders are unchanged"
    )
    return 0


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser; ``command`` set: only that per-job command gets its generated flags.

    Generating a job's flags imports the spec models (and through them the job packages, ~2 s), so
    ``crowdflow --help`` and the other commands build the per-job parsers only when one of them is used.
    """
    parser = argparse.ArgumentParser(
        prog="crowdflow",
        description="Worker skills, consensus labels and rankings from crowdsourcing data, as Prefect pipelines.",
    )
    parser.add_argument("--debug", action="store_true", help="show full tracebacks and Prefect error logs")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("run", help="run a pipeline spec (YAML)")
    p.add_argument("spec", help="path to the pipeline spec")
    p.add_argument("--out", help="output folder (overrides output.dir of the spec)")
    p.add_argument(
        "--dry-run", action="store_true", help="check the spec and its inputs as the run would; write nothing"
    )
    p.add_argument(
        "--incremental",
        action="store_true",
        help="read only the input files not seen by earlier incremental runs (the job's incremental: true)",
    )
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("backfill", help="an incremental run that reads chosen partitions again")
    p.add_argument("spec", help="path to the pipeline spec")
    p.add_argument("--partitions", required=True, help="comma-separated partitions, e.g. day=2026-11-03,day=2026-11-04")
    p.add_argument("--out", help="output folder (overrides output.dir of the spec)")
    p.set_defaults(func=cmd_backfill)

    p = sub.add_parser("forget", help="erase a worker from a pipeline's stored statistics and every later run")
    p.add_argument("spec", nargs="?", help="path to the pipeline spec (or give --out and --pipeline)")
    p.add_argument("--worker", required=True, help="the worker (or annotator) id to erase")
    p.add_argument("--out", help="output folder (overrides output.dir of the spec)")
    p.add_argument("--pipeline", help="pipeline name (without a spec)")
    p.set_defaults(func=cmd_forget)

    p = sub.add_parser("validate", help="check a spec and its inputs without fitting or writing")
    p.add_argument("spec")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("serve", help="serve a spec as a Prefect deployment (with --cron: on a schedule)")
    p.add_argument("spec", help="path to the pipeline spec")
    p.add_argument("--cron", help='cron schedule, e.g. "0 2 * * *" (UTC); without it runs start from the UI/API')
    p.add_argument("--name", help="deployment name (default: the spec's name)")
    p.add_argument("--out", help="output folder (overrides output.dir of the spec)")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("clean", help="remove the scratch folders killed runs left (never a live run's)")
    p.add_argument("--out", help="a runner.scratch_dir to clean too (the system temp folder is always cleaned)")
    p.set_defaults(func=cmd_clean)

    p = sub.add_parser("demo", help="run the bundled example (Snow et al. RTE labels, rank-one skills)")
    p.add_argument("--out", help="output folder (default ./crowdflow-out)")
    p.set_defaults(func=cmd_demo)

    for name, (job, help_text) in JOB_COMMANDS.items():
        if command is None or command == name:
            _add_job_command(sub, name, job, help_text)
        else:
            sub.add_parser(name, help=help_text)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``crowdflow`` console script.

    Exit codes follow one rule (:func:`crowdflow.contracts.errors.user_error`): 0 success; 2 for anything the user or
    the environment can fix (a bad spec, option or input, a full or read-only disk, a missing permission,
    out of memory, a database still down after the retries), with one line naming the file, column,
    option or path; 1 for a bug ("unexpected error", ``--debug`` shows the traceback); 130 when interrupted.
    """
    words = sys.argv[1:] if argv is None else argv
    command = next((w for w in words if not w.startswith("-")), None)
    try:  # argparse reports a bad flag itself ("crowdflow <command>: error: ...", exit 2; --help exits 0)
        args = build_parser(command if command in JOB_COMMANDS else "").parse_args(argv)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else 2
    _configure_logging()
    code = _run_command(args)
    if argv is None and "prefect" in sys.modules:  # the program itself, after a run: skip the module teardown
        _exit(code)
    return code


def cmd_clean(args: argparse.Namespace) -> int:
    """``crowdflow clean``: remove ``crowdflow-run-*`` / ``crowdflow-dask-*`` folders whose run is dead."""
    from crowdflow.storage.scratch import sweep

    removed = sweep(None, *([os.path.abspath(args.out)] if args.out else []))
    for folder in removed:
        print(f"removed {folder}")
    print(f"{len(removed)} folder(s) left by dead runs removed")
    return 0


def _terminate(signum: int, frame: Any) -> None:
    """SIGTERM ends the command like Ctrl-C, so every scratch folder is removed on the way out."""
    raise KeyboardInterrupt


def _run_command(args: argparse.Namespace) -> int:
    import signal

    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminate)
        try:
            return _run_guarded(args)
        finally:
            signal.signal(signal.SIGTERM, previous)
    return _run_guarded(args)


def _run_guarded(args: argparse.Namespace) -> int:
    from crowdflow.contracts.errors import user_error

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


def _exit(code: int) -> NoReturn:
    """End the process as the interpreter would (wait for threads, run the exit handlers: Prefect's log and event
    workers, the embedded API's stop, temporary folders; flush), without tearing down every module one by one:
    with Prefect, Great Expectations and pandas loaded that teardown alone takes 2-4 s and does nothing for the run.
    """
    # The interpreter's first exit step: threading's exit callbacks (Prefect's log and event services send what
    # they hold), then the non-daemon threads are joined. Then the exit handlers, as at any exit.
    threading._shutdown()  # type: ignore[attr-defined]  # not in typeshed: what the interpreter itself calls
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
