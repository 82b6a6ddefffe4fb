"""Item ids of any column kind go through one encoding (crowdflow.contracts.comparisons.text_ids, issue #19): integer,
object and Arrow-string columns with the same ids give the same ranking, residual and component tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crowdflow.contracts.comparisons import text_ids
from crowdflow.ranking import fit_hodgerank


def _by_definition(s: pd.Series) -> pd.Series:
    """``str`` of every value, missing kept missing (what text_ids did row by row before #19)."""
    values = s.reset_index(drop=True)
    return values.astype(str).astype("string").mask(values.isna().to_numpy())


@pytest.mark.parametrize(
    "values",
    [
        pd.Series([3, 1, 2, 3], index=[4, 5, 6, 7]),
        pd.Series([1.0, 2.5, None]),
        pd.Series(["a", 1, None, "1", 2.0], dtype=object),
        pd.Series([True, False, True]),
        pd.Series([], dtype=object),
    ],
)
def test_text_ids_equal_str_per_row(values: pd.Series) -> None:
    pd.testing.assert_series_equal(text_ids(values), _by_definition(values))


def _comparisons(seed: int, kind: str) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(3, 40)), int(rng.integers(30, 300))
    a = rng.integers(0, n, m)
    b = (a + 1 + rng.integers(0, n - 1, m)) % n
    y = np.round(rng.normal(size=m), 2)
    ids_a, ids_b = a * 7 + 100, b * 7 + 100
    if kind == "int":
        return pd.DataFrame({"item_a": ids_a, "item_b": ids_b, "outcome": y})
    dtype = object if kind == "object" else "string[pyarrow]"
    return pd.DataFrame(
        {
            "item_a": pd.Series(ids_a.astype(str).astype(object), dtype=dtype),
            "item_b": pd.Series(ids_b.astype(str).astype(object), dtype=dtype),
            "outcome": y,
        }
    )


@pytest.mark.parametrize("seed", range(4))
def test_integer_object_and_string_ids_give_the_same_fit(seed: int) -> None:
    fits = [fit_hodgerank(_comparisons(seed, kind)) for kind in ("int", "object", "arrow")]
    for other in fits[1:]:
        for name, table in fits[0].tables.items():
            pd.testing.assert_frame_equal(other.tables[name], table)
    assert fits[0].ranking["item"].map(type).eq(str).all()
