"""The pipeline spec: one declarative YAML file → pydantic models.

The same models are the Prefect flow parameters, so a deployment shows them as a form in the UI.

Example (``deployments/specs/rte-skills.yaml``)::

    name: rte-skills
    job: skills
    labels:
      path: ../../crowdflow/data/snow_rte/labels.csv
      columns: {task: task, worker: worker, label: label}   # canonical: name in your file
    truth:
      path: ../../crowdflow/data/snow_rte/truth.csv
    skills:
      method: mv
      tie_break: random
      seed: 0
      duplicates: error
    checks:
      validation: block
      identifiability: block
      isolated_workers: warn
    output:
      dir: crowdflow-out

Relative paths are resolved against the spec file's folder.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from crowdflow.assignment import AssignmentOptions
from crowdflow.errors import SpecError
from crowdflow.personal_models import PersonalModelsOptions
from crowdflow.personal_rankings.options import PersonalRankingsOptions
from crowdflow.ranking import RankingOptions
from crowdflow.secrets import NO_INLINE_SECRET_PATTERN, NO_USERINFO_PATTERN, refuse_inline_secret
from crowdflow.skills import SkillsOptions

CheckMode = Literal["block", "warn"]
Scalar = str | int | float | bool | None
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
SQL_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,62}$"


def check_name(name: str, what: str = "name") -> str:
    """A pipeline name or run id that is safe as one path component, or ``ValueError`` saying why.

    1-128 characters of ``A-Z a-z 0-9 _ - .``, starting with a letter or digit: no ``/`` or ``\\``, no
    ``..``, no absolute path, no NUL, nothing a shell or a file system treats specially.
    """
    if not isinstance(name, str) or re.fullmatch(NAME_PATTERN, name) is None:
        shown = repr(name) if len(str(name)) <= 60 else repr(str(name)[:60]) + "..."
        why = ""
        if isinstance(name, str):
            if "\x00" in name:
                why = " (contains a NUL byte)"
            elif "/" in name or "\\" in name or name.startswith(("~", ".")):
                why = " (a name is one folder, not a path)"
            elif len(name) > 128:
                why = f" ({len(name)} characters, at most 128)"
        raise ValueError(
            f"invalid {what} {shown}{why}: use 1-128 letters, digits, '_', '-', '.', starting with a letter or digit"
        )
    return name


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Credentials(_Strict):
    """Where a database password comes from: never from the spec file itself.

    Attributes
    ----------
    password_env : str, optional
        Name of an environment variable holding the password (e.g. ``CROWDFLOW_PG_PASSWORD``).
    password_secret : str, optional
        Name of a Prefect ``Secret`` block holding the password (resolved by the task layer).
    """

    password_env: str | None = Field(
        None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="environment variable holding the password"
    )
    password_secret: str | None = Field(None, min_length=1, description="Prefect Secret block holding the password")

    @model_validator(mode="after")
    def _one_password_source(self) -> Credentials:
        if self.password_env is not None and self.password_secret is not None:
            raise ValueError("give password_env or password_secret, not both")
        return self


def _check_connection(url: str) -> str:
    # the library's own check (crowdflow.warehouse) names the scheme and rejects inline passwords
    from crowdflow.warehouse import check_connection_url

    try:
        check_connection_url(url, field="the URL")
    except SpecError as exc:  # pydantic reports ValueErrors with the offending key
        raise ValueError(str(exc)) from None
    return url


class SourceSpec(Credentials):
    """Where a table comes from: a file (``path``) or a SQL query against a database (``sql``).

    Attributes
    ----------
    path : str, optional
        CSV/TSV file, Parquet file or Parquet folder; relative to the spec file.
    format : {"auto", "csv", "parquet"}
        File format (files only).
    sql : str, optional
        A query whose result is the table; parameters are bound by the driver, never formatted in:
        ``:name`` for PostgreSQL, ``$name`` (or ``?`` with a list of params) for DuckDB.
    params : dict or list
        Values of the query's parameters.
    connection : str, optional
        ``duckdb:///path/file.duckdb`` (relative to the spec file; ``duckdb:////abs/path``) or
        ``postgresql://user@host:port/db``; never with a password in it.
    password_env, password_secret : str, optional
        Where the database password comes from (see :class:`Credentials`).
    columns : dict
        Canonical column → the column's name in the source (only the ones that differ).
    """

    path: str | None = Field(None, min_length=1, description="CSV/TSV file, Parquet file or Parquet folder")
    format: Literal["auto", "csv", "parquet"] = "auto"
    sql: str | None = Field(None, min_length=1, description="SQL query (bound parameters: :name / $name / ?)")
    params: dict[str, Scalar] | list[Scalar] = Field(
        default_factory=dict, description="query parameters, bound by the database driver"
    )
    connection: str | None = Field(
        None,
        description="duckdb:///file.duckdb or postgresql://user@host:port/db (no password: see password_env)",
        json_schema_extra={"pattern": NO_INLINE_SECRET_PATTERN},
    )
    columns: dict[str, str] = Field(default_factory=dict, description="canonical name → your column name")

    @field_validator("connection")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        return None if v is None else _check_connection(v)

    @model_validator(mode="after")
    def _file_or_query(self) -> SourceSpec:
        if (self.path is None) == (self.sql is None):
            raise ValueError("a source needs exactly one of path (a file) or sql (a query)")
        if self.sql is None:
            used = [k for k in ("params", "connection", "password_env", "password_secret") if getattr(self, k)]
            if used:
                raise ValueError(f"{used} only apply to a sql source")
            return self
        if self.connection is None:
            raise ValueError("a sql source needs a connection (duckdb:///file.duckdb or postgresql://user@host/db)")
        if self.format != "auto":
            raise ValueError("format applies to file sources only")
        if isinstance(self.params, list) and not self.connection.lower().startswith("duckdb"):
            raise ValueError("PostgreSQL queries take named params (a mapping, used as :name in the sql)")
        from crowdflow.warehouse import check_connection_url, check_read_only_query

        try:
            check_read_only_query(self.sql, check_connection_url(self.connection))
        except SpecError as exc:
            raise ValueError(str(exc)) from None
        return self

    @property
    def is_query(self) -> bool:
        return self.sql is not None

    def resolved(self, base: Path) -> Path:
        if self.path is None:
            raise ValueError("a sql source has no path")
        p = Path(self.path).expanduser()
        return p if p.is_absolute() else (base / p)


class ChecksSpec(_Strict):
    """Blocking (default) or warning mode of each pre-fit check."""

    validation: CheckMode = Field("block", description="schema expectations (Great Expectations)")
    identifiability: CheckMode = Field("block", description="no bipartite component in the worker graph")
    isolated_workers: CheckMode = Field("warn", description="workers who share no task with anyone")
    connectivity: CheckMode | None = Field(
        None,
        description="one connected comparison/agent graph; default: warn for ranking (scores per component), "
        "block for personal_rankings (annotator-item graph) and personal_models (agent graph)",
    )

    def connectivity_for(self, job: str) -> CheckMode:
        if self.connectivity is not None:
            return self.connectivity
        return "warn" if job == "ranking" else "block"

    def modes(self, job: str) -> dict[str, CheckMode]:
        """Check name → block/warn for ``job`` (what :func:`crowdflow.checks.graph_checks` takes)."""
        return {
            "identifiability": self.identifiability,
            "isolated_workers": self.isolated_workers,
            "connectivity": self.connectivity_for(job),
        }


class RunnerSpec(_Strict):
    """Where the fan-out steps of a run execute (README "Scale-out on Dask").

    ``inline`` (default) computes everything in the flow's process. ``dask`` sends the steps that split
    into independent pieces to a Dask cluster: the skills job's co-label statistics (one task per
    Parquet partition of the labels, summed exactly) and the blocks of ``personal_models`` with
    ``method: djam_blocked``. Results are identical to ``inline``; only the place of computation changes.
    """

    kind: Literal["inline", "dask"] = Field("inline", description="inline = in the flow process; dask = a Dask cluster")
    address: str | None = Field(
        None,
        description="scheduler address (tcp://host:8786) of an existing cluster; a local cluster when empty",
        json_schema_extra={"pattern": NO_USERINFO_PATTERN},
    )
    n_workers: int = Field(2, ge=1, description="workers of the local cluster (ignored with an address)")
    processes: bool = Field(True, description="local cluster of processes (true) or threads in this process (false)")
    partitions: int | None = Field(
        None, ge=1, description="skills: Parquet partitions of the labels (default: 2 per worker)"
    )
    scratch_dir: str | None = Field(
        None, description="folder for the partition files; must be visible to the workers of a remote cluster"
    )

    @field_validator("address")
    @classmethod
    def _no_credentials(cls, v: str | None) -> str | None:
        return refuse_inline_secret(v, "the address", allow_user=False)


class CacheSpec(_Strict):
    """Whether a fit may be answered from an earlier run's result, and for how long such a result is used.

    The key is what the fit receives (data, options, where it runs, the code's version): any change to those
    computes anew. A cached answer is logged and recorded in the manifest (``cache.hit``).
    """

    enabled: bool = Field(True, description="reuse the result of an identical earlier fit (off: always compute)")
    expiration_days: float = Field(
        7.0, gt=0.0, le=3650.0, description="how many days a cached fit result may be reused"
    )


class WarehouseSpec(Credentials):
    """Load every output table into DuckDB or PostgreSQL after the Parquet export.

    Each table gets a ``run_id`` column. ``replace`` recreates the table with this run's rows only;
    ``append`` adds this run's rows after deleting any earlier rows of the same run id (a rerun of a
    run id is idempotent). All tables are loaded in one transaction.
    """

    connection: str = Field(
        description="duckdb:///file.duckdb or postgresql://user@host:port/db (no password: see password_env)",
        json_schema_extra={"pattern": NO_INLINE_SECRET_PATTERN},
    )
    mode: Literal["replace", "append"] = Field("append", description="replace the tables, or append by run id")
    db_schema: str | None = Field(
        None,
        validation_alias=AliasChoices("schema", "db_schema"),
        pattern=SQL_NAME_PATTERN,
        description="database schema of the tables (created if missing); default: the database's default",
    )
    prefix: str = Field("", pattern=r"^[A-Za-z0-9_]{0,40}$", description="table name prefix, e.g. crowdflow_")

    @field_validator("connection")
    @classmethod
    def _url(cls, v: str) -> str:
        return _check_connection(v)


class OutputSpec(_Strict):
    """Where results go.

    ``layout: flat`` (default) writes ``<dir>/<pipeline>/<run id>/<table>.parquet``; ``layout: hive``
    writes each table as a hive-partitioned dataset ``<dir>/<table>/pipeline=<name>/run_date=<YYYY-MM-DD>/
    part-<run id>.parquet`` (with a ``run_id`` column) and keeps the manifest in ``<dir>/<pipeline>/<run id>/``.
    """

    dir: str = "crowdflow-out"
    layout: Literal["flat", "hive"] = Field("flat", description="flat run folders, or hive-partitioned datasets")
    warehouse: WarehouseSpec | None = Field(None, description="also load the output tables into a database")
    report: bool = Field(
        default=True,
        description="write report.html (figures need the 'report' extra: matplotlib) next to the tables",
    )


Job = Literal["skills", "ranking", "personal_rankings", "personal_models", "assignment", "next_batch"]

# Input tables each job needs (required, optional). Names are the table contracts in crowdflow.tables.
JOB_INPUTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "skills": (("labels",), ("truth",)),
    "ranking": (("comparisons",), ()),
    "personal_rankings": (("comparisons",), ()),
    "personal_models": (("agents", "edges"), ()),
    "assignment": (("candidates",), ("worker_caps", "task_caps")),
    "next_batch": (("open_tasks", "workers"), ()),
}


# The spec key holding each job's options model (next_batch assigns with the assignment options).
JOB_OPTIONS: dict[str, str] = {
    "skills": "skills",
    "ranking": "ranking",
    "personal_rankings": "personal_rankings",
    "personal_models": "personal_models",
    "assignment": "assignment",
    "next_batch": "assignment",
}


# Output table names of all jobs: with layout hive each is a dataset folder <out>/<table>, so a pipeline
# (whose run folders are <out>/<pipeline>) must not take one of these names.
OUTPUT_TABLES = frozenset(
    {
        "consensus", "skills", "components", "ranking", "outliers", "annotators", "path", "residuals",
        "personal_rankings", "user_factors", "item_factors", "excluded", "fit", "personal_models",
        "convergence", "assignment", "worker_load", "task_load", "candidates",
    }
)  # fmt: skip


JOB_INPUTS_ALL = (
    "labels",
    "truth",
    "comparisons",
    "agents",
    "edges",
    "candidates",
    "worker_caps",
    "task_caps",
    "open_tasks",
    "workers",
)


class PipelineSpec(_Strict):
    """A crowdflow pipeline: inputs, the job and its options, checks and output."""

    name: str = Field(
        description="pipeline name, used as an output folder: 1-128 of A-Z a-z 0-9 _ - .",
        json_schema_extra={"pattern": NAME_PATTERN},  # the form in Prefect's UI; checked by _safe_name
    )
    job: Job = "skills"
    labels: SourceSpec | None = None
    truth: SourceSpec | None = None
    comparisons: SourceSpec | None = None
    agents: SourceSpec | None = None
    edges: SourceSpec | None = None
    candidates: SourceSpec | None = None
    worker_caps: SourceSpec | None = Field(None, description="assignment: per-worker caps table (worker, capacity)")
    task_caps: SourceSpec | None = Field(None, description="assignment: per-task caps table (task, cap)")
    open_tasks: SourceSpec | None = None
    workers: SourceSpec | None = None
    skills_run: str | None = Field(
        None, description="next_batch: a skills pipeline output folder (its newest completed run is used) or one run"
    )
    skills: SkillsOptions = Field(default_factory=SkillsOptions)
    ranking: RankingOptions = Field(default_factory=RankingOptions)
    personal_rankings: PersonalRankingsOptions = Field(default_factory=PersonalRankingsOptions)
    personal_models: PersonalModelsOptions = Field(default_factory=PersonalModelsOptions)
    assignment: AssignmentOptions = Field(default_factory=AssignmentOptions)
    checks: ChecksSpec = Field(default_factory=ChecksSpec)
    output: OutputSpec = Field(default_factory=OutputSpec)
    runner: RunnerSpec = Field(default_factory=RunnerSpec)
    cache: CacheSpec = Field(default_factory=CacheSpec)
    base_dir: str = Field(".", description="folder relative paths are resolved against (the spec's folder)")

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        return check_name(v, "pipeline name")

    @model_validator(mode="after")
    def _inputs_for_job(self) -> PipelineSpec:
        required, optional = JOB_INPUTS[self.job]
        missing = [k for k in required if getattr(self, k) is None]
        if missing:
            raise ValueError(f"job '{self.job}' needs input(s) {missing}")
        extra = [k for k in JOB_INPUTS_ALL if getattr(self, k) is not None and k not in required + optional]
        if extra:
            raise ValueError(f"job '{self.job}' does not use input(s) {extra}")
        if (self.job == "next_batch") != (self.skills_run is not None):
            raise ValueError("skills_run is required by job 'next_batch' and used by no other job")
        if self.output.layout == "hive" and self.name in OUTPUT_TABLES:
            raise ValueError(
                f"with output.layout hive the pipeline name {self.name!r} would share the folder of the "
                f"'{self.name}' dataset; choose another name"
            )
        return self

    def inputs(self) -> dict[str, SourceSpec]:
        """The declared input sources by table kind, in a fixed order."""
        return {k: getattr(self, k) for k in JOB_INPUTS_ALL if getattr(self, k) is not None}

    def path_of(self, source: SourceSpec) -> Path:
        return source.resolved(Path(self.base_dir))

    def skills_run_path(self) -> str:
        """The skills run (or pipeline output folder) a next batch reads, resolved against ``base_dir``."""
        return str(Path(self.base_dir) / Path(str(self.skills_run)).expanduser())

    def output_dir(self) -> Path:
        return Path(self.base_dir) / Path(self.output.dir).expanduser()


def _format_pydantic(exc: ValidationError, origin: str) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
        parts.append(f"{loc}: {err['msg'].removeprefix('Value error, ')}")
    return f"{origin}: invalid spec: " + "; ".join(parts)


def parse_spec(data: Any, origin: str = "<spec>", base_dir: str | Path | None = None) -> PipelineSpec:
    """Validate a spec mapping; errors name the spec and the offending keys."""
    if not isinstance(data, dict):
        raise SpecError(f"{origin}: a spec must be a YAML mapping, got {type(data).__name__}")
    data = dict(data)
    if base_dir is not None and "base_dir" not in data:
        data["base_dir"] = str(base_dir)
    try:
        return PipelineSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_format_pydantic(exc, origin)) from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a mapping naming a key twice (the last one would win silently)."""


def _mapping_without_duplicates(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is given twice (lines {seen[key]} and {line})", key_node.start_mark
            )
        seen[key] = line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)

MAX_SPEC_BYTES = 1 << 20  # a spec is a page of YAML; a bigger file is not one


def load_spec(path: str | Path) -> PipelineSpec:
    """Read a YAML spec safely; relative paths resolve against its folder.

    Plain YAML only (``safe_load`` semantics: no ``!!python`` tags), every key at most once per mapping,
    at most 1 MiB and no pathological nesting; each refusal is a :class:`SpecError` naming the file and line.
    """
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"{p}: spec file not found")
    raw = p.read_bytes()
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError(f"{p}: {len(raw)} bytes is not a spec (at most {MAX_SPEC_BYTES} bytes)")
    try:
        data = yaml.load(raw.decode("utf-8"), Loader=_UniqueKeyLoader)
    except yaml.constructor.ConstructorError as exc:
        # safe loading only: a tag such as !!python/object would run code, so it is refused, not guessed at
        where = f" at line {exc.problem_mark.line + 1}" if exc.problem_mark else ""
        hint = " (specs are plain YAML: tags like !!python/... are not allowed)" if "tag" in str(exc.problem) else ""
        raise SpecError(f"{p}: not valid YAML: {exc.problem}{where}{hint}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise SpecError(f"{p}: not valid YAML: {exc}") from None
    except RecursionError:
        raise SpecError(f"{p}: not valid YAML: nested too deeply") from None
    return parse_spec(data, origin=str(p), base_dir=p.resolve().parent)
