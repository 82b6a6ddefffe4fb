"""The public gold sets the auto rule was not designed on (benchmarks/data, issue #35): well formed, documented,
no gold leaked through the task ids, and the default within 0.005 of the best candidate on the small ones."""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd
import pytest

from crowdflow.skills import fit_skills, prediction_error
from crowdflow.skills.auto import CANDIDATES, DEFAULT_CANDIDATES

ROOT = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
SETS = sorted(p.name for p in ROOT.iterdir() if p.is_dir())


def _read(name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    return (
        pd.read_csv(ROOT / name / "labels.csv", dtype=str),
        pd.read_csv(ROOT / name / "truth.csv", dtype=str),
    )


def test_the_sets_are_there() -> None:
    assert {"zhou_dogs", "wang_restaurant", "wang_restaurant_qt", "wang_product_qt"} <= set(SETS)


@pytest.mark.parametrize("name", SETS)
def test_set_is_well_formed_documented_and_does_not_leak_its_gold(name: str) -> None:
    labels, truth = _read(name)
    assert list(labels.columns) == ["task", "worker", "label"]
    assert list(truth.columns) == ["task", "label"]
    assert not labels.isna().any().any() and not truth.isna().any().any()
    assert not labels.duplicated(["task", "worker"]).any()
    assert truth["task"].is_unique
    assert truth["task"].isin(labels["task"]).all(), "every gold task has labels"
    assert set(truth["label"]) <= set(labels["label"]), "gold classes are classes the crowd used"
    readme = (ROOT / "README.md").read_text()
    assert name in readme, f"{name} has no provenance entry in benchmarks/data/README.md"
    # the CrowdER files carry the gold as the last '_' field of the pair id; a copy that kept it would let a
    # tie-break hashed from the id (or any id-aware method) see the answer
    ends_with_gold = (truth["task"].str.rsplit("_", n=1).str[-1] == truth["label"]) & truth["task"].str.contains("_")
    assert ends_with_gold.mean() < 0.5


@pytest.mark.parametrize("name", ["wang_restaurant", "wang_restaurant_qt", "zhou_dogs"])
def test_default_is_within_0005_of_the_best_candidate_on_gold(name: str) -> None:
    """Issue #35's per-set target, against the default's own candidates refitted on all labels (the peers of
    skills_real.md include Crowd-Kit's; these are the ones a test can run in seconds)."""
    labels, truth = _read(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        default = prediction_error(fit_skills(labels, spectral=False).consensus, truth)
        errors = {
            c: prediction_error(fit_skills(labels, spectral=False, **CANDIDATES[c].options).consensus, truth)
            for c in DEFAULT_CANDIDATES
        }
    assert default <= min(errors.values()) + 0.005, (default, errors)
