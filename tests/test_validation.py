"""Great Expectations suites built from the table contracts: what fails, with counts and example rows."""

from __future__ import annotations

from pathlib import Path

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


def test_a_bad_value_deep_in_a_large_file_is_named_by_file_row_and_column(tmp_path: Path) -> None:
    """The workers' chain (read one Parquet file of a dataset, its contract, its suite: ``read_check_copy`` with
    ``validate_loaded``) on 100,000-row files, one process, the suite built once and reused file after file: each
    kind of bad value planted at one random deep row must fail that file alone, naming the file, the column and the
    1-based row in that file (the suite runs on every row, the id columns handed to GX as categoricals); the clean
    files before and after pass (a reused suite carries nothing from one file to the next)."""
    from functools import partial

    from crowdflow.storage.datasets import list_partitions, read_check_copy
    from schemas.validation import combined_message, validate_loaded

    rng = np.random.default_rng(11)
    m = 100_000
    items = np.array([f"i{k:04d}" for k in range(300)], dtype=object)

    def clean() -> pd.DataFrame:
        a = rng.integers(0, 300, m)
        b = (a + rng.integers(1, 300, m)) % 300
        return pd.DataFrame(
            {
                "annotator": [f"a{k}" for k in rng.integers(0, 2000, m)],
                "item_a": items[a],
                "item_b": items[b],
                "outcome": rng.standard_normal(m),
                "weight": rng.uniform(0.5, 2.0, m),
            }
        )

    plants = {  # column (as reported), how to spoil a row
        "item_a,item_b": lambda df, r: df.__setitem__("item_b", df["item_b"].where(df.index != r, df["item_a"][r])),
        "annotator": lambda df, r: df.__setitem__("annotator", df["annotator"].where(df.index != r, "#N/A")),
        "item_a": lambda df, r: df.__setitem__("item_a", df["item_a"].where(df.index != r, None)),
        "outcome": lambda df, r: df.__setitem__("outcome", df["outcome"].where(df.index != r, np.nan)),
        "weight": lambda df, r: df.__setitem__("weight", df["weight"].where(df.index != r, 0.0)),
    }
    src = tmp_path / "src"
    src.mkdir()
    clean().to_parquet(src / "part-000.parquet", index=False)
    planted: dict[str, tuple[str, int]] = {}
    for k, (column, spoil) in enumerate(plants.items(), start=1):
        df = clean()
        r = int(rng.integers(m // 2, m))
        spoil(df, r)
        name = f"part-{k:03d}.parquet"
        df.to_parquet(src / name, index=False)
        planted[name] = (column, r + 1)
    clean().to_parquet(src / "part-999.parquet", index=False)
    parts = list_partitions(str(src), None)
    copy = partial(read_check_copy, schema=COMPARISONS, folder=str(tmp_path / "copies"), check=partial(
        validate_loaded, kind="comparisons"))  # fmt: skip
    reports = [copy(p).found for p in parts]
    for p, rep in zip(parts, reports, strict=True):
        assert rep.n_rows == m and rep.n_expectations > 0
        base = Path(p.name).name
        if base not in planted:
            assert rep.success, rep.message()
            continue
        column, row = planted[base]
        assert not rep.success, p.name
        assert {f.column for f in rep.failures} == {column}, (p.name, rep.message())
        assert all(f.rows == [row] and f.unexpected_count == 1 for f in rep.failures), rep.message()
        assert rep.message().startswith(p.name) and base in p.name and f"row {row} " in rep.message()
    msg = combined_message(reports, "cmp")
    assert f"{len(planted)} of {len(parts)} files failed" in msg
    assert all(name in msg for name in planted)
