"""Label encoding, the duplicate policy and the fair-coin expected error of majority vote.

Majority vote itself is tested with the skills package (tests/skills/test_majority.py).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowdflow.labels import deduplicate, encode_labels, natural_sort, natural_sort_text
from crowdflow.metrics import majority_vote_expected_error


def test_natural_sort() -> None:
    assert natural_sort(np.array(["10", "2", "1"], dtype=object)).tolist() == ["1", "2", "10"]
    assert natural_sort(np.array(["b", "10", "a"], dtype=object)).tolist() == ["10", "a", "b"]


def _id_family(rng: np.random.Generator) -> list[list[str]]:
    """Distinct-id sets of every kind the natural order tells apart: text, integers, decimals and exponents, numeric
    ties (``1`` / ``1.0`` / ``01``, ``0`` / ``-0``), ids Python reads as numbers and Arrow's cast does not (spaces,
    ``_``, ``+``, non-ASCII digits), ``nan`` / ``inf``, overflow, mixed text and numbers, non-ASCII text."""
    fixed = [
        ["w1", "w10", "w2", "a", "B", "é", "z9", "Z"],
        ["1", "10", "2", "1.0", "01", "-0", "0", "-1e3", "3.5"],
        ["1", "2", " 3", "4"], ["1", "1_0", "+2"], ["inf", "1", "-inf"], ["nan", "1", "2"], ["NaN", "1"],
        ["Infinity", "1"], ["1e400", "2"], ["0x10", "1"], [".5", "1.", "2"], ["١٢", "3"], ["1", "a1"],
        ["1e5", "100000", "99999.99"], ["5"], [], ["ß", "ss", "ſ", "Σ", "σ"],
    ]  # fmt: skip
    drawn = []
    for k in range(120):
        n = int(rng.integers(1, 60))
        if k % 4 == 0:
            ids = {str(int(x)) for x in rng.integers(-1000, 1000, n)}
        elif k % 4 == 1:
            ids = {f"{x:.3g}" for x in rng.normal(0, 100, n)} | {str(int(x)) for x in rng.integers(0, 50, 3)}
        elif k % 4 == 2:
            ids = {f"w{int(x)}" for x in rng.integers(0, 1000, n)}
        else:
            ids = {"".join(chr(int(c)) for c in rng.integers(32, 0x2FF, int(rng.integers(1, 5)))) for _ in range(n)}
        drawn.append(sorted(ids))
    return fixed + drawn


def test_natural_sort_in_arrow_is_the_same_order() -> None:
    """A partitioned run's worker dictionary is sorted in Arrow (``natural_sort_text``, no Python ``str`` an id, issue
    #36): the same order as :func:`natural_sort` on every id set of the family, whatever order the ids come in."""
    import pyarrow as pa

    rng = np.random.default_rng(0)
    for ids in _id_family(rng):
        ids = list(rng.permutation(np.array(ids, dtype=object))) if ids else []
        want = natural_sort(np.array(ids, dtype=object)).tolist()
        got = natural_sort_text(pa.array(ids, pa.string()))
        assert got.type == pa.large_string() and got.to_pylist() == want, ids


def test_encode_and_declared_classes() -> None:
    df = pd.DataFrame({"task": ["t2", "t1", "t1"], "worker": ["w", "w", "v"], "label": ["x", "y", "x"]})
    lm = encode_labels(df)
    assert lm.tasks.tolist() == ["t1", "t2"] and lm.workers.tolist() == ["v", "w"] and lm.classes.tolist() == ["x", "y"]
    assert lm.incidence().toarray().tolist() == [[1.0, 0.0], [1.0, 1.0]]
    assert encode_labels(df, ["y", "x", "z"]).n_classes == 3
    with pytest.raises(ValueError, match="outside the declared label set"):
        encode_labels(df, ["x", "z"])


def test_duplicates_policy() -> None:
    df = pd.DataFrame({"task": ["t", "t", "u"], "worker": ["w", "w", "w"], "label": ["0", "1", "1"]})
    with pytest.raises(ValueError, match=r"\(task=t, worker=w\)"):
        deduplicate(df, "error")
    last, n = deduplicate(df, "keep_last")
    assert n == 1 and last["label"].tolist() == ["1", "1"]
    first, _ = deduplicate(df, "keep_first")
    assert first["label"].tolist() == ["0", "1"]


def test_majority_vote_expected_error_by_hand() -> None:
    labels = pd.DataFrame(
        {
            "task": ["t1", "t1", "t1", "t2", "t2", "t3", "t3", "t3", "t3", "t4", "t5"],
            "worker": ["a", "b", "c", "a", "b", "a", "b", "c", "d", "a", "a"],
            "label": ["1", "1", "0", "0", "1", "2", "2", "1", "1", "1", "0"],
        }
    )
    # t1: 1 wins (truth 1, right); t2: 0/1 tie, truth 0 (wrong w.p. 1/2); t3: 2/1 tie, truth 0 (wrong);
    # t4: no gold (ignored); gold t6 has no labels (ignored); t5: right
    truth = pd.DataFrame({"task": ["t1", "t2", "t3", "t5", "t6"], "label": ["1", "0", "0", "0", "1"]})
    assert majority_vote_expected_error(labels, truth) == pytest.approx((0 + 0.5 + 1 + 0) / 4, abs=1e-15)
    assert np.isnan(majority_vote_expected_error(labels, truth[truth["task"] == "t6"]))


def test_encode_canonical_equals_dedupe_then_encode() -> None:
    from crowdflow.labels import encode_canonical

    df = pd.DataFrame(
        {
            "task": ["t2", "t1", "t1", "t2", "t10", "t1"],
            "worker": ["b", "a", "b", "b", "a", "a"],
            "label": ["x", "y", "x", "z", "y", "x"],
        }
    )
    for policy in ("keep_last", "keep_first"):
        lm, dropped = encode_canonical(df, duplicates=policy)
        ref = encode_labels(deduplicate(df, policy)[0])
        assert dropped == 2
        assert lm.tasks.tolist() == ref.tasks.tolist() and lm.workers.tolist() == ref.workers.tolist()
        got = set(zip(lm.tasks[lm.task_idx], lm.workers[lm.worker_idx], lm.classes[lm.class_idx], strict=True))
        want = set(zip(ref.tasks[ref.task_idx], ref.workers[ref.worker_idx], ref.classes[ref.class_idx], strict=True))
        assert got == want
        key = lm.task_idx * lm.n_workers + lm.worker_idx
        assert np.all(np.diff(key) > 0)  # sorted by (task, worker), no repeats
    # "z" only occurs in a dropped row under keep_first: not an observed class
    assert encode_canonical(df, duplicates="keep_first")[0].classes.tolist() == ["x", "y"]
    with pytest.raises(ValueError, match="repeat a"):
        encode_canonical(df)


def test_ids_are_compared_as_strings() -> None:
    df = pd.DataFrame({"task": [1, "1", 2], "worker": ["w", "v", "w"], "label": [0, "0", 1.5]}, dtype=object)
    lm = encode_labels(df)
    assert lm.tasks.tolist() == ["1", "2"] and lm.task_idx.tolist() == [0, 0, 1]
    assert lm.classes.tolist() == ["0", "1.5"]
    with pytest.raises(ValueError, match="null"):
        encode_labels(df.assign(worker=[None, "v", "w"]))
