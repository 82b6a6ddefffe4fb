"""Partitioned synthetic datasets for the scale-out benchmark, streamed as Parquet files of ~10^6 rows.

Labels (skills job): ``python -m benchmarks.scale_data --labels 1e8 --out DIR --workers 20000 --classes 2
--seed 0`` (writes ``DIR/labels/part-00000.parquet``… and ``DIR/truth.parquet``).

Comparisons (ranking job): ``python -m benchmarks.scale_data --comparisons 1e8 --out DIR --items 1000
--annotators 5000 [--outcome pm1]`` (writes ``DIR/comparisons/part-*.parquet`` and ``DIR/truth.parquet``;
see :func:`write_comparisons`).

**Labels.**

The crowd is Dawid–Skene: every worker has a K×K confusion matrix and labels a task by drawing from the row
of the task's true class.

- **Tasks**: true class from a fixed class prior (mildly imbalanced, a Dirichlet draw of the seed); each task
  is labelled by k distinct workers, k uniform on 3–7.
- **Workers** (``--workers``): 70 % competent (per-class accuracy 1/K + (1 − 1/K)·Beta(4, 2) with a class
  jitter; the errors spread over the other classes by a Dirichlet), 20 % weak (accuracy within 0.15·(1 − 1/K)
  of chance), 10 % spammers (half answer uniformly at random, half always give one class).
- **Activity** is skewed: the chance that a label goes to a worker is a log-normal(0, 1.6) weight, so at
  W = 20,000 the busiest worker gives ~0.8 % of all labels, the busiest 1 % of workers ~24 %, the median
  worker a quarter of the mean; a task never has the same worker twice (collisions are redrawn).
- **Files**: rows are made block by block in task order (one block per file; memory is one block), then a
  share (``--spill``, 2 %) of each block's rows is moved to the next file and every file is shuffled, so
  about 10 % of the tasks have labels in two files (as late-arriving labels do). The last task of a block
  may have fewer than 3 labels (the block is cut to its exact size).
- **Truth**: the true class of a random ``--truth-frac`` (1 %) of the tasks, written as ``truth.parquet``
  (task, label) while the blocks are made.

Ids are strings, ``t000123456`` and ``w01234`` (zero-padded, wider when the counts need it); labels are
``c0``…``c{K-1}``. Everything is deterministic in ``--seed`` (one generator per block, seeded by the seed and
the block's index), so a file's content does not depend on which other files were written.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROWS_PER_FILE = 1_000_000
MIN_K, MAX_K = 3, 7


@dataclass(frozen=True)
class Crowd:
    """The workers' parameters and the class prior (drawn once from the seed).

    Attributes
    ----------
    prior : numpy.ndarray
        Class prior, shape (K,).
    cdf : numpy.ndarray
        Cumulative confusion rows, shape (W, K, K): ``cdf[j, c]`` is the CDF of worker ``j``'s answer to a task
        of true class ``c``.
    activity : numpy.ndarray
        CDF over workers of who gives a label, shape (W,).
    kind : numpy.ndarray
        0 competent, 1 weak, 2 spammer (shape (W,)).
    """

    prior: np.ndarray
    cdf: np.ndarray
    activity: np.ndarray
    kind: np.ndarray


@dataclass(frozen=True)
class DatasetInfo:
    """What :func:`write_dataset` wrote (also saved as ``DIR/dataset.json``)."""

    labels: int
    tasks: int
    workers: int
    classes: int
    seed: int
    files: int
    rows_per_file: int
    truth_tasks: int
    spill: float
    tasks_in_two_files: int
    seconds: float


def make_crowd(n_workers: int, n_classes: int, seed: int) -> Crowd:
    """Draw the class prior, the workers' confusion matrices and their activity weights.

    Parameters
    ----------
    n_workers : int
        Number of workers W.
    n_classes : int
        Number of classes K (≥ 2).
    seed : int
        Seed of the whole dataset.

    Returns
    -------
    Crowd
    """
    if n_classes < 2:
        raise ValueError("n_classes must be at least 2")
    rng = np.random.default_rng([seed, 0])
    k = n_classes
    prior = rng.dirichlet(np.full(k, 8.0))
    kind = rng.choice(3, size=n_workers, p=[0.7, 0.2, 0.1])
    chance = 1.0 / k
    base = np.where(kind == 0, chance + (1 - chance) * rng.beta(4.0, 2.0, n_workers), 0.0)
    base = np.where(kind == 1, chance + (1 - chance) * rng.uniform(-0.15, 0.15, n_workers), base)
    acc = np.clip(base[:, None] + rng.normal(0.0, 0.04, (n_workers, k)), 0.02, 0.99)  # per class
    # errors spread over the other classes
    off = rng.dirichlet(np.full(k - 1, 2.0), size=(n_workers, k))
    conf = np.empty((n_workers, k, k))
    for c in range(k):
        others = [o for o in range(k) if o != c]
        conf[:, c, c] = acc[:, c]
        conf[:, c, others] = (1 - acc[:, c])[:, None] * off[:, c, :]
    spam = np.flatnonzero(kind == 2)
    uniform = spam[rng.random(spam.size) < 0.5]
    constant = np.setdiff1d(spam, uniform)
    conf[uniform] = chance
    conf[constant] = 0.0
    conf[constant, :, rng.integers(0, k, constant.size)] = 1.0  # each constant spammer: one class for every task
    cdf = np.cumsum(conf, axis=2)
    cdf[:, :, -1] = 1.0
    weight = rng.lognormal(0.0, 1.6, n_workers)
    activity = np.cumsum(weight / weight.sum())
    activity[-1] = 1.0
    return Crowd(prior=prior, cdf=cdf, activity=activity, kind=kind)


def fixed_width_ids(prefix: str, ids: np.ndarray, width: int) -> pa.Array:
    """``prefix`` + zero-padded ``ids`` as an Arrow string array, built from bytes (no Python strings).

    Parameters
    ----------
    prefix : str
        One ASCII character or more (``"t"``).
    ids : numpy.ndarray
        Non-negative integers below ``10**width``.
    width : int
        Number of digits.

    Returns
    -------
    pyarrow.StringArray
    """
    n = ids.size
    p = prefix.encode()
    size = len(p) + width
    buf = np.empty((n, size), dtype=np.uint8)
    buf[:, : len(p)] = np.frombuffer(p, dtype=np.uint8)
    v = ids.astype(np.int64, copy=True)
    for pos in range(size - 1, len(p) - 1, -1):
        buf[:, pos] = 48 + v % 10
        v //= 10
    offsets = np.arange(0, (n + 1) * size, size, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(buf))


def _distinct_workers(rng: np.random.Generator, activity: np.ndarray, task: np.ndarray, n_workers: int) -> np.ndarray:
    """A worker per row, drawn by activity, with no worker twice on one task (collisions redrawn)."""
    worker = np.searchsorted(activity, rng.random(task.size), side="right")
    np.minimum(worker, n_workers - 1, out=worker)
    for attempt in range(100):
        key = task.astype(np.int64) * n_workers + worker
        order = np.argsort(key, kind="stable")
        sk = key[order]
        dup = order[1:][sk[1:] == sk[:-1]]
        if dup.size == 0:
            return worker
        if attempt < 10:  # redraw by activity; heavy workers may collide again, so then uniformly
            new = np.searchsorted(activity, rng.random(dup.size), side="right")
            worker[dup] = np.minimum(new, n_workers - 1)
        else:
            worker[dup] = rng.integers(0, n_workers, dup.size)
    raise RuntimeError("could not give distinct workers to every task (fewer workers than labels per task?)")


def _block(
    crowd: Crowd, rows: int, first_task: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``rows`` labels of whole tasks from ``first_task`` on (the last one cut to fit).

    Returns task index per row, worker per row, label per row, and the block's tasks' true classes (by task
    index − ``first_task``) and labels-per-task.
    """
    n_workers = crowd.cdf.shape[0]
    k = crowd.cdf.shape[1]
    n_tasks = rows // MIN_K + 1
    per_task = rng.integers(MIN_K, MAX_K + 1, n_tasks)
    ends = np.cumsum(per_task)
    n_tasks = int(np.searchsorted(ends, rows)) + 1  # the first task whose end reaches rows
    per_task = per_task[:n_tasks]
    per_task[-1] -= int(ends[n_tasks - 1]) - rows
    truth = np.searchsorted(np.cumsum(crowd.prior), rng.random(n_tasks), side="right")
    np.minimum(truth, k - 1, out=truth)
    local = np.repeat(np.arange(n_tasks, dtype=np.int64), per_task)
    worker = _distinct_workers(rng, crowd.activity, local, n_workers)
    row_cdf = crowd.cdf[worker, truth[local]]  # (rows, K)
    label = (rng.random(rows)[:, None] > row_cdf).sum(axis=1)
    np.minimum(label, k - 1, out=label)
    return local + first_task, worker, label, truth, per_task


def write_dataset(
    out: str | Path,
    n_labels: int,
    n_workers: int = 20_000,
    n_classes: int = 2,
    seed: int = 0,
    rows_per_file: int = ROWS_PER_FILE,
    truth_frac: float = 0.01,
    spill: float = 0.02,
    verbose: bool = False,
) -> DatasetInfo:
    """Write ``out/labels/part-*.parquet`` (``n_labels`` rows in all) and ``out/truth.parquet``, block by block.

    Parameters
    ----------
    out : str or Path
        The dataset's folder (created; existing part files are overwritten).
    n_labels : int
        Total number of labels N.
    n_workers : int
        Number of workers W.
    n_classes : int
        Number of classes K.
    seed : int
        Seed; the same arguments give the same files.
    rows_per_file : int
        Rows made per block; a file holds its block minus the spilled rows plus the previous block's.
    truth_frac : float
        Share of tasks whose true class is written to ``truth.parquet``.
    spill : float
        Share of each block's rows moved to the next file (so their tasks span two files).
    verbose : bool
        Print a line per 10 files.

    Returns
    -------
    DatasetInfo
    """
    t0 = time.perf_counter()
    out = Path(out)
    folder = out / "labels"
    folder.mkdir(parents=True, exist_ok=True)
    crowd = make_crowd(n_workers, n_classes, seed)
    n_files = max(1, -(-n_labels // rows_per_file))
    task_width = max(9, len(str(n_labels)))
    worker_ids = fixed_width_ids("w", np.arange(n_workers), max(5, len(str(n_workers - 1))))
    class_ids = pa.array([f"c{c}" for c in range(n_classes)])
    schema = pa.schema([("task", pa.string()), ("worker", pa.string()), ("label", pa.string())])
    truth_schema = pa.schema([("task", pa.string()), ("label", pa.string())])
    carry: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    next_task = 0
    n_truth = 0
    n_spanning = 0
    with pq.ParquetWriter(out / "truth.parquet", truth_schema) as truth_writer:
        for i in range(n_files):
            rng = np.random.default_rng([seed, 1, i])
            rows = min(rows_per_file, n_labels - i * rows_per_file)
            task, worker, label, truth, per_task = _block(crowd, rows, next_task, rng)
            gold = np.flatnonzero(rng.random(truth.size) < truth_frac)
            if gold.size:
                truth_writer.write_table(
                    pa.table(
                        [fixed_width_ids("t", gold + next_task, task_width), class_ids.take(truth[gold])],
                        schema=truth_schema,
                    )
                )
            n_truth += gold.size
            next_task += truth.size
            last = i == n_files - 1
            move = rng.random(rows) < spill if not last else np.zeros(rows, dtype=bool)
            if move.any():  # tasks with a label moved and one kept span two files
                moved = np.bincount(task[move] - task[0], minlength=truth.size)
                n_spanning += int(((moved > 0) & (moved < per_task)).sum())
            keep = ~move
            parts = [(task[keep], worker[keep], label[keep])]
            if carry is not None:
                parts.append(carry)
            carry = (task[move], worker[move], label[move])
            t_all = np.concatenate([p[0] for p in parts])
            w_all = np.concatenate([p[1] for p in parts])
            l_all = np.concatenate([p[2] for p in parts])
            perm = rng.permutation(t_all.size)
            table = pa.table(
                [
                    fixed_width_ids("t", t_all[perm], task_width),
                    worker_ids.take(pa.array(w_all[perm])),
                    class_ids.take(pa.array(l_all[perm])),
                ],
                schema=schema,
            )
            pq.write_table(table, folder / f"part-{i:05d}.parquet", row_group_size=256 * 1024)
            if verbose and (i % 10 == 9 or last):
                print(f"{i + 1}/{n_files} files, {time.perf_counter() - t0:.1f} s", flush=True)
    info = DatasetInfo(
        labels=n_labels,
        tasks=next_task,
        workers=n_workers,
        classes=n_classes,
        seed=seed,
        files=n_files,
        rows_per_file=rows_per_file,
        truth_tasks=n_truth,
        spill=spill,
        tasks_in_two_files=n_spanning,
        seconds=round(time.perf_counter() - t0, 2),
    )
    (out / "dataset.json").write_text(json.dumps(asdict(info), indent=2) + "\n")
    return info


@dataclass(frozen=True)
class ComparisonsInfo:
    """What :func:`write_comparisons` wrote (also saved as ``DIR/dataset.json``)."""

    comparisons: int
    items: int
    annotators: int
    flippers: int
    outcome: str
    sigma: float
    outlier_frac: float
    item_zipf: float
    seed: int
    files: int
    rows_per_file: int
    outlier_rows: int
    flipped_rows: int
    seconds: float


def _popular(rng: np.random.Generator, cdf: np.ndarray, size: int) -> np.ndarray:
    """``size`` indices drawn from the distribution with CDF ``cdf``."""
    return np.minimum(np.searchsorted(cdf, rng.random(size), side="right"), cdf.size - 1)


def write_comparisons(
    out: str | Path,
    n_rows: int,
    n_items: int = 1_000,
    n_annotators: int = 5_000,
    seed: int = 0,
    outcome: str = "graded",
    sigma: float = 0.5,
    outlier_frac: float = 0.05,
    flipper_frac: float = 0.02,
    flip_prob: float = 0.8,
    item_zipf: float = 1.0,
    rows_per_file: int = ROWS_PER_FILE,
    verbose: bool = False,
) -> ComparisonsInfo:
    """Write ``out/comparisons/part-*.parquet`` (``n_rows`` pairwise comparisons) and ``out/truth.parquet``.

    - **Items**: true scores θ ~ N(0, 1); a row's two items are drawn independently by a Zipf popularity
      (weight ``1/rank**item_zipf`` over a random order of the items; a pair of the same item is redrawn), so
      at 1,000 items and exponent 1 the most popular item is in ~13 % of the rows and the least in ~0.03 %.
    - **Outcome** ``θ_a − θ_b + N(0, σ²)`` (``graded``) or its sign (``pm1``, ±1).
    - **Annotators**: activity log-normal(0, 1.2); a share ``flipper_frac`` of them reverse each answer with
      probability ``flip_prob`` (``y → −y``).
    - **Outliers**: a share ``outlier_frac`` of the other rows is replaced by an answer against the true order:
      graded ``−sign(d)·(|d| + U(2, 4)·σ)`` (the true difference ``d`` sign-flipped and pushed 2–4σ further,
      a residual of ``2|d|`` + 2–4σ), ±1 ``−sign(d)``.

    Ids are strings ``i0001`` and ``a00042`` (zero-padded, wider when the counts need it); the outcome is
    float64. One generator per file (seeded by the seed and the file's index), so a file's content does not
    depend on the others; memory is one file. ``truth.parquet`` has (item, theta) for every item.

    Parameters
    ----------
    out : str or Path
        The dataset's folder (created; existing part files are overwritten).
    n_rows : int
        Total number of comparisons N.
    n_items, n_annotators : int
        Number of items and of annotators.
    seed : int
        Seed; the same arguments give the same files.
    outcome : {'graded', 'pm1'}
        Graded (float) outcomes or their signs.
    sigma : float
        Noise level σ of the graded outcome (also the latent noise of the ±1 one).
    outlier_frac : float
        Share of the non-flipped rows replaced by an outlier.
    flipper_frac, flip_prob : float
        Share of annotators who flip, and how often they do.
    item_zipf : float
        Exponent of the item popularity (0: uniform).
    rows_per_file : int
        Rows per file.
    verbose : bool
        Print a line per 10 files.

    Returns
    -------
    ComparisonsInfo
    """
    if outcome not in ("graded", "pm1"):
        raise ValueError("outcome must be 'graded' or 'pm1'")
    if n_items < 2:
        raise ValueError("n_items must be at least 2")
    t0 = time.perf_counter()
    out = Path(out)
    folder = out / "comparisons"
    folder.mkdir(parents=True, exist_ok=True)
    rng0 = np.random.default_rng([seed, 2])
    theta = rng0.standard_normal(n_items)
    weight = 1.0 / np.arange(1, n_items + 1) ** item_zipf
    weight = weight[rng0.permutation(n_items)]
    item_cdf = np.cumsum(weight / weight.sum())
    item_cdf[-1] = 1.0
    activity = rng0.lognormal(0.0, 1.2, n_annotators)
    ann_cdf = np.cumsum(activity / activity.sum())
    ann_cdf[-1] = 1.0
    flipper = np.zeros(n_annotators, dtype=bool)
    if flipper_frac > 0:
        flipper[rng0.choice(n_annotators, max(1, round(flipper_frac * n_annotators)), replace=False)] = True
    item_ids = fixed_width_ids("i", np.arange(n_items), max(4, len(str(n_items - 1))))
    ann_ids = fixed_width_ids("a", np.arange(n_annotators), max(5, len(str(n_annotators - 1))))
    schema = pa.schema(
        [("annotator", pa.string()), ("item_a", pa.string()), ("item_b", pa.string()), ("outcome", pa.float64())]
    )
    n_files = max(1, -(-n_rows // rows_per_file))
    n_outliers = n_flipped = 0
    for f in range(n_files):
        rng = np.random.default_rng([seed, 3, f])
        rows = min(rows_per_file, n_rows - f * rows_per_file)
        a = _popular(rng, item_cdf, rows)
        b = _popular(rng, item_cdf, rows)
        while (same := np.flatnonzero(a == b)).size:
            b[same] = _popular(rng, item_cdf, same.size)
        ann = _popular(rng, ann_cdf, rows)
        d = theta[a] - theta[b]
        toward = np.where(d >= 0, 1.0, -1.0)
        y = d + sigma * rng.standard_normal(rows)
        if outcome == "pm1":
            y = np.where(y >= 0, 1.0, -1.0)
        flip = flipper[ann] & (rng.random(rows) < flip_prob)
        y[flip] = -y[flip]
        bad = ~flip & (rng.random(rows) < outlier_frac)
        size = rng.uniform(2.0, 4.0, rows)
        y[bad] = -toward[bad] * ((np.abs(d[bad]) + size[bad] * sigma) if outcome == "graded" else 1.0)
        n_outliers += int(bad.sum())
        n_flipped += int(flip.sum())
        table = pa.table(
            [ann_ids.take(pa.array(ann)), item_ids.take(pa.array(a)), item_ids.take(pa.array(b)), pa.array(y)],
            schema=schema,
        )
        pq.write_table(table, folder / f"part-{f:05d}.parquet", row_group_size=256 * 1024)
        if verbose and (f % 10 == 9 or f == n_files - 1):
            print(f"{f + 1}/{n_files} files, {time.perf_counter() - t0:.1f} s", flush=True)
    pq.write_table(pa.table({"item": item_ids, "theta": pa.array(theta)}), out / "truth.parquet")
    info = ComparisonsInfo(
        comparisons=n_rows,
        items=n_items,
        annotators=n_annotators,
        flippers=int(flipper.sum()),
        outcome=outcome,
        sigma=sigma,
        outlier_frac=outlier_frac,
        item_zipf=item_zipf,
        seed=seed,
        files=n_files,
        rows_per_file=rows_per_file,
        outlier_rows=n_outliers,
        flipped_rows=n_flipped,
        seconds=round(time.perf_counter() - t0, 2),
    )
    (out / "dataset.json").write_text(json.dumps(asdict(info), indent=2) + "\n")
    return info


@dataclass(frozen=True)
class AgentsInfo:
    """What :func:`write_agents` wrote (``dataset.json``)."""

    samples: int
    agents: int
    features: int
    edges: int
    files: int
    seed: int
    noise: float
    seconds: float


def write_agents(
    out: str | Path,
    n_rows: int,
    n_agents: int = 100_000,
    n_features: int = 3,
    seed: int = 0,
    noise: float = 1.0,
    k_neighbours: int = 6,
    rows_per_file: int = ROWS_PER_FILE,
    verbose: bool = False,
) -> AgentsInfo:
    """A personal-models dataset: ``agents/part-*.parquet`` (agent, y, f0…), ``edges.parquet``, ``truth.parquet``.

    Agents sit at uniform points of the unit square; each is linked to its ``k_neighbours`` nearest (weight
    ``exp(−d/d̄)``). The true models are a smooth field over the square plus a small per-agent deviation, so
    neighbours have similar models; agent i has Poisson-many samples ``y = x·θ_i + N(0, noise²)`` with
    ``x ~ N(0, I)``. Rows are shuffled before they are cut into files, so an agent's rows span files.
    """
    from scipy.spatial import cKDTree

    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    out = Path(out)
    (out / "agents").mkdir(parents=True, exist_ok=True)
    pos = rng.random((n_agents, 2))
    freq = rng.normal(size=(n_features, 2)) * 3.0
    theta = np.sin(pos @ freq.T + rng.uniform(0, 2 * np.pi, n_features)) + 0.1 * rng.normal(size=(n_agents, n_features))
    dist, nbr = cKDTree(pos).query(pos, k=k_neighbours + 1)
    src = np.repeat(np.arange(n_agents), k_neighbours)
    dst = nbr[:, 1:].ravel()
    d = dist[:, 1:].ravel()
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    key = np.unique(lo.astype(np.int64) * n_agents + hi)
    lo, hi = key // n_agents, key % n_agents
    w = np.exp(-np.linalg.norm(pos[lo] - pos[hi], axis=1) / max(float(d.mean()), 1e-12))
    ids = fixed_width_ids("a", np.arange(n_agents), len(str(n_agents)))
    pq.write_table(pa.table({"source": ids.take(pa.array(lo)), "target": ids.take(pa.array(hi)), "weight": w}),
                   out / "edges.parquet")  # fmt: skip
    pq.write_table(pa.table({"agent": ids, **{f"theta_f{j}": theta[:, j] for j in range(n_features)}}),
                   out / "truth.parquet")  # fmt: skip
    agent = np.sort(rng.integers(0, n_agents, n_rows))
    agent[:n_agents] = np.arange(n_agents) if n_rows >= n_agents else agent[:n_agents]  # every agent has a sample
    order = rng.permutation(n_rows)
    files = 0
    for start in range(0, n_rows, rows_per_file):
        rows = agent[order[start : start + rows_per_file]]
        x = rng.normal(size=(rows.size, n_features))
        y = np.einsum("ij,ij->i", x, theta[rows]) + noise * rng.normal(size=rows.size)
        cols = {"agent": ids.take(pa.array(rows)), "y": y, **{f"f{j}": x[:, j] for j in range(n_features)}}
        pq.write_table(pa.table(cols), out / "agents" / f"part-{files:05d}.parquet")
        files += 1
        if verbose and files % 10 == 0:
            print(f"  {min(start + rows_per_file, n_rows):,} rows", flush=True)
    info = AgentsInfo(n_rows, n_agents, n_features, int(key.size), files, seed, noise, time.perf_counter() - t0)
    (out / "dataset.json").write_text(json.dumps(asdict(info)))
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--labels", type=float, help="number of labels, e.g. 1e8 (skills dataset)")
    what.add_argument("--comparisons", type=float, help="number of comparisons, e.g. 1e8 (ranking dataset)")
    ap.add_argument("--out", type=Path, required=True, help="dataset folder (labels/ or comparisons/, truth.parquet)")
    ap.add_argument("--workers", type=int, default=20_000, help="labels: crowd workers")
    ap.add_argument("--classes", type=int, default=2, help="labels: classes")
    ap.add_argument("--truth-frac", type=float, default=0.01, help="labels: share of tasks with a gold label")
    ap.add_argument("--spill", type=float, default=0.02, help="labels: share of a block's rows moved to the next file")
    ap.add_argument("--items", type=int, default=1_000, help="comparisons: items")
    ap.add_argument("--annotators", type=int, default=5_000, help="comparisons: annotators")
    ap.add_argument("--outcome", default="graded", choices=["graded", "pm1"], help="comparisons: graded or ±1")
    ap.add_argument("--sigma", type=float, default=0.5, help="comparisons: noise level")
    ap.add_argument("--outlier-frac", type=float, default=0.05, help="comparisons: share of outlier rows")
    ap.add_argument("--flipper-frac", type=float, default=0.02, help="comparisons: share of flipping annotators")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rows-per-file", type=int, default=ROWS_PER_FILE)
    args = ap.parse_args(argv)
    if args.comparisons is not None:
        info: Any = write_comparisons(
            args.out,
            int(args.comparisons),
            args.items,
            args.annotators,
            args.seed,
            args.outcome,
            args.sigma,
            args.outlier_frac,
            args.flipper_frac,
            rows_per_file=args.rows_per_file,
            verbose=True,
        )
    else:
        info = write_dataset(
            args.out,
            int(args.labels),
            args.workers,
            args.classes,
            args.seed,
            args.rows_per_file,
            args.truth_frac,
            args.spill,
            verbose=True,
        )
    print(json.dumps(asdict(info)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
