"""Generated families of date-partitioned label and comparison folders, and the edits an incremental run must follow."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from crowdflow.synth.skills import beta_skills, one_coin_labels, random_assignment


def labels_family(seed: int, n_days: int = 4, n_workers: int = 12, tasks_per_day: int = 40) -> list[pd.DataFrame]:
    """One frame of labels per day: one-coin workers, 3-5 labels a task, some tasks labelled again on a later day."""
    rng = np.random.default_rng(seed)
    per_task = int(rng.integers(3, 6))
    n_classes = int(rng.integers(2, 4))
    skills = beta_skills(4.0, 1.5, n_workers, seed=seed)
    n_tasks = n_days * tasks_per_day
    w, t = random_assignment(n_workers, n_tasks, per_task, seed=seed)
    lab = one_coin_labels(skills, w, t, n_classes=n_classes, seed=seed).labels
    day = (t // tasks_per_day).astype(int)
    # a share of each task's labels lands a day later (tasks span files): sums per file must still add up
    late = (rng.random(len(day)) < 0.15) & (day < n_days - 1)
    day = day + late
    return [lab[day == d].reset_index(drop=True) for d in range(n_days)]


def comparisons_family(seed: int, n_days: int = 4, n_items: int = 15, per_day: int = 60) -> list[pd.DataFrame]:
    """One frame of graded comparisons per day over a connected item set, with a few planted outliers."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=n_items)
    out = []
    for d in range(n_days):
        i = rng.integers(0, n_items, per_day)
        j = (i + 1 + rng.integers(0, n_items - 1, per_day)) % n_items
        if d == 0:  # a spanning path so the graph is connected from the first day
            i[: n_items - 1] = np.arange(n_items - 1)
            j[: n_items - 1] = np.arange(1, n_items)
        y = theta[i] - theta[j] + 0.3 * rng.normal(size=per_day)
        flip = rng.random(per_day) < 0.05
        y[flip] = -3 * np.sign(y[flip])
        out.append(
            pd.DataFrame(
                {
                    "annotator": [f"a{k}" for k in rng.integers(0, 6, per_day)],
                    "item_a": [f"it{v}" for v in i],
                    "item_b": [f"it{v}" for v in j],
                    "outcome": np.round(y, 3),
                }
            )
        )
    return out


def write_day(folder: Path, day: int, df: pd.DataFrame) -> Path:
    """``<folder>/day=2026-11-<day>/part-0.parquet``."""
    d = folder / f"day=2026-11-{day + 1:02d}"
    d.mkdir(parents=True, exist_ok=True)
    path = d / "part-0.parquet"
    df.to_parquet(path, index=False)
    return path
