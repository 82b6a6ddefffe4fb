"""Regenerate the seeded sample inputs under ``crowdflow/data/samples/`` used by the example specs.

    python deployments/make_sample_data.py [--out crowdflow/data/samples]

Every file is a deterministic function of the seeds below and the bundled Snow et al. RTE data
(re-running writes byte-identical files; ``tests/test_deployments.py`` checks that).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from crowdflow.synth.personal_models import field_estimation_instance
from crowdflow.synth.personal_rankings import synthetic_personal_comparisons

DATA = Path(__file__).resolve().parents[1] / "crowdflow" / "data"


def comparisons(seed: int = 0, n_items: int = 20, m: int = 1500, outlier_share: float = 0.1) -> pd.DataFrame:
    """Pairwise comparisons of 20 items with a known order (i00 best) and 10 % flipped outcomes."""
    rng = np.random.default_rng(seed)
    theta = np.linspace(2.0, -2.0, n_items)
    a = rng.integers(0, n_items, m)
    b = (a + rng.integers(1, n_items, m)) % n_items
    y = np.sign(theta[a] - theta[b] + rng.normal(0, 0.5, m))
    flip = rng.random(m) < outlier_share
    y[flip] = -np.sign(theta[a[flip]] - theta[b[flip]])
    items = np.array([f"i{k:02d}" for k in range(n_items)])
    annot = np.array([f"a{k:02d}" for k in range(30)])
    return pd.DataFrame(
        {"annotator": annot[rng.integers(0, 30, m)], "item_a": items[a], "item_b": items[b], "outcome": y.astype(int)}
    )


def candidates(seed: int = 7, n_tasks: int = 30, n_workers: int = 10) -> pd.DataFrame:
    """Task × worker candidate scores (a few negative: never worth assigning)."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(
        [(f"t{t:02d}", f"w{w:02d}") for t in range(n_tasks) for w in range(n_workers)], columns=["task", "worker"]
    )
    df["score"] = np.round(rng.uniform(-0.2, 1.0, len(df)), 4)
    return df


def closed_loop(n_tasks: int = 40, n_workers: int = 15) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Open tasks (every 20th RTE task) and available workers (the most active RTE workers + a newcomer)."""
    labels = pd.read_csv(DATA / "snow_rte" / "labels.csv", dtype=str)
    tasks = sorted(labels["task"].unique(), key=lambda t: (len(t), t))
    open_tasks = pd.DataFrame({"task": tasks[:: max(len(tasks) // n_tasks, 1)][:n_tasks]})
    counts = labels["worker"].value_counts()
    top = sorted(counts.index, key=lambda w: (-counts[w], w))[:n_workers]
    workers = pd.DataFrame({"worker": [*top, "newcomer"], "capacity": [4] * len(top) + [2]})
    return open_tasks, workers


def daily_labels(n_days: int = 3) -> dict[str, pd.DataFrame]:
    """The RTE labels as daily deliveries: ``day=2026-11-0<k>`` folders, each task's labels on one day (in order)."""
    labels = pd.read_csv(DATA / "snow_rte" / "labels.csv", dtype=str)
    tasks = sorted(labels["task"].unique(), key=lambda t: (len(t), t))
    day_of = {t: k * n_days // len(tasks) for k, t in enumerate(tasks)}
    day = labels["task"].map(day_of)
    return {f"day=2026-11-{d + 1:02d}": labels[day == d].reset_index(drop=True) for d in range(n_days)}


def daily_comparisons(frame: pd.DataFrame, n_days: int = 3) -> dict[str, pd.DataFrame]:
    """The sample comparisons as daily deliveries: ``day=2026-11-0<k>`` folders, rows in order, a third a day."""
    day = (pd.RangeIndex(len(frame)) * n_days) // len(frame)
    return {f"day=2026-11-{d + 1:02d}": frame[day == d].reset_index(drop=True) for d in range(n_days)}


def write_all(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    frames: dict[str, pd.DataFrame] = {"comparisons": comparisons(), "candidates": candidates()}
    frames["personal_comparisons"] = synthetic_personal_comparisons(40, 3, 8.0, seed=1).comparisons
    inst = field_estimation_instance(3, n=25)
    frames["agents"], frames["edges"] = inst.agents, inst.edges
    frames["open_tasks"], frames["workers"] = closed_loop()
    paths = []
    for name, df in frames.items():
        path = out / f"{name}.csv"
        df.to_csv(path, index=False, float_format="%.10g", lineterminator="\n")
        paths.append(path)
    daily = {"daily_labels": daily_labels(), "daily_comparisons": daily_comparisons(frames["comparisons"])}
    for name, days in daily.items():  # the incremental examples' date-partitioned folders
        for folder, df in days.items():
            path = out / name / folder / "part-0.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            df.to_parquet(path, index=False, compression="zstd")
            paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(DATA / "samples"))
    for p in write_all(Path(parser.parse_args().out)):
        print(p)


if __name__ == "__main__":
    main()
