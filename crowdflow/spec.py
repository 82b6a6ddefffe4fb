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
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from crowdflow.errors import SpecError

CheckMode = Literal["block", "warn"]
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"


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


class SourceSpec(_Strict):
    """Where a table comes from.

    Attributes
    ----------
    path : str
        CSV/TSV file, Parquet file or Parquet folder; relative to the spec file.
    format : {"auto", "csv", "parquet"}
    columns : dict
        Canonical column → the column's name in the source (only the ones that differ).
    """

    path: str = Field(min_length=1, description="CSV/TSV file, Parquet file or Parquet folder")
    format: Literal["auto", "csv", "parquet"] = "auto"
    columns: dict[str, str] = Field(default_factory=dict, description="canonical name → your column name")

    def resolved(self, base: Path) -> Path:
        p = Path(self.path).expanduser()
        return p if p.is_absolute() else (base / p)


class SkillsOptions(_Strict):
    """Options of the skills/consensus job (spec skills-rank-one.md §8)."""

    method: Literal["pgd", "onecoin_ds", "ds", "mv"] = Field(
        "pgd",
        description="pgd = rank-one skills + MAP vote; onecoin_ds / ds = Dawid-Skene EM; mv = majority vote",
    )
    solver: Literal["scaled", "gd", "eg"] = Field(
        "scaled",
        description="scaled = PGD with per-worker steps 1/(4 r_i) (same optimum, ~10x fewer iterations); "
        "gd = the paper's PGD with one step 1/(4 max r_i); eg = exponentiated gradient (needs sign_mode bfs)",
    )
    weighting: Literal["count", "binary", "square"] = Field("count", description="edge weights B(N_ij)")
    tau: float = Field(1.0, ge=0.0, description="box ±(1 − tau/√n_i) around the skills")
    x0: float = Field(0.5, gt=0.0, description="initial skill of every worker")
    eta: float | None = Field(None, gt=0.0, description="step size (default 1/(4 max row sum of weights))")
    tol: float = Field(1e-7, gt=0.0, description="stop when max |Δx| < tol")
    max_iter: int = Field(5000, ge=1)
    sign_mode: Literal["sum_rule", "bfs"] = "sum_rule"
    fallback: Literal["mv", "zero"] = Field(
        "mv", description="tasks whose labellers are all unidentified: majority vote, or zero weight"
    )
    min_pair_count: int = Field(1, ge=1, description="ignore worker pairs sharing fewer tasks")
    spectral: bool = Field(True, description="signless-Laplacian eigenvalues in the component diagnostics")
    tie_break: Literal["random", "smallest"] = Field(
        "random", description="seeded random choice among tied classes, or the first class in label order"
    )
    seed: int = 0
    duplicates: Literal["error", "keep_last", "keep_first"] = Field(
        "error", description="policy for repeated (task, worker) answers"
    )
    classes: list[str] | None = Field(None, description="declared label set; labels outside it fail validation")

    @field_validator("classes")
    @classmethod
    def _two_classes(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and len(set(v)) < 2:
            raise ValueError("a label set needs at least 2 distinct classes")
        return v


class RankingOptions(_Strict):
    """Global ranking from pairwise comparisons (spec robust-hodgerank.md)."""

    outliers: Literal["lbi", "hlasso", "none"] = Field(
        "lbi", description="outlier detection: Linearized Bregman path, Huber-LASSO, or plain HodgeRank"
    )
    algorithm: Literal[2, 3, 4] = Field(3, description="LBI: 2 = joint, 3 = projected (exact θ), 4 = Sync-LBI")
    kappa: float = Field(100.0, gt=0.0, description="LBI damping κ")
    stop_rule: Literal["budget", "discrepancy", "cv", "time"] = Field("budget", description="LBI early stop")
    budget: float = Field(0.05, gt=0.0, lt=1.0, description="share of comparisons allowed to be outliers")
    lambda_rule: Literal["budget", "concomitant", "cv", "magnitude"] = Field("budget", description="HLASSO λ choice")
    n_workers: int = Field(2, ge=1, description="threads of Sync-LBI (algorithm 4)")
    seed: int = 0


class PersonalRankingsOptions(_Strict):
    """Low-rank BTL per-user rankings (spec personal-rankings-manifold.md)."""

    rank: int | list[int] = Field(5, description="rank r of X = L Rᵀ, or a small grid chosen on held-out data")
    method: Literal["lbfgs", "rtr"] = Field("lbfgs", description="L-BFGS on (L, R), or Riemannian trust region")
    sigma: float = Field(0.18, gt=0.0, description="BTL temperature: P(a beats b) = 1/(1+exp(-(X_a-X_b)/sigma))")
    lambda_: float | None = Field(None, ge=0.0, description="weight of the smoothed ∞-norm penalty (default: spec)")
    holdout_fraction: float = Field(0.2, gt=0.0, lt=1.0, description="held-out share when rank is a grid")
    on_invalid: Literal["raise", "drop"] = Field("raise", description="rows the model cannot use")
    max_iter: int | None = Field(None, ge=1)
    seed: int = 0

    @field_validator("rank")
    @classmethod
    def _positive(cls, v: int | list[int]) -> int | list[int]:
        ranks = v if isinstance(v, list) else [v]
        if not ranks or any(r < 1 for r in ranks):
            raise ValueError("rank must be a positive integer or a non-empty list of them")
        return v


class PersonalModelsOptions(_Strict):
    """Personal models on an agent graph (spec personal-models-djam.md)."""

    loss: Literal["quadratic", "ridge", "huber", "logistic"] = "quadratic"
    method: Literal["djam", "centralized", "cl_admm", "djam_blocked"] = Field(
        "djam", description="DJAM (asynchronous Jacobi), the centralized optimum, CL-ADMM, or blocked DJAM"
    )
    reg: float | None = Field(None, ge=0.0, description="ridge / prior strength (default 0.1)")
    tol: float = Field(1e-8, gt=0.0, description="certified relative-error tolerance of the stopping rule")
    max_rounds: int | None = Field(None, ge=1)
    rho: float = Field(0.316, gt=0.0, description="CL-ADMM penalty")
    n_blocks: int = Field(4, ge=1, description="blocks of the partitioned (djam_blocked) mode")
    executor: Literal["inline", "dask"] = Field(
        "inline", description="where djam_blocked runs its blocks: in process, or as Dask tasks"
    )
    dask_address: str | None = Field(None, description="scheduler address; a local cluster when omitted")
    features: list[str] | None = Field(None, description="feature columns of the agents table (default: all others)")
    seed: int = 0


class AssignmentOptions(_Strict):
    """Task–worker assignment by exact projection onto a TVCS set (spec assignment-tvcs.md)."""

    budget: int | None = Field(None, ge=0, description="total number of (task, worker) pairs; none = unlimited")
    worker_cap: int | None = Field(None, ge=0, description="max tasks per worker; none = unlimited")
    task_cap: int | None = Field(None, ge=0, description="max workers per task; none = unlimited")
    backend: Literal["flow", "lp", "pgd"] = Field(
        "flow", description="exact min-cost-flow selection (default), HiGHS LP reference, or the paper's iteration"
    )


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


class OutputSpec(_Strict):
    """Where results go: ``<dir>/<pipeline name>/<run id>/``."""

    dir: str = "crowdflow-out"


Job = Literal["skills", "ranking", "personal_rankings", "personal_models", "assignment", "next_batch"]

# Input tables each job needs (required, optional). Names are the table contracts in schemas.tables.
JOB_INPUTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "skills": (("labels",), ("truth",)),
    "ranking": (("comparisons",), ()),
    "personal_rankings": (("comparisons",), ()),
    "personal_models": (("agents", "edges"), ()),
    "assignment": (("candidates",), ()),
    "next_batch": (("open_tasks", "workers"), ()),
}


JOB_INPUTS_ALL = ("labels", "truth", "comparisons", "agents", "edges", "candidates", "open_tasks", "workers")


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
        return self

    def inputs(self) -> dict[str, SourceSpec]:
        """The declared input sources by table kind, in a fixed order."""
        return {k: getattr(self, k) for k in JOB_INPUTS_ALL if getattr(self, k) is not None}

    def path_of(self, source: SourceSpec) -> Path:
        return source.resolved(Path(self.base_dir))

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


def load_spec(path: str | Path) -> PipelineSpec:
    """Read a YAML spec with ``yaml.safe_load``; relative paths resolve against its folder."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"{p}: spec file not found")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.constructor.ConstructorError as exc:
        # safe_load only: a tag such as !!python/object would run code, so it is refused, not guessed at
        raise SpecError(
            f"{p}: not valid YAML: {exc.problem} at line {exc.problem_mark.line + 1 if exc.problem_mark else '?'} "
            "(specs are plain YAML: tags like !!python/... are not allowed)"
        ) from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise SpecError(f"{p}: not valid YAML: {exc}") from None
    return parse_spec(data, origin=str(p), base_dir=p.resolve().parent)
