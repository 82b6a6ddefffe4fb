"""Ids of the assignment tables as integer codes (issue #19): the instance and the output table equal their
references (per-row text ``searchsorted`` and pandas' sort) over a generated family of id shapes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowdflow.assignment import assign_tasks
from crowdflow.assignment.problem import _assignment_table, _assignment_table_reference, _build_instance

KINDS = ("int", "str", "arrow", "unicode", "float", "mixed", "prefix")


def _ids(kind: str, codes: np.ndarray, rng: np.random.Generator) -> pd.Series:
    """Ids of ``kind`` for the integer ``codes`` (equal codes, equal ids; distinct codes, distinct texts)."""
    if kind == "int":
        return pd.Series(codes * 7 - 50)
    if kind == "float":
        return pd.Series(codes / 4.0)
    if kind == "str":
        return pd.Series([f"id-{c}" for c in codes], dtype=object)
    if kind == "arrow":
        return pd.Series([f"id-{c}" for c in codes], dtype="string[pyarrow]")
    if kind == "unicode":
        alphabet = np.array(["", "é", "Ω", "名", "a", "Z", "\t", "😀"], dtype=object)
        return pd.Series([f"{alphabet[c % 8]}{c}{alphabet[(c // 8) % 8]}" for c in codes], dtype=object)
    if kind == "prefix":  # ids that are prefixes of one another, and the empty string
        return pd.Series(["x" * int(c) for c in codes], dtype=object)
    # object column of ints and their text forms mixed (1 and "1" are one id after astype(str))
    as_text = rng.random(codes.size) < 0.5
    return pd.Series([str(c) if t else int(c) for c, t in zip(codes, as_text, strict=True)], dtype=object)


def _family(seed: int) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(seed)
    n_t, n_w = int(rng.integers(1, 40)), int(rng.integers(1, 30))
    pairs = rng.permutation(n_t * n_w)[: int(rng.integers(1, n_t * n_w + 1))]
    t, w = pairs // n_w, pairs % n_w
    score = rng.choice([0.5, 1.0, 2.0, -1.0, 0.0], size=pairs.size) if seed % 2 else rng.normal(size=pairs.size)
    df = pd.DataFrame(
        {
            "task": _ids(KINDS[seed % len(KINDS)], t, rng),
            "worker": _ids(KINDS[(seed // len(KINDS)) % len(KINDS)], w, rng),
            "score": score,
        }
    )
    return df, rng.random(pairs.size) < 0.5


@pytest.mark.parametrize("seed", range(49))
def test_instance_codes_and_table_equal_the_text_references(seed: int) -> None:
    df, x = _family(seed)
    inst = _build_instance(df, None, None, None, ("score",), worker_default=None, task_default=None)
    # reference of the instance: every row's id text located in the sorted distinct texts
    tasks_text = df["task"].astype(str).to_numpy(dtype=object)
    workers_text = df["worker"].astype(str).to_numpy(dtype=object)
    np.testing.assert_array_equal(inst.tasks, np.unique(tasks_text.astype(str)).astype(object))
    np.testing.assert_array_equal(inst.workers, np.unique(workers_text.astype(str)).astype(object))
    np.testing.assert_array_equal(inst.t_idx, np.searchsorted(inst.tasks.astype(str), tasks_text.astype(str)))
    np.testing.assert_array_equal(inst.w_idx, np.searchsorted(inst.workers.astype(str), workers_text.astype(str)))
    score = df["score"].to_numpy()
    extra = {"rank": np.arange(score.size)}
    pd.testing.assert_frame_equal(
        _assignment_table(inst, x, score, extra), _assignment_table_reference(inst, x, score, extra)
    )


def test_duplicate_pairs_named_after_their_texts() -> None:
    """1 and "1" are one worker once ids are text: the pair is a duplicate, named as text."""
    df = pd.DataFrame({"task": ["a", "a", "b"], "worker": pd.Series([1, "1", 2], dtype=object), "score": 1.0})
    with pytest.raises(ValueError, match=r"duplicate \(task, worker\) pairs, e.g. \[\('a', '1'\)\]"):
        assign_tasks(df)


def test_missing_ids_named_by_row() -> None:
    df = pd.DataFrame({"task": ["a", None, "b"], "worker": ["u", "v", "w"], "score": 1.0})
    with pytest.raises(ValueError, match=r"column 'task' has missing ids at rows \[1\]"):
        assign_tasks(df)
