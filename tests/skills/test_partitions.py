"""Partitioned co-label statistics through an executor (docs/methods/skills.md §4.3), in process.

The Dask path of the pipeline is tested in tests/test_scaleout.py; here any ``executor(fn, items)`` works.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from crowdflow.labels import encode_labels
from crowdflow.skills import fit_skills, label_moments, partitioned_moments

DATA = Path(__file__).resolve().parents[2] / "crowdflow" / "data"


def _serial(fn, items):
    return [fn(item) for item in items]


def test_fit_with_an_executor_equals_the_in_memory_fit(tmp_path: Path) -> None:
    lm = encode_labels(pd.read_csv(DATA / "snow_temp" / "labels.csv", dtype=str))
    calls: list[int] = []

    def executor(fn, items):
        calls.append(len(items))
        return _serial(fn, items)

    a = fit_skills(lm, method="pgd")
    b = fit_skills(lm, method="pgd", executor=executor, n_partitions=3, scratch_dir=str(tmp_path))
    assert calls == [3] and b.metadata["moments_partitions"] == 3 and "moments_partitions" not in a.metadata
    for name in ("skills", "consensus", "diagnostics"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name))
    assert not any(tmp_path.iterdir())  # the partition files are removed afterwards
    moments, n = partitioned_moments(lm, _serial, 5, min_pair_count=2)
    ref = label_moments(lm, min_pair_count=2)
    assert n == 5 and (moments.c_hat != ref.c_hat).nnz == 0
    with pytest.raises(ValueError, match="not both"):
        fit_skills(lm, moments=ref, executor=_serial)
