"""An independent reference for each day's folded skills (mv) run of ``benchmarks.incremental --job skills-flow``.

It never touches the increment store nor crowdflow's fold code: each daily file is read once with pyarrow, its ids
parsed from the generator's format (``d<day:4>-t<k:7>`` tasks, ``w<k:4>`` workers, ``0``/``1`` labels) into integer
codes, and kept in this process as three small integer arrays (7 bytes a row). Each day:

- ``consensus``: one count per (task, class) by ``numpy.bincount`` over every row so far; every task is in the
  run's table once with ``n_labels`` equal to the count and, when not tied, the label of the larger count; a tied
  task's label is the class with the larger draw u(task, class, seed) of docs/methods/skills.md §2.7, re-derived
  here from the formula (64-bit FNV-1a of the id text ``d<day:4>-t<k:7>`` rebuilt from the codes, splitmix64's
  finaliser, seed 0: the spec's default) with numpy words, not with crowdflow's code;
- ``skills``: ``n_labels`` per worker (a bincount), and ``accuracy`` = (rows agreeing with the task's vote) /
  ``n_labels`` from one pass over every row with the votes above (ties: the run's label), compared exactly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

#: task codes: day * TASKS_PER_DAY + k
TASKS_PER_DAY = 200_000

_M64 = (1 << 64) - 1


def _splitmix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB;
    z ^= z >> 31 (mod 2^64)."""
    z = z.astype(np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _fnv1a_text(chars: np.ndarray) -> np.ndarray:
    """FNV-1a 64 of each row of an (n, L) array of ASCII bytes."""
    h = np.full(chars.shape[0], 0xCBF29CE484222325, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(chars.shape[1]):
            h = (h ^ chars[:, j].astype(np.uint64)) * np.uint64(0x100000001B3)
    return h


def tie_winner(codes: np.ndarray, seed: int = 0) -> np.ndarray:
    """Label (0 or 1) the tie rule gives a task tied between ``"0"`` and ``"1"``, from the task codes."""
    day, k = codes // TASKS_PER_DAY, codes % TASKS_PER_DAY
    digits = np.zeros((codes.size, 14), dtype=np.uint8)
    digits[:, 0], digits[:, 5], digits[:, 6] = ord("d"), ord("-"), ord("t")
    for j in range(4):
        digits[:, 4 - j] = ord("0") + (day // 10**j) % 10
    for j in range(7):
        digits[:, 13 - j] = ord("0") + (k // 10**j) % 10
    h = _fnv1a_text(digits)
    s = _splitmix(np.asarray([seed & _M64], dtype=np.uint64))
    u = [_splitmix(h ^ _splitmix(_fnv1a_text(np.asarray([[ord(c)]], dtype=np.uint8)) ^ s)) >> np.uint64(11)
         for c in "01"]  # fmt: skip
    return (u[1] > u[0]).astype(np.int64)


def _text(a: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    if pa.types.is_dictionary(a.type):
        a = a.cast(a.type.value_type)
    return a.cast(pa.string())


def _task_codes(tasks: pa.Array | pa.ChunkedArray) -> np.ndarray:
    tasks = _text(tasks)
    day = pc.cast(pc.utf8_slice_codeunits(tasks, 1, 5), pa.int64()).to_numpy()
    k = pc.cast(pc.utf8_slice_codeunits(tasks, 7, 14), pa.int64()).to_numpy()
    assert (k < TASKS_PER_DAY).all()
    return np.asarray(day * TASKS_PER_DAY + k, dtype=np.int64)


def _worker_codes(workers: pa.Array | pa.ChunkedArray) -> np.ndarray:
    workers = _text(workers)
    return np.asarray(pc.cast(pc.utf8_slice_codeunits(workers, 1, 10), pa.int64()).to_numpy(), dtype=np.int64)


class SkillsReference:
    """Rows kept as codes; counts per (task, class) and per worker; :meth:`check` on a run's folder."""

    def __init__(self, n_workers: int) -> None:
        self.n_workers = n_workers
        self.t: list[np.ndarray] = []
        self.w: list[np.ndarray] = []
        self.y: list[np.ndarray] = []
        self.counts = np.zeros((0, 2), dtype=np.int32)

    def add(self, path: Path) -> None:
        table = pq.read_table(path, columns=["task", "worker", "label"])
        t = _task_codes(table["task"])
        w = _worker_codes(table["worker"])
        y = np.asarray(pc.cast(_text(table["label"]), pa.int64()).to_numpy(), dtype=np.int64)
        assert set(np.unique(y).tolist()) <= {0, 1}
        top = int(t.max()) + 1
        if top > self.counts.shape[0]:
            grown = np.zeros((top + 10 * TASKS_PER_DAY, 2), dtype=np.int32)
            grown[: self.counts.shape[0]] = self.counts
            self.counts = grown
        keys, cnt = np.unique(t * 2 + y, return_counts=True)
        flat = self.counts.reshape(-1)
        flat[keys] += cnt
        self.t.append(t.astype(np.int32 if top < 2**31 else np.int64))
        self.w.append(w.astype(np.int16))
        self.y.append(y.astype(np.int8))

    def check(self, run_dir: Path) -> dict[str, Any]:
        """The run's ``consensus`` and ``skills`` against the reference (raises AssertionError on a difference)."""
        import json

        from crowdflow.storage.run_store import read_output_table

        manifest = json.loads((run_dir / "manifest.json").read_text())
        layout = str(manifest.get("layout") or "flat")
        outputs = manifest["outputs"]
        cons = read_output_table(run_dir, "consensus", outputs["consensus"], layout)
        codes = _task_codes(cons["task"])
        have = np.flatnonzero(self.counts.sum(axis=1))
        assert codes.size == have.size and np.array_equal(np.sort(codes), have), "consensus tasks"
        c = self.counts[codes]
        n = np.asarray(cons["n_labels"].to_numpy(), dtype=np.int64)
        assert np.array_equal(n, c.sum(axis=1)), "consensus n_labels"
        label = np.asarray(pc.cast(_text(cons["label"]), pa.int64()).to_numpy(), dtype=np.int64)
        tied = c[:, 0] == c[:, 1]
        want = np.where(tied, label, np.argmax(c, axis=1))
        assert np.array_equal(label, want), "consensus label (untied tasks)"
        assert np.array_equal(label[tied], tie_winner(codes[tied])), "consensus label (tied tasks: the tie rule)"
        vote = np.full(self.counts.shape[0], -1, dtype=np.int8)
        vote[codes] = label
        del codes, c, n, label, want, cons
        agree = np.zeros(self.n_workers, dtype=np.int64)
        n_w = np.zeros(self.n_workers, dtype=np.int64)
        for t, w, y in zip(self.t, self.w, self.y, strict=True):
            ok = vote[t] == y
            agree += np.bincount(w, weights=ok, minlength=self.n_workers).astype(np.int64)
            n_w += np.bincount(w, minlength=self.n_workers)
        skills = read_output_table(run_dir, "skills", outputs["skills"], layout)
        wc = _worker_codes(skills["worker"])
        got_n = np.asarray(skills["n_labels"].to_numpy(), dtype=np.int64)
        assert np.array_equal(got_n, n_w[wc]), "skills n_labels"
        acc = np.asarray(skills["accuracy"].to_numpy(zero_copy_only=False), dtype=np.float64)
        want_acc = agree[wc].astype(np.float64) / np.maximum(n_w[wc], 1)
        assert np.array_equal(acc, want_acc), "skills accuracy"
        assert skills.num_rows == int(np.count_nonzero(n_w)), "skills workers"
        return {"rows": int(n_w.sum()), "tasks": int(have.size), "ties": int(tied.sum()), "workers": skills.num_rows}
