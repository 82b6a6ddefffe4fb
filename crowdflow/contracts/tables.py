"""Table contracts, declared once: pure data, usable without Great Expectations.

Each :class:`TableSchema` names its canonical columns with their logical types and constraints. From it
come the Arrow schema (for typed reads and stable Parquet outputs), the Great Expectations suite (built by
``schemas.validation`` in the orchestration layer) and the column aliases accepted on input (Crowd-Kit's
names, so users of Crowd-Kit can switch without renaming).

Logical types: ``id`` (string identifier, never null), ``string``, ``float``, ``int``, ``bool``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pyarrow as pa

from crowdflow.contracts.comparisons import COMPARISON_ALIASES

LogicalType = Literal["id", "string", "float", "int", "bool"]

# Text that spells a missing value (spreadsheet exports, pandas' own defaults, ``str(None)``, ``str(nan)``).
# The CSV reader keeps them as text (an id is a string, never guessed to be null); as an entity id they
# would silently pool unrelated rows under one worker, task or item, so validation rejects them there.
NA_SPELLINGS: tuple[str, ...] = (
    "#N/A",
    "#N/A N/A",
    "#NA",
    "<NA>",
    "N/A",
    "n/a",
    "NA",
    "NULL",
    "null",
    "NaN",
    "nan",
    "-NaN",
    "-nan",
    "None",
)


def _case_variants(word: str) -> set[str]:
    out = {""}
    for ch in word:
        out = {w + c for w in out for c in {ch.lower(), ch.upper()}}
    return out


#: Every upper/lower-case spelling of :data:`NA_SPELLINGS` (``Null``, ``NONE``, ``#n/a`` …): text that means
#: "missing" is recognised whatever its case.
NA_SPELLINGS_ANY_CASE: frozenset[str] = frozenset(v for word in NA_SPELLINGS for v in _case_variants(word))

_ARROW: dict[str, pa.DataType] = {
    "id": pa.string(),
    "string": pa.string(),
    "float": pa.float64(),
    "int": pa.int64(),
    "bool": pa.bool_(),
}


@dataclass(frozen=True)
class Column:
    """One column of a table contract.

    Attributes
    ----------
    name : str
        Canonical name.
    type : LogicalType
    required : bool
        Must be present in the input.
    nullable : bool
        Nulls (and NaN for floats) allowed.
    min_value, max_value : float, optional
        Inclusive bounds unless ``strict_min``.
    strict_min : bool
        ``value > min_value`` instead of ``>=``.
    finite : bool
        Floats must be finite (no ±inf).
    max_abs : float, optional
        Bound on |value| (squares must stay finite in double precision: 1e150 for model inputs).
    min_distinct : int, optional
        At least this many distinct values (e.g. 2 classes in a labels table); skipped when the column
        has a declared allowed set (the spec's ``classes``).
    na_spelling_ok : bool
        For ``id`` columns: whether a value may be one of :data:`NA_SPELLINGS`. False for entity ids
        (rows sharing ``#N/A`` would be fitted as one worker); True for label values, where ``N/A``
        can be an answer class.
    numbers_as_one : bool
        Numeric-looking values are one value however they are written (``1``, ``1.0``, ``01``): the reader
        writes them in one form (:func:`crowdflow.labels.canonical_label_text`). True for labels; ids keep
        their text (``007`` and ``7`` are two tasks).
    """

    name: str
    type: LogicalType
    required: bool = True
    nullable: bool = False
    min_value: float | None = None
    max_value: float | None = None
    strict_min: bool = False
    finite: bool = True
    max_abs: float | None = None
    min_distinct: int | None = None
    na_spelling_ok: bool = False
    numbers_as_one: bool = False

    @property
    def arrow_type(self) -> pa.DataType:
        return _ARROW[self.type]


@dataclass(frozen=True)
class TableSchema:
    """A table contract.

    Attributes
    ----------
    name : str
    columns : tuple of Column
    aliases : dict
        Alternative input column name → canonical name (applied only when the canonical name is absent).
    unique : tuple of str
        Compound key that must be unique (empty: no key).
    distinct : tuple of str
        Two columns that must differ on every row (e.g. no self-comparison).
    extra_columns : bool
        Whether columns beyond the declared ones are kept (feature columns of ``agents``).
    """

    name: str
    columns: tuple[Column, ...]
    aliases: dict[str, str] = field(default_factory=dict)
    unique: tuple[str, ...] = ()
    distinct: tuple[str, ...] = ()
    extra_columns: bool = False

    @property
    def required(self) -> list[str]:
        return [c.name for c in self.columns if c.required]

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    def arrow_schema(self, present: list[str] | None = None) -> pa.Schema:
        """Arrow schema of the declared columns (only those in ``present`` when given)."""
        cols = [c for c in self.columns if present is None or c.name in present]
        return pa.schema([pa.field(c.name, c.arrow_type, nullable=c.nullable) for c in cols])


LABELS = TableSchema(
    name="labels",
    columns=(
        Column("task", "id"),
        Column("worker", "id"),
        Column("label", "id", min_distinct=2, na_spelling_ok=True, numbers_as_one=True),
    ),
    unique=("task", "worker"),
)
TRUTH = TableSchema(
    name="truth",
    columns=(Column("task", "id"), Column("label", "id", na_spelling_ok=True, numbers_as_one=True)),
    unique=("task",),
)
COMPARISONS = TableSchema(
    name="comparisons",
    columns=(
        Column("annotator", "id"),
        Column("item_a", "id"),
        Column("item_b", "id"),
        # bounded so squares and sums over many rows stay finite (1e160 gave NaN statistics, 1e300 overflowed ranks)
        Column("outcome", "float", max_abs=1e100),
        Column("weight", "float", required=False, min_value=0.0, strict_min=True, max_abs=1e100),
    ),
    # Crowd-Kit's and the papers' names; a winner column (Crowd-Kit's `label`) is converted by the reader
    aliases=COMPARISON_ALIASES,
    distinct=("item_a", "item_b"),
)
AGENTS = TableSchema(
    name="agents",
    # y may be empty on a row that only declares an agent (no data; its prior/ridge pins it down)
    columns=(Column("agent", "id"), Column("y", "float", nullable=True, max_abs=1e150)),
    extra_columns=True,
)
EDGES = TableSchema(
    name="edges",
    columns=(
        Column("source", "id"),
        Column("target", "id"),
        Column("weight", "float", min_value=0.0, strict_min=True, max_abs=1e150),
    ),
    unique=("source", "target"),  # an edge listed twice is ambiguous (which weight?)
    distinct=("source", "target"),
)
CANDIDATES = TableSchema(
    name="candidates",
    columns=(Column("task", "id"), Column("worker", "id"), Column("score", "float", max_abs=1e100)),
    unique=("task", "worker"),
)

OPEN_TASKS = TableSchema(name="open_tasks", columns=(Column("task", "id"),), unique=("task",))
WORKERS = TableSchema(
    name="workers",
    # caps are whole numbers: a fractional cap (1.5) is refused by the reader, never floored
    columns=(Column("worker", "id"), Column("capacity", "int", required=False, nullable=True, min_value=0.0)),
    unique=("worker",),
)

WORKER_CAPS = TableSchema(
    name="worker_caps",
    columns=(Column("worker", "id"), Column("capacity", "int", min_value=0.0)),
    unique=("worker",),
)
TASK_CAPS = TableSchema(
    name="task_caps",
    columns=(Column("task", "id"), Column("cap", "int", min_value=0.0)),
    unique=("task",),
)

INPUTS: dict[str, TableSchema] = {
    s.name: s
    for s in (LABELS, TRUTH, COMPARISONS, AGENTS, EDGES, CANDIDATES, OPEN_TASKS, WORKERS, WORKER_CAPS, TASK_CAPS)
}


# Output tables: stable Parquet schemas (documented in docs/reference/outputs.md).
def _schema(*fields: tuple[str, pa.DataType]) -> pa.Schema:
    """An output schema; a table with a float column ends with ``missing_reason`` (crowdflow/contracts/missing.py)."""
    if any(pa.types.is_floating(t) for _, t in fields):
        fields = (*fields, ("missing_reason", pa.string()))
    return pa.schema([pa.field(n, t) for n, t in fields])


_S, _F, _I, _B = pa.string(), pa.float64(), pa.int64(), pa.bool_()

_SKILLS_OUTPUTS: dict[str, pa.Schema] = {
    "consensus": _schema(("task", _S), ("label", _S), ("confidence", _F), ("n_labels", _I), ("fallback", _B)),
    "skills": _schema(
        ("worker", _S),
        ("skill", _F),
        ("accuracy", _F),
        ("vote_weight", _F),
        ("n_labels", _I),
        ("n_partners", _I),
        ("component", _I),
        ("status", _S),
        ("identifiable", _B),
        ("strength", _F),
        ("lower", _F),
        ("upper", _F),
        ("fit_component", _I),
    ),
    "components": _schema(
        ("component", _I),
        ("status", _S),
        ("n_workers", _I),
        ("n_ok_workers", _I),
        ("n_edges", _I),
        ("n_tasks", _I),
        ("n_labels", _I),
        ("bipartite", _B),
        ("colour_sizes", _S),
        ("workers", _S),
        ("odd_cycle_witness_len", _I),
        ("d_max", _I),
        ("D_sum", _I),
        ("N_min", _F),
        ("N_median", _F),
        ("N_max", _F),
        ("norm_N_inf", _F),
        ("norm_N_2", _F),
        ("lambda_min_signless_unit", _F),
        ("lambda_min_signless_weighted", _F),
        ("eig_method", _S),
        ("kappa", _F),
        ("K", _F),
        ("mu_hat", _F),
        ("lip_hat", _F),
        ("cond_hat", _F),
        ("error_bound_hat", _F),
    ),
    # with gold labels (truth): each worker's accuracy measured on gold, and gold × consensus label counts
    "gold_workers": _schema(("worker", _S), ("n_gold_labels", _I), ("n_gold_correct", _I), ("gold_accuracy", _F)),
    "gold_confusion": _schema(("true_label", _S), ("predicted_label", _S), ("n_tasks", _I)),
}

OUTPUTS: dict[str, dict[str, pa.Schema]] = {
    "skills": _SKILLS_OUTPUTS,
    "ranking": {
        "ranking": _schema(("item", _S), ("score", _F), ("rank", _I), ("component", _I), ("n_comparisons", _I)),
        "annotators": _schema(("annotator", _S), ("n_comparisons", _I), ("n_outliers", _I), ("outlier_rate", _F)),
    },
    "personal_rankings": {
        "personal_rankings": _schema(("user", _S), ("item", _S), ("score", _F), ("rank", _I)),
    },
    "personal_models": {},
    "assignment": {},
    "next_batch": {},
}
"""Stable Parquet schemas of each job's output tables (docs/reference/outputs.md); tables not listed
(factors with one column per rank, parameters per agent) keep the columns the model produced."""


#: The warehouse's log of runs: one row per run, loaded with the run's output tables in the same transaction and
#: always appended (``output.warehouse.mode: replace`` replaces the output tables, never this history). Metrics,
#: timings, checks and inputs are JSON text (their keys differ by job); the gold metrics every skills run with
#: truth has are also columns, so a trend is one query: ``SELECT started_at, accuracy FROM runs WHERE pipeline = ...``.
RUNS_TABLE = "runs"
RUNS_SCHEMA = _schema(
    ("run_id", _S),
    ("pipeline", _S),
    ("job", _S),
    ("method", _S),
    ("status", _S),
    ("flow_run_id", _S),
    ("started_at", pa.timestamp("us", tz="UTC")),
    ("finished_at", pa.timestamp("us", tz="UTC")),
    ("seconds", _F),
    ("cache_hit", _B),
    ("accuracy", _F),
    ("error", _F),
    ("n_gold", _I),
    ("metrics", _S),
    ("timings", _S),
    ("checks", _S),
    ("inputs", _S),
    ("inputs_sha256", _S),
    ("crowdflow_version", _S),
)
"""Columns of the ``runs`` table (docs/how-to/warehouse.md): ``metrics``/``timings``/``checks`` are JSON
objects, ``inputs`` a JSON list of {name, sha256, rows, path or connection}; ``inputs_sha256`` is the SHA-256 of
the sorted ``name:sha256`` pairs (runs on the same data share it)."""
