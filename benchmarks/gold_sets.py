"""The public gold label sets the skills benchmarks score on, found and read one way (issue #35).

Two roots: /work/shared/data (the sets the auto rule was designed on) and ``benchmarks/data`` (public sets copied in
after the rule was designed, reported as "not tuned on"; benchmarks/data/README.md names their sources). A set is a
folder holding ``labels.csv`` (task, worker, label) and ``truth.csv`` (task, label).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

DATA = Path("/work/shared/data")
#: public gold sets copied into the repository after the auto rule was designed (issue #35: "sets you have not
#: seen are checked too"); reported as "not tuned on" (benchmarks/data/README.md names their sources)
UNSEEN = Path(__file__).resolve().parent / "data"
NOT_TUNED = " (not tuned on)"


def gold_sets(only: list[str] | None = None, unseen: bool = True) -> list[Path]:
    """The set folders, those of :data:`DATA` then those of :data:`UNSEEN` (``unseen``), each root's sorted by name;
    only folders with both files, and only the names in ``only`` when given."""
    roots = [DATA, UNSEEN] if unseen else [DATA]
    folders = [p for root in roots if root.is_dir() for p in sorted(q for q in root.iterdir() if q.is_dir())]
    return [
        f
        for f in folders
        if (f / "labels.csv").exists() and (f / "truth.csv").exists() and (not only or f.name in only)
    ]


def tuned_on(folder: Path) -> bool:
    """Whether the auto rule was designed with this set in view (it is not in :data:`UNSEEN`)."""
    return folder.parent != UNSEEN


def set_name(folder: Path) -> str:
    """The set's name in the result tables: the folder's, marked when it was not tuned on."""
    return folder.name + ("" if tuned_on(folder) else NOT_TUNED)


def read_gold_set(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(labels, truth) as text: labels without missing values, the last of a worker's repeated labels of a task kept,
    columns task, worker, label; truth as written."""
    labels = pd.read_csv(folder / "labels.csv", dtype=str).dropna(subset=["task", "worker", "label"])
    labels = labels.drop_duplicates(["task", "worker"], keep="last").reset_index(drop=True)[["task", "worker", "label"]]
    return labels, pd.read_csv(folder / "truth.csv", dtype=str)
