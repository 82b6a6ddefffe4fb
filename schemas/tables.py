"""Table contracts, declared once.

Each :class:`TableSchema` names its canonical columns with their logical types and constraints. From it
come the Arrow schema (for typed reads and stable Parquet outputs), the Great Expectations suite
(``schemas.validation``) and the column aliases accepted on input (Crowd-Kit's names, so users of
Crowd-Kit can switch without renaming).

Logical types: ``id`` (string identifier, never null), ``string``, ``float``, ``int``, ``bool``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pyarrow as pa

LogicalType = Literal["id", "string", "float", "int", "bool"]

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
    """

    name: str
    type: LogicalType
    required: bool = True
    nullable: bool = False
    min_value: float | None = None
    max_value: float | None = None
    strict_min: bool = False
    finite: bool = True

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
    columns=(Column("task", "id"), Column("worker", "id"), Column("label", "id")),
    unique=("task", "worker"),
)
TRUTH = TableSchema(
    name="truth",
    columns=(Column("task", "id"), Column("label", "id")),
    unique=("task",),
)
COMPARISONS = TableSchema(
    name="comparisons",
    columns=(
        Column("annotator", "id"),
        Column("item_a", "id"),
        Column("item_b", "id"),
        Column("outcome", "float"),
        Column("weight", "float", required=False, min_value=0.0, strict_min=True),
    ),
    # Crowd-Kit pairwise names; `label` there is the winner's id and is converted by the reader.
    aliases={"worker": "annotator", "left": "item_a", "right": "item_b"},
    distinct=("item_a", "item_b"),
)
AGENTS = TableSchema(
    name="agents",
    columns=(Column("agent", "id"), Column("y", "float")),
    extra_columns=True,
)
EDGES = TableSchema(
    name="edges",
    columns=(
        Column("source", "id"),
        Column("target", "id"),
        Column("weight", "float", min_value=0.0, strict_min=True),
    ),
    distinct=("source", "target"),
)
CANDIDATES = TableSchema(
    name="candidates",
    columns=(Column("task", "id"), Column("worker", "id"), Column("score", "float")),
    unique=("task", "worker"),
)

INPUTS: dict[str, TableSchema] = {s.name: s for s in (LABELS, TRUTH, COMPARISONS, AGENTS, EDGES, CANDIDATES)}

# Output tables: stable Parquet schemas (documented in the README).
OUTPUTS: dict[str, pa.Schema] = {
    "consensus": pa.schema(
        [
            pa.field("task", pa.string(), nullable=False),
            pa.field("label", pa.string(), nullable=False),
            pa.field("confidence", pa.float64()),
            pa.field("n_labels", pa.int64()),
        ]
    ),
    "workers": pa.schema(
        [
            pa.field("worker", pa.string(), nullable=False),
            pa.field("component", pa.int64()),
            pa.field("n_labels", pa.int64()),
            pa.field("n_partners", pa.int64()),
            pa.field("status", pa.string()),
        ]
    ),
    "components": pa.schema(
        [
            pa.field("component", pa.int64()),
            pa.field("n_workers", pa.int64()),
            pa.field("n_edges", pa.int64()),
            pa.field("n_labels", pa.int64()),
            pa.field("bipartite", pa.bool_()),
            pa.field("colour_sizes", pa.string()),
            pa.field("status", pa.string()),
            pa.field("workers", pa.string()),
        ]
    ),
}
