"""Great Expectations suites built from the table contracts: what fails, with counts and example rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowdflow.contracts.errors import ValidationFailed
from crowdflow.contracts.tables import COMPARISONS, EDGES, INPUTS, LABELS
from schemas.validation import require_valid, validate_frame


def test_every_contract_has_an_arrow_schema() -> None:
    for name, schema in INPUTS.items():
        arrow = schema.arrow_schema()
        assert arrow.names == schema.names, name


def test_clean_labels_pass() -> None:
    df = pd.DataFrame({"task": ["a", "a", "b"], "worker": ["u", "v", "u"], "label": ["1", "0", "1"]})
    rep = validate_frame(df, LABELS, "labels.csv")
    # not null x3, real ids (no NA spellings) for task and worker, >= 2 classes, unique (task, worker)
    assert rep.success and rep.n_expectations == 7
    require_valid(rep)


def test_na_spellings_are_rejected_as_ids_but_allowed_as_labels() -> None:
    """'#N/A' as a worker id pools unrelated rows into one worker (gal_trec2011_vuurens has 235 such
    rows): rejected, with the rows named. 'N/A' as a label is an answer class and passes."""
    df = pd.DataFrame(
        {
            "task": ["a", "a", "b", "b", "nan", "c"],
            "worker": ["u", "#N/A", "u", "#N/A", "v", "v"],
            "label": ["1", "N/A", "1", "0", "1", "N/A"],
        }
    ).astype("string")
    rep = validate_frame(df, LABELS, "lab.csv")
    by_column = {f.column: f for f in rep.failures if f.expectation == "expect_column_values_to_not_be_in_set"}
    assert set(by_column) == {"task", "worker"}
    assert by_column["worker"].unexpected_count == 2 and by_column["worker"].rows == [2, 4]
    assert by_column["worker"].values == ["#N/A", "#N/A"]
    assert by_column["task"].rows == [5] and by_column["task"].values == ["nan"]
    assert len(rep.failures) == 2  # the 'N/A' labels pass
    with pytest.raises(ValidationFailed, match="column 'worker': must be a real id"):
        require_valid(rep)
    clean = df.assign(task=["a", "a", "b", "b", "d", "c"], worker=["u", "w", "u", "w", "v", "v"])
    assert validate_frame(clean, LABELS, "lab.csv").success


def test_label_failures_are_listed_with_rows() -> None:
    df = pd.DataFrame(
        {
            "task": ["a", "a", "b", "c", "c", "d"],
            "worker": ["u", None, "u", "v", "v", "w"],
            "label": ["1", "0", "1", "1", "2", "7"],
        }
    ).astype("string")
    rep = validate_frame(df, LABELS, "lab.csv", allowed={"label": ["0", "1", "2"]})
    by_rule = {f.rule: f for f in rep.failures}
    nulls = by_rule["must not be null/NaN"]
    assert nulls.column == "worker" and nulls.unexpected_count == 1 and nulls.rows == [2]
    allowed = by_rule["must be one of ['0', '1', '2']"]
    assert allowed.unexpected_count == 1 and allowed.rows == [6] and allowed.values == ["7"]
    dup = by_rule["(task, worker) must be unique"]
    assert dup.unexpected_count == 2 and dup.rows == [4, 5]  # every row of the duplicated group
    with pytest.raises(ValidationFailed) as err:
        require_valid(rep)
    msg = str(err.value)
    assert msg.startswith("lab.csv: labels table failed 3 of")
    assert "column 'worker': must not be null/NaN: 1 rows fail; e.g. row 2" in msg
    assert len(err.value.failures) == 3


def test_comparisons_self_pairs_and_non_finite() -> None:
    df = pd.DataFrame(
        {
            "annotator": ["u", "u", "u", "u"],
            "item_a": ["x", "y", "z", "x"],
            "item_b": ["y", "y", "x", "x"],
            "outcome": [1.0, 1.0, np.inf, np.nan],
            "weight": [1.0, 0.0, 2.0, 1.0],
        }
    )
    rep = validate_frame(df, COMPARISONS, "cmp.csv")
    got = {(f.column, f.rule): (f.unexpected_count, f.rows) for f in rep.failures}
    assert got[("item_a,item_b", "item_a must differ from item_b")] == (2, [2, 4])
    assert got[("outcome", "must be finite")] == (1, [3])
    assert got[("outcome", "must not be null/NaN")] == (1, [4])
    assert got[("weight", "must be > 0.0")] == (1, [2])


def test_edges_weights_positive() -> None:
    df = pd.DataFrame({"source": ["a", "b"], "target": ["b", "b"], "weight": [-1.0, 1.0]})
    rep = validate_frame(df, EDGES, "edges.csv")
    rules = sorted(f.rule for f in rep.failures)
    assert rules == ["must be > 0.0", "source must differ from target"]
