"""What a skills run adds for the people who act on it (crowdflow.metrics): gold-measured worker accuracy, the
confusion matrix, the labels the model changed against majority vote, and the runs-table row of a manifest."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from crowdflow.contracts.tables import OUTPUTS, RUNS_SCHEMA
from crowdflow.metrics import confusion_matrix, gold_by_worker, gold_metrics, majority_changes, review_skills
from crowdflow.storage.manifest import runs_row

LABELS = pd.DataFrame(
    [
        # t1: a, a, b -> majority a; t2: a, b tie; t3: b, b, a -> majority b; t4: no gold
        ("t1", "w1", "a"), ("t1", "w2", "a"), ("t1", "w3", "b"),
        ("t2", "w1", "a"), ("t2", "w2", "b"),
        ("t3", "w1", "b"), ("t3", "w2", "b"), ("t3", "w3", "a"),
        ("t4", "w3", "a"),
    ],
    columns=["task", "worker", "label"],
)  # fmt: skip
TRUTH = pd.DataFrame({"task": ["t1", "t2", "t3", "t9"], "label": ["a", "b", "a", "b"]})


def test_gold_by_worker_counts_each_workers_gold_labels() -> None:
    got = gold_by_worker(LABELS, TRUTH).set_index("worker")
    # w1: t1 a (right), t2 a (wrong), t3 b (wrong); w2: a right, b right, b wrong; w3: b wrong, a right (t4 no gold)
    assert got.loc["w1"].tolist() == [3, 1, pytest.approx(1 / 3)]
    assert got.loc["w2"].tolist() == [3, 2, pytest.approx(2 / 3)]
    assert got.loc["w3"].tolist() == [2, 1, 0.5]
    assert [*got.reset_index().columns, "missing_reason"] == OUTPUTS["skills"]["gold_workers"].names


def test_confusion_matrix_diagonal_is_gold_accuracy() -> None:
    consensus = pd.DataFrame({"task": ["t1", "t2", "t3", "t4"], "label": ["a", "b", "b", "a"]})
    conf = confusion_matrix(consensus, TRUTH)
    assert list(conf.columns) == OUTPUTS["skills"]["gold_confusion"].names
    cells = {(r.true_label, r.predicted_label): r.n_tasks for r in conf.itertuples()}
    assert cells == {("a", "a"): 1, ("a", "b"): 1, ("b", "a"): 0, ("b", "b"): 1}  # zeros included
    g = gold_metrics(consensus, TRUTH)
    assert cells[("a", "a")] + cells[("b", "b")] == round(g.accuracy * g.n_gold)


def test_majority_changes_ignore_ties_and_count_overrules() -> None:
    # t1: a is the majority, the model says b (changed); t2: a tie, either label is no change; t3: b kept
    consensus = pd.DataFrame({"task": ["t1", "t2", "t3", "t4"], "label": ["b", "a", "b", "a"]})
    changed = majority_changes(LABELS, consensus)
    assert changed.to_dict("records") == [
        {"task": "t1", "label": "b", "majority_labels": "a", "majority_share": pytest.approx(2 / 3), "n_labels": 3}
    ]
    tie_other_way = consensus.assign(label=["a", "b", "b", "a"])
    assert majority_changes(LABELS, tie_other_way).empty  # majority vote itself changes nothing
    review = review_skills(LABELS, consensus, TRUTH)
    assert review.metrics == {"n_changed_vs_majority": 1} and review.record["n_tasks"] == 4
    assert set(review.tables) == {"gold_workers", "gold_confusion"}
    assert review_skills(LABELS, consensus).tables == {}  # no gold: no gold tables


def test_a_manifest_becomes_one_runs_row() -> None:
    manifest = {
        "run_id": "20260101T020000Z-abcdef12",
        "pipeline": "rte-skills",
        "job": "skills",
        "method": "mv",
        "status": "completed",
        "flow_run_id": "abcdef12-0000",
        "started_at": "2026-01-01T02:00:00+00:00",
        "finished_at": "2026-01-01T02:00:30+00:00",
        "metrics": {"accuracy": 0.9, "error": 0.1, "n_gold": 800, "frac": float("nan")},
        "timings": {"ingest_validate": 2.0, "fit": 0.5},
        "checks": {"validation": "passed"},
        "inputs": [
            {"name": "truth", "path": "/d/t.csv", "sha256": "cd" * 32, "rows": 800, "format": "csv"},
            {"name": "labels", "path": "/d/l.csv", "sha256": "ab" * 32, "rows": 8000, "format": "csv"},
        ],
        "cache": {"hit": True, "computed_in_flow_run": "x"},
        "versions": {"crowdflow": "0.1.0"},
    }
    table = runs_row(manifest)
    assert table.schema == RUNS_SCHEMA and table.num_rows == 1
    (row,) = table.to_pylist()
    assert row["accuracy"] == 0.9 and row["n_gold"] == 800 and row["cache_hit"] is True and row["seconds"] == 2.5
    assert row["finished_at"].isoformat() == "2026-01-01T02:00:30+00:00" and row["crowdflow_version"] == "0.1.0"
    assert '"frac": null' in row["metrics"]  # strict JSON, never NaN
    swapped = runs_row({**manifest, "inputs": manifest["inputs"][::-1]}).to_pylist()[0]
    assert swapped["inputs_sha256"] == row["inputs_sha256"]  # the same data, listed in another order
    bare = runs_row({"run_id": "r"}).to_pylist()[0]
    assert bare["accuracy"] is None and bare["started_at"] is None and not math.isnan(bare["seconds"])


@pytest.mark.parametrize("seed", range(40))
def test_majority_changes_over_a_family(seed: int) -> None:
    """The integer-coded majority_changes against its definition, written the slow obvious way."""
    rng = np.random.default_rng(seed)
    n_tasks, m, n = int(rng.integers(1, 40)), int(rng.integers(1, 5)), int(rng.integers(0, 200))
    labels = pd.DataFrame(
        {
            "task": rng.integers(0, n_tasks, n).astype(str),
            "worker": "w",
            "label": np.array(list("abcde"))[rng.integers(0, m, n)],
        }
    )
    consensus = pd.DataFrame(
        {
            "task": np.arange(n_tasks + 2).astype(str),
            "label": np.array(list("abcdef"))[rng.integers(0, m + 1, n_tasks + 2)],
        }
    )
    got = majority_changes(labels, consensus)
    rows = []
    for task, label in consensus.itertuples(index=False):
        votes = labels.loc[labels["task"] == task, "label"].value_counts()
        if votes.empty:
            continue  # a task nobody labelled has no majority to change
        top = sorted(votes.index[votes == votes.max()])
        if label not in top:
            rows.append((task, label, "|".join(top), votes.max() / votes.sum(), int(votes.sum())))
    want = pd.DataFrame(rows, columns=["task", "label", "majority_labels", "majority_share", "n_labels"])
    want = want.sort_values(["majority_share", "n_labels", "task"], ascending=[False, False, True], kind="stable")
    pd.testing.assert_frame_equal(got, want.reset_index(drop=True), check_dtype=False)


@pytest.mark.parametrize("seed", range(12))
def test_majority_changes_from_codes_equal_the_text_rule(seed: int) -> None:
    """The coded path (a fit's LabelMatrix) gives the text path's table on a family: 1-5 classes, ties, int or text
    ids, unlabelled rows, consensus labels a task never got, classes never voted, tasks without labels."""
    from crowdflow.labels import answered, encode_labels

    rng = np.random.default_rng(seed)
    m, n_tasks = int(rng.integers(1, 6)), int(rng.integers(1, 60))
    k = rng.integers(1, 6, n_tasks)
    task = np.repeat(np.arange(n_tasks), k)
    worker = np.concatenate([rng.choice(12, size=kk, replace=False) for kk in k])
    label = rng.integers(0, m, task.size)
    ints = seed % 3 == 0
    frame = pd.DataFrame(
        {
            "task": task if ints else [f"t{t}" for t in task],
            "worker": [f"w{w}" for w in worker],
            "label": label * 7 if ints else [f"c{7 * c}" for c in label],  # text order is not the natural order
        }
    ).astype({"label": object})
    frame.loc[rng.random(len(frame)) < 0.1, "label"] = None  # unlabelled rows are not votes
    classes = 7 * np.arange(m + 1) if ints else np.array([f"c{7 * c}" for c in range(m + 1)])  # one nobody chose
    lm = encode_labels(answered(frame), [str(c) for c in classes])
    pick = rng.integers(0, m + 1, lm.n_tasks)
    consensus = pd.DataFrame({"task": lm.tasks, "label": classes[pick]})
    extra = pd.DataFrame({"task": ["nowhere"], "label": [classes[0]]})  # a task without labels: never a change
    consensus = pd.concat([consensus, extra], ignore_index=True)
    want = majority_changes(answered(frame), consensus)
    got = majority_changes(frame, consensus, coded=lm)
    pd.testing.assert_frame_equal(got, want)
    assert review_skills(frame, consensus, coded=lm).record == review_skills(answered(frame), consensus).record


@pytest.mark.parametrize("seed", range(16))
def test_gold_by_worker_equals_its_definition_over_a_family(seed: int) -> None:
    """gold_by_worker (gold rows selected before any text is made) against its definition written the slow obvious
    way: every row with task, worker and label, compared as text. Ids int or text (truth's tasks as text, labels'
    as ints: ``7`` and ``"7"`` are one task), missing values in every column, repeated gold tasks (first kept),
    gold tasks nobody labelled, a task spelled ``"nan"``."""
    rng = np.random.default_rng(seed)
    n_tasks, n = int(rng.integers(1, 30)), int(rng.integers(0, 300))
    task: np.ndarray = rng.integers(0, n_tasks, n)
    labels = pd.DataFrame(
        {
            "task": task if seed % 2 else np.array([f"{t}" if t else "nan" for t in task], dtype=object),
            "worker": np.array([f"w{i}" for i in rng.integers(0, 12, n)], dtype=object),
            "label": np.array(list("abc"))[rng.integers(0, 3, n)].astype(object),
        }
    )
    for col in ("task", "worker", "label"):
        if n and seed % 3:
            labels[col] = labels[col].astype(object)
            labels.loc[rng.random(n) < 0.05, col] = None
    gold_tasks = rng.integers(0, n_tasks + 3, int(rng.integers(1, 12)))
    truth = pd.DataFrame(
        {
            "task": [str(t) if t else "nan" for t in gold_tasks],
            "label": np.array(list("abc"))[rng.integers(0, 3, gold_tasks.size)],
        }
    )
    got = gold_by_worker(labels, truth)
    first: dict[str, str] = {}
    for t, lab in truth.itertuples(index=False):
        first.setdefault(str(t), str(lab))
    counts: dict[str, list[int]] = {}
    for t, w, lab in labels.itertuples(index=False):
        if pd.isna(t) or pd.isna(w) or pd.isna(lab) or str(t) not in first:
            continue
        c = counts.setdefault(str(w), [0, 0])
        c[0] += 1
        c[1] += str(lab) == first[str(t)]
    want = pd.DataFrame(
        [(w, a, b, b / a) for w, (a, b) in counts.items()],
        columns=["worker", "n_gold_labels", "n_gold_correct", "gold_accuracy"],
    ).astype({"n_gold_labels": "int64", "n_gold_correct": "int64", "gold_accuracy": "float64"})
    want = want.sort_values(["n_gold_labels", "worker"], ascending=[False, True], kind="stable").reset_index(drop=True)
    assert len(got) == len(want)
    if len(want):
        pd.testing.assert_frame_equal(got, want, check_dtype=False)


@pytest.mark.parametrize("kind", ["object", "str", "string[python]"])
@pytest.mark.parametrize("seed", range(4))
def test_review_part_gold_equals_the_whole_review_over_a_family(seed: int, kind: str) -> None:
    """``review_part`` finds its gold tasks by an Arrow look-up of the consensus tasks: the gold tables and counts
    equal :func:`review_skills` and :func:`gold_metrics` on the same tasks, with gold rows outside the part, repeated
    and missing, ids as objects or pandas strings."""
    from crowdflow.metrics import gold_metrics, review_part, review_skills

    rng = np.random.default_rng(seed)
    n_tasks = 60
    task = np.repeat([f"t{i}" for i in range(n_tasks)], 3)
    labels = pd.DataFrame(
        {
            "task": task,
            "worker": rng.choice([f"w{i}" for i in range(9)], task.size),
            "label": rng.choice(["a", "b"], task.size),
        }
    ).drop_duplicates(["task", "worker"])
    consensus = pd.DataFrame({"task": [f"t{i}" for i in range(n_tasks)], "label": rng.choice(["a", "b"], n_tasks)})
    gold_ids: list[Any] = [f"t{i}" for i in rng.integers(0, 2 * n_tasks, 50)]
    gold_ids[::7] = [None] * len(gold_ids[::7])
    truth = pd.DataFrame({"task": pd.Series(gold_ids, dtype=kind), "label": rng.choice(["a", "b", "c"], 50)})
    part = review_part(labels, consensus, truth, ["a", "b"])
    whole = review_skills(labels, consensus, truth)
    g = gold_metrics(consensus, truth.dropna().astype(str).drop_duplicates("task"), ["a", "b"])  # a task's first row
    assert (part.n_gold, part.n_gold_label_unknown) == (g.n_gold, g.n_gold_label_unknown) and part.n_gold > 0
    assert part.n_correct == round(g.accuracy * g.n_gold)
    assert part.gold_workers is not None and part.gold_confusion is not None
    pd.testing.assert_frame_equal(part.gold_workers, whole.tables["gold_workers"])
    pd.testing.assert_frame_equal(part.gold_confusion, whole.tables["gold_confusion"])
