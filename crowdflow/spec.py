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

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from crowdflow.assignment import AssignmentOptions
from crowdflow.contracts.errors import SpecError
from crowdflow.contracts.names import NAME_PATTERN as NAME_PATTERN  # re-exported: spec users import them from here
from crowdflow.contracts.names import check_name as check_name
from crowdflow.contracts.options import Options, form_schema
from crowdflow.personal_models import PersonalModelsOptions
from crowdflow.personal_rankings.options import PersonalRankingsOptions
from crowdflow.ranking import RankingOptions
from crowdflow.skills import SkillsOptions
from crowdflow.storage.listing import local_path
from crowdflow.storage.secrets import (
    NO_INLINE_SECRET_PATTERN,
    NO_USERINFO_PATTERN,
    PUBLIC_STORAGE_OPTIONS,
    refuse_inline_secret,
    storage_option_refusal,
)

CheckMode = Literal["block", "warn"]
Scalar = str | int | float | bool | None
SQL_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,62}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra=form_schema)


class Credentials(_Strict):
    """Where a database password comes from: an environment variable or a Prefect Secret block, never the spec."""

    password_env: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="The name of an environment variable that holds the password (for example PG_PASSWORD).",
    )
    password_secret: str | None = Field(
        None, min_length=1, description="The name of a Prefect Secret block that holds the password."
    )

    @model_validator(mode="after")
    def _one_password_source(self) -> Credentials:
        if self.password_env is not None and self.password_secret is not None:
            raise ValueError("give password_env or password_secret, not both")
        return self


class StorageSecret(_Strict):
    """Where a secret storage option's value comes from: an environment variable or a Prefect Secret block."""

    env: str | None = Field(
        None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="An environment variable of the flow and the workers."
    )
    secret_block: str | None = Field(None, min_length=1, description="The name of a Prefect Secret block.")

    @model_validator(mode="after")
    def _one_source(self) -> StorageSecret:
        if (self.env is None) == (self.secret_block is None):
            raise ValueError("a secret storage option is {env: VARIABLE} or {secret_block: name}")
        return self


def _storage_options_schema(schema: dict[str, Any]) -> None:
    """The form of ``storage_options``: public keys take a value, every other key only a secret reference, so a
    Prefect server refuses a run whose parameters hold an inline secret before it stores them."""
    values = schema.get("additionalProperties", {}).get("anyOf", [])
    scalar = [v for v in values if "$ref" not in v]
    # the reference written out, not as pydantic's $ref to StorageSecret: the form inlines every choice (the
    # Prefect UI draws a $ref as a raw JSON box), and a $ref copied into the source kinds' branches is dangling
    ref = {
        "title": "Secret reference",
        "type": "object",
        "properties": {
            "env": {"type": "string", "title": "Environment variable", "minLength": 1},
            "secret_block": {"type": "string", "title": "Prefect Secret block", "minLength": 1},
        },
    }
    schema.clear()
    schema.update(
        {
            "type": "object",
            "title": "Storage Options",
            "description": "Options of the file system of a URL path (s3://, gs://): "
            f"{', '.join(sorted(PUBLIC_STORAGE_OPTIONS))} take a value; any other option (a key, token, "
            "connection string…) is a secret, given as {env: VARIABLE} or {secret_block: name}.",
            # public keys by pattern, not as fixed properties: the run form draws an object with fixed properties
            # inside a source kind as a form the kind's button cannot be matched against (tests/test_ui_form.py)
            "patternProperties": {
                "^(" + "|".join(sorted(PUBLIC_STORAGE_OPTIONS)) + ")$": {"anyOf": scalar},
            },
            "additionalProperties": ref,
        }
    )


def _check_connection(url: str) -> str:
    # the library's own check (crowdflow.storage.warehouse) names the scheme and rejects inline passwords
    from crowdflow.storage.warehouse import check_connection_url

    try:
        check_connection_url(url, field="the URL")
    except SpecError as exc:  # pydantic reports ValueErrors with the offending key
        raise ValueError(str(exc)) from None
    return url


SourceKind = Literal["file", "folder", "url", "sql"]

# The fields of each kind of source, in form order; ``columns`` (the column mapping) applies to every kind.
# Folder comes first: the UI keeps the button whose fields best match the value, first on a tie, and an empty folder
# source is {columns: {}}, which matches File as well (a file source also holds format: auto).
SOURCE_FIELDS: dict[str, tuple[str, ...]] = {
    "folder": ("folder", "columns"),
    "file": ("path", "format", "columns"),
    "url": ("url", "storage_options", "columns"),
    "sql": ("sql", "params", "connection", "password_env", "password_secret", "columns"),
}
# A folder or a URL may be given under its own key (folder: data/labels/, url: s3://bucket/labels/) or as path;
# the model holds it as path. Under its own key the form can tell the kinds apart by their fields.
_LOCATION_KEYS = {"folder": "folder", "url": "url"}
_SOURCE_TITLES = {"file": "File", "folder": "Folder", "url": "URL", "sql": "SQL query"}
_SOURCE_PATHS = {
    "file": ("Path", "A CSV/TSV or Parquet file; relative to the spec's folder."),
    "folder": ("Folder", "A folder of Parquet files (one dataset); relative to the spec's folder."),
    "url": ("URL", "A Parquet dataset where it lives (s3://bucket/labels/, gs://...), read by the Dask workers."),
}
_SOURCE_REQUIRED = {"file": ["path"], "folder": ["folder"], "url": ["url"], "sql": ["sql", "connection"]}


def _source_form_schema(schema: dict[str, Any]) -> None:
    """A source's form: a choice of kind (file, folder, URL, SQL query), each showing only its own fields.

    The JSON schema is an ``anyOf`` over the four kinds (the Prefect UI draws it as a row of buttons); each branch
    holds that kind's fields only, with its required ones marked. Python validation is the model's: a flat mapping
    (``path`` or ``sql``) as before, or one with ``kind`` (:meth:`SourceSpec._kind_of`).
    """
    form_schema(schema)
    props = schema.pop("properties", {})
    for key in ("required", "type", "additionalProperties"):
        schema.pop(key, None)
    branches = []
    for kind, fields in SOURCE_FIELDS.items():
        own = {k: dict(props["path" if k in ("folder", "url") else k]) for k in fields}
        location = "path" if kind == "file" else _LOCATION_KEYS.get(kind)
        if location is not None:
            own[location]["title"], own[location]["description"] = _SOURCE_PATHS[kind]
        branches.append(
            {"title": _SOURCE_TITLES[kind], "type": "object", "properties": own, "required": _SOURCE_REQUIRED[kind]}
        )
    schema["anyOf"] = branches


class SourceSpec(Credentials):
    """Where a table comes from: a file or folder (path), or a read-only SQL query against a database (sql)."""

    model_config = ConfigDict(json_schema_extra=_source_form_schema)

    kind: SourceKind = Field(
        "file",
        description="What the source is: a file, a folder of Parquet files, a URL read by Dask workers, or a SQL "
        "query. Optional in a spec: it follows from path or sql.",
    )
    path: str | None = Field(
        None,
        min_length=1,
        description="A CSV/TSV file, a Parquet file or a folder of Parquet files; relative to the spec's folder.",
    )
    format: Literal["auto", "csv", "parquet"] = Field(
        "auto", description="How to read the file: auto decides from its suffix (.csv, .tsv, .parquet)."
    )
    sql: str | None = Field(
        None,
        min_length=1,
        description="A read-only SELECT whose result is the table; parameters as :name (PostgreSQL) or $name (DuckDB).",
    )
    params: dict[str, Scalar] | list[Scalar] = Field(
        default_factory=dict, description="Values of the query's parameters; the database binds them, never pasted in."
    )
    connection: str | None = Field(
        None,
        description="The database: duckdb:///file.duckdb or postgresql://user@host:port/db, without a password.",
        json_schema_extra={"pattern": NO_INLINE_SECRET_PATTERN},
    )
    columns: dict[str, str] = Field(
        default_factory=dict,
        description="Your column names where they differ from crowdflow's, as crowdflow name: yours (task: item_id).",
    )
    storage_options: dict[str, StorageSecret | Scalar] = Field(
        default_factory=dict,
        description="Options of the file system of a URL path (s3://, gs://), e.g. endpoint_url or anon; "
        "a secret option is {env: VARIABLE} or {secret_block: name}, never a value.",
        json_schema_extra=_storage_options_schema,
    )

    @field_validator("connection")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        return None if v is None else _check_connection(v)

    @model_validator(mode="before")
    @classmethod
    def _kind_of(cls, data: Any) -> Any:
        """Accept the flat form (``path`` or ``sql``) and the one with ``kind``; a kind takes its own fields only.

        Without ``kind`` it follows from the fields: ``sql`` → sql, a ``path`` with a scheme (``s3://``) → url,
        a ``path`` ending in ``/`` → folder, another ``path`` → file (a folder path without the slash reads the same).
        """
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for kind_of_key, key in _LOCATION_KEYS.items():
            if key in data:
                if data.get("path") is not None:
                    raise ValueError(f"give {key} or path, not both")
                if data.get("kind", kind_of_key) != kind_of_key:
                    raise ValueError(f"{key} is the location of a {kind_of_key} source, not of a {data['kind']} one")
                data["path"], data["kind"] = data.pop(key), kind_of_key
        kind = data.get("kind")
        if kind is None:
            path = data.get("path")
            if data.get("sql") is not None:
                kind = "sql"
            elif isinstance(path, str) and "://" in path:
                kind = "url"
            else:
                kind = "folder" if isinstance(path, str) and path.endswith("/") else "file"
            return {**data, "kind": kind}
        if kind in SOURCE_FIELDS:
            own = {"path" if k in _LOCATION_KEYS else k for k in SOURCE_FIELDS[kind]}
            given = {k for k, v in data.items() if k != "kind" and v not in (None, {}, [])}
            if data.get("format", "auto") == "auto":  # the default format is no field of another kind
                given.discard("format")
            other = sorted(given - own)
            if other:
                raise ValueError(f"a {kind} source takes {list(SOURCE_FIELDS[kind])}, not {other}")
        return data

    @model_serializer(mode="wrap")
    def _own_fields(self, handler: Any) -> Any:
        """Dump the kind and its own fields only (what the form shows for that kind)."""
        data = handler(self)
        if not isinstance(data, dict):
            return data
        keep = {"kind", *SOURCE_FIELDS[self.kind]}
        if self.kind in _LOCATION_KEYS:
            data[_LOCATION_KEYS[self.kind]] = data.get("path")
        return {k: v for k, v in data.items() if k in keep}

    @model_validator(mode="after")
    def _file_or_query(self) -> SourceSpec:
        if (self.path is None) == (self.sql is None):
            raise ValueError("a source needs exactly one of path (a file) or sql (a query)")
        if (self.kind == "sql") != (self.sql is not None):
            raise ValueError(f"a {self.kind} source needs " + ("sql (a query)" if self.kind == "sql" else "a path"))
        if (self.kind == "url") != ("://" in (self.path or "")):  # any scheme; file:// is then read as its path
            raise ValueError(
                "a url source needs a location with a scheme (s3://bucket/labels/, gs://...)"
                if self.kind == "url"
                else f"{self.path} is a URL: give kind url (or leave kind out)"
            )
        if self.sql is None:
            used = [k for k in ("params", "connection", "password_env", "password_secret") if getattr(self, k)]
            if used:
                raise ValueError(f"{used} only apply to a sql source")
            if self.storage_options and "://" not in (self.path or ""):
                raise ValueError("storage_options apply to a URL path (s3://…, gs://…) only")
            refused = storage_option_refusal(dict(self.storage_options))
            if refused:
                raise ValueError(refused)
            if self.is_url:
                refuse_inline_secret(self.path, "the path")
            return self
        if self.connection is None:
            raise ValueError("a sql source needs a connection (duckdb:///file.duckdb or postgresql://user@host/db)")
        if self.format != "auto":
            raise ValueError("format applies to file sources only")
        if isinstance(self.params, list) and not self.connection.lower().startswith("duckdb"):
            raise ValueError("PostgreSQL queries take named params (a mapping, used as :name in the sql)")
        from crowdflow.storage.warehouse import check_connection_url, check_read_only_query

        try:
            check_read_only_query(self.sql, check_connection_url(self.connection))
        except SpecError as exc:
            raise ValueError(str(exc)) from None
        return self

    @property
    def is_query(self) -> bool:
        return self.sql is not None

    @property
    def is_url(self) -> bool:
        """A remote URL (``s3://bucket/labels/``): read where it lives through fsspec, never copied.

        A ``file://`` URL is not one: it names a local path, and is that path in every respect (reading, the
        dataset listing, the fingerprint, the output-inside-input check; :func:`crowdflow.storage.listing.local_path`).
        """
        return self.path is not None and "://" in self.path and local_path(self.path) is None

    def resolved(self, base: Path) -> Path:
        if self.path is None:
            raise ValueError("a sql source has no path")
        local = local_path(self.path)
        if local is None:
            raise ValueError(f"{self.path} is a remote URL, not a local path")
        p = local.expanduser()
        return p if p.is_absolute() else (base / p)


# The input of each job that a Dask runner reads on its workers when it is a Parquet folder or a URL (docs/scale.md);
# every other input, and every input of an inline run, is read by the flow (a remote URL through fsspec).
PARTITIONED_INPUTS: dict[str, str] = {"skills": "labels", "ranking": "comparisons", "personal_models": "agents"}

# The checks each job runs: schema validation of every input, then the job's graph checks (crowdflow.checks).
JOB_CHECKS: dict[str, tuple[str, ...]] = {
    "skills": ("validation", "identifiability", "isolated_workers"),
    "ranking": ("validation", "connectivity"),
    "personal_rankings": ("validation", "connectivity"),
    "personal_models": ("validation", "connectivity"),
    "assignment": ("validation",),
    "next_batch": ("validation",),
}


class ChecksSpec(_Strict):
    """What each check before the fit does when it fails: block (stop, write nothing) or warn (log and go on)."""

    validation: CheckMode = Field(
        "block",
        description="The table contracts (columns, types, missing or bad values), checked with Great Expectations.",
    )
    identifiability: CheckMode = Field(
        "block", description="Skills: groups of workers whose skills cannot be told apart (a two-sided worker graph)."
    )
    isolated_workers: CheckMode = Field(
        "warn", description="Skills: workers who share no task with anyone, so nothing can be learned about them."
    )
    connectivity: CheckMode | None = Field(
        None,
        description="Rankings and personal models: data that splits into unconnected parts. Empty: warn for a "
        "ranking (each part ranked on its own), block for personal rankings and personal models.",
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
    """Where the heavy steps of a run execute: in the flow's process, or on a Dask cluster (same results)."""

    kind: Literal["inline", "dask"] = Field(
        "inline", description="inline runs everything in the flow's process; dask sends the heavy steps to a cluster."
    )
    address: str | None = Field(
        None,
        description="The address of an existing Dask scheduler (tcp://host:8786); empty starts a local cluster.",
        json_schema_extra={"pattern": NO_USERINFO_PATTERN},
    )
    n_workers: int = Field(2, ge=1, description="How many workers a local cluster starts (not used with an address).")
    processes: bool = Field(
        True, description="A local cluster of separate processes (true) or of threads in this process (false)."
    )
    partitions: int | None = Field(
        None,
        ge=1,
        description="Skills: how many pieces the labels are split into for the cluster (default: 2 per worker).",
    )
    scratch_dir: str | None = Field(
        None,
        description="A folder for the pieces the cluster reads (created if missing); a remote cluster's workers must "
        "see it too.",
    )
    memory_limit: str | None = Field(
        None,
        pattern=r"^\s*\d+(\.\d+)?\s*([kKmMgGtT]i?[bB]|[bB])?\s*$",
        description="Memory per worker of a local cluster (e.g. 4GB); a worker over it is restarted by Dask. "
        "Default: the machine's memory shared by the workers.",
    )
    worker_timeout: float = Field(
        60.0,
        gt=0.0,
        le=86400.0,
        description="Seconds to wait for the cluster at address to have a worker; then the run stops (exit 2) "
        "naming the address.",
    )

    @field_validator("address")
    @classmethod
    def _no_credentials(cls, v: str | None) -> str | None:
        return refuse_inline_secret(v, "the address", allow_user=False)


class CacheSpec(_Strict):
    """Whether a fit may be answered from an identical earlier fit, and for how many days."""

    enabled: bool = Field(True, description="Reuse the result of an identical earlier fit; off computes every time.")
    expiration_days: float = Field(7.0, gt=0.0, le=3650.0, description="How many days a fit's result may be reused.")


class WarehouseSpec(Credentials):
    """Also load every output table into DuckDB or PostgreSQL, in one transaction per run."""

    connection: str = Field(
        description="duckdb:///file.duckdb or postgresql://user@host:port/db (no password: see password_env)",
        json_schema_extra={"pattern": NO_INLINE_SECRET_PATTERN},
    )
    mode: Literal["replace", "append"] = Field(
        "append", description="append adds this run's rows (a rerun replaces its own); replace keeps only this run."
    )
    db_schema: str | None = Field(
        None,
        validation_alias=AliasChoices("schema", "db_schema"),
        pattern=SQL_NAME_PATTERN,
        description="The database schema the tables go into (created if missing); empty: the database's default.",
    )
    prefix: str = Field(
        "", pattern=r"^[A-Za-z0-9_]{0,40}$", description="A prefix for the table names, for example crowdflow_."
    )

    @field_validator("connection")
    @classmethod
    def _url(cls, v: str) -> str:
        return _check_connection(v)


class OutputSpec(_Strict):
    """Where the results are written, in which layout, and what else a run produces."""

    dir: str = Field("crowdflow-out", description="The output folder; each pipeline writes its runs into a sub-folder.")
    layout: Literal["flat", "hive"] = Field(
        "flat",
        description="flat writes a folder per run; hive writes one dataset per table, by pipeline and date.",
    )
    warehouse: WarehouseSpec | None = Field(None, description="Also load the output tables into a database.")
    report: bool = Field(
        default=True,
        description="Write report.html, a page with the run's figures and tables, next to the outputs.",
    )


Job = Literal["skills", "ranking", "personal_rankings", "personal_models", "assignment", "next_batch"]

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

# Output table names of all jobs: with layout hive each is a dataset folder <out>/<table>, so a pipeline
# (whose run folders are <out>/<pipeline>) must not take one of these names.
OUTPUT_TABLES = frozenset(
    {
        "consensus", "skills", "components", "gold_workers", "gold_confusion", "ranking", "outliers", "annotators",
        "path", "residuals", "pair_residuals", "personal_rankings", "user_factors", "item_factors", "excluded", "fit",
        "personal_models", "convergence", "assignment", "worker_load", "task_load", "candidates",
    }
)  # fmt: skip


def _pipeline_form_schema(schema: dict[str, Any]) -> None:
    """The run form of a job: its name, inputs and options first, then what every pipeline shares."""
    form_schema(schema)
    props = schema.get("properties", {})
    job = props.get("job", {})
    if "const" in job:  # a required one-item choice, never "a const" or "(Optional)": the form sends it
        value = job.pop("const")
        job.pop("default", None)
        job.update(enum=[value], type="string", title="Job")
        job["description"] = "The job of the button above: choose it here too, so the run is sent with it."
        schema["required"] = ["job", *(k for k in schema.get("required", []) if k != "job")]
    # each input inline as its choice of kinds: the UI draws a property's own anyOf as buttons, not one behind a $ref
    kinds = SourceSpec.model_json_schema()["anyOf"]
    for key, prop in props.items():
        if "SourceSpec" in str(prop.get("$ref", "")):  # pydantic names the reference internally here
            title = key.replace("_", " ").capitalize()
            props[key] = {"title": title, **{k: v for k, v in prop.items() if k != "$ref"}, "anyOf": kinds}
    first = ["job", "name", *(k for k in props if k in JOB_INPUTS_ALL or k == "skills_run")]
    first += [k for k in props if k in ("skills", "ranking", "personal_rankings", "personal_models", "assignment")]
    schema["properties"] = {k: props[k] for k in [*first, *(k for k in props if k not in first)]}


class PipelineBase(_Strict):
    """What every pipeline has: a name, checks, an output, where it runs, caching; its job adds inputs and options."""

    model_config = ConfigDict(json_schema_extra=_pipeline_form_schema)

    job: Job = Field(description="The job this pipeline runs.")
    name: str = Field(
        description="The pipeline's name; it is also the folder its runs are written to (letters, digits, _ - .).",
        json_schema_extra={"pattern": NAME_PATTERN},  # the form in Prefect's UI; checked by _safe_name
    )
    checks: ChecksSpec = Field(
        default_factory=ChecksSpec, description="What a failed check before the fit does: stop the run, or warn."
    )
    output: OutputSpec = Field(default_factory=OutputSpec, description="Where and how the results are written.")
    runner: RunnerSpec = Field(
        default_factory=RunnerSpec, description="Where the heavy steps run: in this process, or on a Dask cluster."
    )
    cache: CacheSpec = Field(default_factory=CacheSpec, description="Whether an identical earlier fit may be reused.")
    base_dir: str = Field(
        ".", description="The folder relative paths start from (a spec file's own folder when it is read from disk)."
    )

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        return check_name(v, "pipeline name")

    def partitioned_input(self) -> str | None:
        """The input kind the Dask workers read file by file (docs/scale.md), or None.

        With ``runner.kind: dask``, the job's large input (``PARTITIONED_INPUTS``) given as a Parquet folder or a URL
        is never read by the flow: the workers read, validate and reduce it partition by partition.
        """
        kind = PARTITIONED_INPUTS.get(self.job)
        src = self.inputs().get(kind) if kind else None
        if self.runner.kind != "dask" or src is None or src.is_query:
            return None
        return kind if src.is_url or self.path_of(src).is_dir() else None

    def location_of(self, source: SourceSpec) -> str:
        """Where a file source is: its URL as given, else the absolute path (:meth:`path_of`)."""
        return str(source.path) if source.is_url else str(self.path_of(source))

    @model_validator(mode="after")
    def _hive_name(self) -> PipelineBase:
        if self.output.layout == "hive" and self.name in OUTPUT_TABLES:
            raise ValueError(
                f"with output.layout hive the pipeline name {self.name!r} would share the folder of the "
                f"'{self.name}' dataset; choose another name"
            )
        return self

    def check_modes(self) -> dict[str, CheckMode]:
        """Check name → block/warn for this pipeline (what :func:`crowdflow.checks.graph_checks` takes)."""
        return self.checks.modes(self.job)

    def check_settings(self) -> dict[str, CheckMode]:
        """The checks that apply to this job and their policy (the manifest's ``check_settings``, the report's
        "Check settings"); what they found is recorded apart, under ``checks``."""
        modes = {"validation": self.checks.validation, **self.check_modes()}
        return {name: modes[name] for name in JOB_CHECKS[self.job]}

    def extras(self) -> dict[str, str]:
        """The optional extras of the ``crowdflow`` package a run of this spec uses → what uses them.

        ``report`` (matplotlib) draws the figures of report.html (without it the page has their numbers as
        tables), ``dask`` (dask.distributed) runs a ``runner.kind: dask`` fan-out, ``warehouse`` (DuckDB,
        psycopg, sqlglot) reads SQL sources and loads ``output.warehouse``, ``crowdkit`` (crowd-kit) runs a
        ``skills.method: crowdkit:<Name>`` aggregator (not in ``deploy``). The ``deploy`` extra holds the first three:
        what every shipped deployment needs on a worker (docs/how-to/schedule.md).
        """
        out: dict[str, str] = {}
        if self.output.report:
            out["report"] = "output.report: the figures of report.html"
        method = str(getattr(getattr(self, "skills", None), "method", ""))
        if method.startswith("crowdkit:"):
            out["crowdkit"] = f"skills.method {method}"
        if self.runner.kind == "dask":
            out["dask"] = "runner.kind: dask"
        elif getattr(getattr(self, "personal_models", None), "executor", None) == "dask":
            out["dask"] = "personal_models.executor: dask"
        queries = [k for k, src in self.inputs().items() if src.is_query]
        if queries or self.output.warehouse is not None:
            out["warehouse"] = ", ".join(
                [f"{k}.sql" for k in queries] + (["output.warehouse"] * bool(self.output.warehouse))
            )
        return out

    def inputs(self) -> dict[str, SourceSpec]:
        """The declared input sources by table kind, in a fixed order."""
        return {k: getattr(self, k) for k in JOB_INPUTS_ALL if getattr(self, k, None) is not None}

    # Paths are resolved against ``base_dir`` (a relative ``base_dir`` against the working directory: the project
    # folder of a deployment's pull step) and normalised, so messages and logs name ``/srv/crowdflow/data/x.csv``,
    # never ``deployments/specs/../../data/x.csv``. Symbolic links are kept (``abspath``, not ``resolve``).

    def path_of(self, source: SourceSpec) -> Path:
        return Path(os.path.abspath(source.resolved(Path(self.base_dir))))

    def output_dir(self) -> Path:
        return Path(os.path.abspath(Path(self.base_dir) / Path(self.output.dir).expanduser()))


class SkillsPipeline(PipelineBase):
    """Consensus labels and worker skills from a table of workers' answers, scored against gold answers if given."""

    model_config = ConfigDict(title="skills")  # the form's button; the docstring says what it does

    job: Literal["skills"] = Field("skills", description="The job this pipeline runs.")
    labels: SourceSpec = Field(description="The workers' answers: one row per task, worker and label.")
    truth: SourceSpec | None = Field(
        None, description="Known right answers for some tasks (task, label); adds accuracy to the run."
    )
    skills: SkillsOptions = Field(default_factory=SkillsOptions, description="How the answers are combined.")

    def check_modes(self) -> dict[str, CheckMode]:
        """The checks' policies; the bipartite-component rule blocks only the rank-one method (pgd).

        A bipartite worker graph leaves the rank-one skills unidentified (docs/methods/skills.md §3.1); Dawid–Skene
        and majority vote do not estimate those skills, so for them the finding is reported and the run goes on.
        """
        modes = super().check_modes()
        if not self.skills.needs_identifiable_skills:
            modes["identifiability"] = "warn"
        return modes


class RankingPipeline(PipelineBase):
    """One ranking of items from pairwise comparisons, with the comparisons that look wrong flagged as outliers."""

    model_config = ConfigDict(title="ranking")  # the form's button; the docstring says what it does

    job: Literal["ranking"] = Field("ranking", description="The job this pipeline runs.")
    comparisons: SourceSpec = Field(
        description="Pairwise judgements: annotator, item_a, item_b and an outcome (or the winner)."
    )
    ranking: RankingOptions = Field(default_factory=RankingOptions, description="How the ranking is fitted.")


class PersonalRankingsPipeline(PipelineBase):
    """A ranking of the items for every user, from each user's own pairwise judgements and everyone else's."""

    model_config = ConfigDict(title="personal_rankings")  # the form's button; the docstring says what it does

    job: Literal["personal_rankings"] = Field("personal_rankings", description="The job this pipeline runs.")
    comparisons: SourceSpec = Field(
        description="Pairwise judgements: annotator, item_a, item_b and an outcome (or the winner)."
    )
    personal_rankings: PersonalRankingsOptions = Field(
        default_factory=PersonalRankingsOptions, description="How the per-user rankings are fitted."
    )


class PersonalModelsPipeline(PipelineBase):
    """A small model per agent, each agent borrowing strength from its neighbours in a similarity graph."""

    model_config = ConfigDict(title="personal_models")  # the form's button; the docstring says what it does

    job: Literal["personal_models"] = Field("personal_models", description="The job this pipeline runs.")
    agents: SourceSpec = Field(description="Each agent's data: agent, y and feature columns (one row per sample).")
    edges: SourceSpec = Field(description="Which agents are alike: source, target and a positive weight.")
    personal_models: PersonalModelsOptions = Field(
        default_factory=PersonalModelsOptions, description="How the personal models are fitted."
    )


class AssignmentPipeline(PipelineBase):
    """The best task-worker pairs from scored candidates, within a budget and per-worker and per-task caps."""

    model_config = ConfigDict(title="assignment")  # the form's button; the docstring says what it does

    job: Literal["assignment"] = Field("assignment", description="The job this pipeline runs.")
    candidates: SourceSpec = Field(description="Candidate pairs: task, worker and a score (higher is better).")
    worker_caps: SourceSpec | None = Field(
        None, description="Per-worker limits (worker, capacity); assignment.worker_cap is the default for the rest."
    )
    task_caps: SourceSpec | None = Field(
        None, description="Per-task limits (task, cap); assignment.task_cap is the default for the rest."
    )
    assignment: AssignmentOptions = Field(
        default_factory=AssignmentOptions, description="The budget and the caps of the assignment."
    )


class NextBatchPipeline(PipelineBase):
    """The next batch of work: open tasks go to available workers, scored by a skills run's skills and confidences."""

    model_config = ConfigDict(title="next_batch")  # the form's button; the docstring says what it does

    job: Literal["next_batch"] = Field("next_batch", description="The job this pipeline runs.")
    skills_run: str = Field(
        description="A skills pipeline's output folder (its newest completed run is used), or one run's folder."
    )
    max_skills_run_age_hours: float | None = Field(
        None,
        gt=0.0,
        description="Refuse a skills run that finished longer ago than this many hours (the run stops, exit 2, "
        "naming the run and its age); empty: any age.",
    )
    open_tasks: SourceSpec = Field(description="The tasks still to be labelled: one row per task.")
    workers: SourceSpec = Field(description="The workers available now: worker and an optional capacity.")
    assignment: AssignmentOptions = Field(
        default_factory=AssignmentOptions, description="The budget and the caps of the batch."
    )

    def skills_run_path(self) -> str:
        """The skills run (or pipeline output folder) a next batch reads, resolved against ``base_dir``."""
        return os.path.abspath(Path(self.base_dir) / Path(self.skills_run).expanduser())


JOB_MODELS: dict[str, type[PipelineBase]] = {
    "skills": SkillsPipeline,
    "ranking": RankingPipeline,
    "personal_rankings": PersonalRankingsPipeline,
    "personal_models": PersonalModelsPipeline,
    "assignment": AssignmentPipeline,
    "next_batch": NextBatchPipeline,
}

#: A pipeline spec of any job. As a Prefect flow parameter its JSON schema is an ``anyOf`` over the jobs' models
#: (titled by job), which the UI's run form shows as a choice of job followed by that job's inputs and options only.
PipelineSpec = Annotated[
    SkillsPipeline
    | RankingPipeline
    | PersonalRankingsPipeline
    | PersonalModelsPipeline
    | AssignmentPipeline
    | NextBatchPipeline,
    Field(union_mode="left_to_right"),
]


def _options_key(model: type[PipelineBase]) -> str:
    keys = [
        n for n, f in model.model_fields.items() if isinstance(f.annotation, type) and issubclass(f.annotation, Options)
    ]
    assert len(keys) == 1, model
    return keys[0]


def _inputs_of(model: type[PipelineBase]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    required = tuple(k for k in JOB_INPUTS_ALL if k in model.model_fields and model.model_fields[k].is_required())
    optional = tuple(k for k in JOB_INPUTS_ALL if k in model.model_fields and not model.model_fields[k].is_required())
    return required, optional


# Derived from the job models (declared once there): input tables per job (required, optional), and the field
# holding each job's options (next_batch assigns with the assignment options).
JOB_INPUTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {j: _inputs_of(m) for j, m in JOB_MODELS.items()}
JOB_OPTIONS: dict[str, str] = {j: _options_key(m) for j, m in JOB_MODELS.items()}


def _format_pydantic(exc: ValidationError, origin: str, job: str) -> str:
    parts = []
    inputs = JOB_INPUTS[job][0] + JOB_INPUTS[job][1]
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing" and len(err["loc"]) == 1 and err["loc"][0] in inputs:
            msg = f"job '{job}' needs input(s) ['{err['loc'][0]}']"
        elif err["type"] == "extra_forbidden" and len(err["loc"]) == 1 and str(err["loc"][0]) in JOB_INPUTS_ALL:
            msg = f"job '{job}' does not use input(s) ['{err['loc'][0]}']"
        parts.append(f"{loc}: {msg}")
    return f"{origin}: invalid spec: " + "; ".join(parts)


def parse_spec(data: Any, origin: str = "<spec>", base_dir: str | Path | None = None) -> PipelineBase:
    """Validate a spec mapping with its job's model (``job`` defaults to ``skills``); errors name the spec and keys.

    Returns the job's model (:class:`SkillsPipeline`, :class:`RankingPipeline`, …): it holds that job's inputs and
    options only, so a key of another job is refused as an unknown key.
    """
    if not isinstance(data, dict):
        raise SpecError(f"{origin}: a spec must be a YAML mapping, got {type(data).__name__}")
    data = dict(data)
    job = data.setdefault("job", "skills")
    if job not in JOB_MODELS:
        raise SpecError(f"{origin}: invalid spec: job: unknown job {job!r}; use one of {list(JOB_MODELS)}")
    if base_dir is not None and "base_dir" not in data:
        data["base_dir"] = str(base_dir)
    try:
        return JOB_MODELS[job].model_validate(data)
    except ValidationError as exc:
        raise SpecError(_format_pydantic(exc, origin, job)) from None


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


def load_spec(path: str | Path) -> PipelineBase:
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
