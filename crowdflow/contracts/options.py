"""The base of every method's options model: declared once, range-checked where declared.

Each job package declares its options once, as a frozen pydantic model deriving from :class:`Options`
(``crowdflow.skills.SkillsOptions``, ``crowdflow.ranking.RankingOptions``, …). The same model is

- the ``options=`` argument of the job's ``fit_*`` entry point (a notebook call),
- a field of the pipeline spec (:mod:`crowdflow.spec`, so a YAML spec and the Prefect UI form),
- the source of the ``crowdflow <job>`` command-line flags (``flows/cli.py`` generates them),

so a default, a range or a choice cannot differ between the three doors.

Rules every options model follows:

- unknown keys are refused (``extra="forbid"``) and instances are immutable (``frozen=True``);
- every float is finite (``allow_inf_nan=False``) and carries its range on the field (``ge``/``gt``/``le``/``lt``);
- choices are ``Literal`` types; each field has a one-sentence ``description`` written for a person;
- a combination of fields that the method cannot run is refused by a model validator, so it is a spec
  error (exit 2) rather than a failure inside the fit.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field


def form_schema(schema: dict[str, Any]) -> None:
    """Shape a model's JSON schema for a form a person fills in (the Prefect UI's run form).

    An optional field (``X | None``, default ``None``) is shown as its ``X`` input, left empty when unset,
    instead of a choice between ``X`` and a "None" type the person has to read past: its ``anyOf`` with a
    ``null`` branch becomes the other branch, and the ``None`` default is dropped (not required either way).
    Pydantic calls this on every model's schema (``json_schema_extra``); validation in Python is unchanged.
    """
    for prop in schema.get("properties", {}).values():
        branches = prop.get("anyOf")
        if not branches or {"type": "null"} not in branches:
            continue
        rest = [b for b in branches if b != {"type": "null"}]
        if len(rest) != 1:
            prop["anyOf"] = rest
            continue
        del prop["anyOf"]
        if prop.get("default", 0) is None:
            del prop["default"]
        for key, value in rest[0].items():
            prop.setdefault(key, value)


def incremental_field() -> Any:
    """The ``incremental`` option of the jobs whose runs can reuse earlier input files (skills, ranking): one
    definition, so the spec, the CLI flag and the UI form say the same for each."""
    return Field(
        False,
        description="Keep what each input file contributes in the run store (keyed by the file's content hash) and, "
        "on the next run, read only the files not seen before; the result equals a full run's (docs/how-to/"
        "incremental.md). Needs a local Parquet file or folder as the input.",
    )


def backfill_field() -> Any:
    """The ``backfill`` option that goes with :func:`incremental_field`."""
    return Field(
        default_factory=list,
        description="With incremental: partitions (a folder such as day=2026-11-03, or a file's path in the "
        "dataset) to read again even when their content is unchanged.",
    )


class Options(BaseModel):
    """Base class of the per-method options models (frozen, strict keys, finite floats)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, allow_inf_nan=False, populate_by_name=True, json_schema_extra=form_schema
    )

    @classmethod
    def resolve(cls, options: Self | None = None, /, **overrides: Any) -> Self:
        """``options`` (default: all defaults) with keyword ``overrides`` applied and validated.

        ``fit_skills(lm, method="ds")`` and ``fit_skills(lm, options=SkillsOptions(method="ds"))`` are the
        same call: a keyword override goes through the same validation as a spec field.

        Parameters
        ----------
        options : Options, optional
            A validated options object; ``None`` means the model's defaults.
        **overrides
            Field values that replace those of ``options``.

        Returns
        -------
        Options
            A new validated, frozen instance (``options`` itself when there is nothing to override).

        Raises
        ------
        pydantic.ValidationError
            An unknown field, a value of the wrong type, or one outside the field's range.
        """
        if options is None:
            return cls.model_validate(overrides)
        if not isinstance(options, cls):
            raise TypeError(f"options must be a {cls.__name__}, got {type(options).__name__}")
        if not overrides:
            return options
        return cls.model_validate({**options.model_dump(exclude_unset=True), **overrides})
