"""The assignment job's options, declared once (crowdflow.assignment.options, issues #24 and #18).

One model is the library's ``options=``, the spec's ``assignment:`` section and the Prefect form: the
defaults agree everywhere, every count is range-checked where it is declared, and a value the fit
could not run with fails at spec parse (SpecError, CLI exit 2) instead of inside the fit.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from crowdflow.assignment import AssignmentOptions, assign_tasks
from crowdflow.assignment.options import MAX_COUNT
from crowdflow.contracts.errors import SpecError
from crowdflow.spec import AssignmentPipeline, parse_spec


def _spec(**assignment: object) -> dict[str, object]:
    return {"name": "a", "job": "assignment", "candidates": {"path": "c.csv"}, "assignment": assignment}


def _cands() -> pd.DataFrame:
    return pd.DataFrame(
        {"task": ["t1", "t1", "t2", "t2"], "worker": ["w1", "w2", "w1", "w2"], "score": [3.0, 2.0, 2.0, 1.0]}
    )


def test_one_declaration_same_defaults_everywhere() -> None:
    spec = parse_spec(_spec())
    assert spec.assignment == AssignmentOptions() == AssignmentOptions.resolve()
    assert AssignmentPipeline.model_fields["assignment"].annotation is AssignmentOptions
    assert AssignmentOptions() == AssignmentOptions(budget=None, worker_cap=None, task_cap=None, backend="flow")
    # the library call "with defaults" is the pipeline run with defaults
    cand = _cands()
    lib = assign_tasks(cand)
    pipe = assign_tasks(cand, spec.assignment)
    pd.testing.assert_frame_equal(lib.assignment, pipe.assignment)
    assert lib.objective == pipe.objective == 8.0


def test_options_object_and_keyword_overrides_are_the_same_call() -> None:
    cand = _cands()
    a = assign_tasks(cand, AssignmentOptions(budget=3, worker_cap=1), task_cap=1)
    b = assign_tasks(cand, budget=3, worker_cap=1, task_cap=1)
    c = assign_tasks(cand, AssignmentOptions(budget=3, worker_cap=1, task_cap=1))
    pd.testing.assert_frame_equal(a.assignment, b.assignment)
    pd.testing.assert_frame_equal(a.assignment, c.assignment)
    assert a.objective == b.objective == c.objective == 4.0
    with pytest.raises(TypeError, match="AssignmentOptions"):
        assign_tasks(cand, 3)  # type: ignore[arg-type]  # the old positional budget is refused loudly
    with pytest.raises(ValidationError, match="extra"):
        assign_tasks(cand, budgett=3)


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("budget", -1, "greater than or equal to 0"),
        ("worker_cap", -1, "greater than or equal to 0"),
        ("task_cap", -2, "greater than or equal to 0"),
        ("budget", MAX_COUNT + 1, "less than or equal to 9007199254740992"),
        ("worker_cap", 10**20, "less than or equal to 9007199254740992"),
        ("task_cap", 10**19, "less than or equal to 9007199254740992"),
        ("worker_cap", 2.5, "integer"),
        ("budget", float("nan"), "finite"),
        ("budget", True, "not true/false"),
        ("task_cap", False, "not true/false"),
        ("backend", "brute", "'flow', 'lp' or 'pgd'"),
        ("backend", "simplex", "'flow', 'lp' or 'pgd'"),
    ],
)
def test_ranges_are_checked_where_declared(field: str, value: object, words: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(words)):
        AssignmentOptions.model_validate({field: value})


def test_the_largest_count_is_honoured_by_the_fit() -> None:
    """2^53 (the bound) runs and means 'no limit in practice'; the fit used to crash above 2^63 (below)."""
    cand = _cands()
    r = assign_tasks(cand, budget=MAX_COUNT, worker_cap=MAX_COUNT, task_cap=MAX_COUNT)
    assert r.objective == 8.0 and r.certified
    assert (r.worker_load["capacity"] == MAX_COUNT).all()  # reported exactly (Int64), not rounded


def test_frozen_and_strict() -> None:
    o = AssignmentOptions(budget=3)
    with pytest.raises(ValidationError, match="frozen"):
        o.budget = 4  # type: ignore[misc]
    with pytest.raises(ValidationError, match="extra"):
        AssignmentOptions.model_validate({"workercap": 1})


def test_descriptions_are_plain_sentences_for_the_form() -> None:
    doc = AssignmentOptions.__doc__ or ""
    assert "----" not in doc and "Parameters" not in doc and len(doc.split(".")) <= 4
    for name, f in AssignmentOptions.model_fields.items():
        assert f.description and f.description.endswith(".") and len(f.description) < 200, name
    schema = AssignmentOptions.model_json_schema()["properties"]
    # the form shows an optional count as a plain integer input (no "None" branch; empty = no limit)
    assert {k: schema["budget"][k] for k in ("maximum", "minimum", "type")} == {
        "maximum": MAX_COUNT,
        "minimum": 0,
        "type": "integer",
    }


@pytest.mark.parametrize(
    ("assignment", "words"),
    [
        # before: accepted by the spec, then the fit failed with a TypeError ('unexpected error', exit 1)
        ({"worker_cap": 10**20}, "assignment.worker_cap: Input should be less than or equal to 9007199254740992"),
        # before: read as budget 1 (the library refused a boolean budget, the spec took it)
        ({"budget": True}, "assignment.budget: must be a whole number or empty (no limit), not true/false"),
        ({"task_cap": -1}, "assignment.task_cap: Input should be greater than or equal to 0"),
        ({"backend": "brute"}, "assignment.backend"),
    ],
)
def test_bad_options_fail_at_spec_parse(assignment: dict[str, object], words: str) -> None:
    with pytest.raises(SpecError, match=re.escape(words)):
        parse_spec(_spec(**assignment))


def test_huge_cap_used_to_crash_inside_the_fit() -> None:
    """The library path the spec used to reach: a cap above int64 is now refused by the options model."""
    with pytest.raises(ValidationError, match="worker_cap"):
        assign_tasks(_cands(), worker_cap=10**20)
    assert np.isfinite(assign_tasks(_cands(), worker_cap=MAX_COUNT).objective)
