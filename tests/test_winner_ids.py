"""A winner column is read by the id rule of item_a/item_b, and a tie by one table of spellings (issue #33).

Family: the three columns each drawn as int64, whole-number float64 (what a Parquet column with nulls becomes),
text, or text with blanks around it; ties written every accepted way in mixed case; an item whose id is a tie word.
Read from a Parquet file through the reader, each row's outcome must be +1 / -1 / 0 as the generator meant.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crowdflow.contracts.comparisons import TIE_SPELLINGS
from crowdflow.contracts.errors import InputError
from crowdflow.contracts.tables import INPUTS
from crowdflow.storage.io import read_table

KINDS = ("int", "float", "text", "padded")


def _column(values: np.ndarray, kind: str) -> pd.Series:
    if kind == "int":
        return pd.Series(values.astype(np.int64))
    if kind == "float":
        return pd.Series(values.astype(np.float64))
    text = pd.Series(values.astype(str), dtype=object)
    return " " + text + "  " if kind == "padded" else text


@pytest.mark.parametrize("seed", range(16))
def test_winner_ids_and_ties_read_by_one_rule(tmp_path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 60
    a = rng.integers(1, 40, n)
    b = (a + rng.integers(1, 10, n)) % 45 + 50  # never equal to a
    truth = rng.choice([1.0, -1.0, 0.0], n, p=[0.45, 0.4, 0.15])
    ka, kb, kw = (KINDS[i] for i in rng.integers(0, len(KINDS), 3))
    winner_num = np.where(truth > 0, a, b)
    # a column that also holds tie words is text (as any file stores it): the ids in it are integer text
    mixed = bool((truth == 0).any())
    winner = _column(winner_num, ("padded" if kw == "padded" else "text") if mixed else kw).astype(object)
    ties = sorted(TIE_SPELLINGS)
    for i in np.flatnonzero(truth == 0):
        word = ties[int(rng.integers(0, len(ties)))]
        winner[i] = rng.choice([word, word.upper(), f" {word.title()} "])
    df = pd.DataFrame({"annotator": "x", "item_a": _column(a, ka), "item_b": _column(b, kb), "winner": winner})
    if mixed or kw in ("text", "padded"):
        df["winner"] = df["winner"].astype(str)
    path = tmp_path / "c.parquet"
    df.to_parquet(path, index=False)
    got = read_table(path, INPUTS["comparisons"]).df
    np.testing.assert_array_equal(got["outcome"].to_numpy(float), truth)
    assert got["item_a"].tolist() == [str(v) for v in a]


def test_an_item_named_like_a_tie_is_that_item(tmp_path: Path) -> None:
    df = pd.DataFrame({"annotator": "u", "item_a": ["draw", "x"], "item_b": ["y", "draw"], "winner": ["draw", "Draw "]})
    df.to_csv(tmp_path / "c.csv", index=False)
    got = read_table(tmp_path / "c.csv", INPUTS["comparisons"]).df
    assert got["outcome"].tolist() == [1.0, 0.0]  # exact id first; "Draw " (not the id) is a tie


def test_an_unknown_winner_is_named(tmp_path: Path) -> None:
    df = pd.DataFrame({"annotator": "u", "item_a": [1, 2], "item_b": [3, 4], "winner": ["1", "nobody"]})
    df.to_csv(tmp_path / "c.csv", index=False)
    with pytest.raises(InputError, match="neither item_a, item_b nor a tie") as err:
        read_table(tmp_path / "c.csv", INPUTS["comparisons"])
    assert "row 2" in str(err.value) or "rows [2]" in str(err.value) or "2" in str(err.value)


@pytest.mark.parametrize("boms", [1, 2, 3])
@pytest.mark.parametrize("kind", ["labels", "comparisons"])
def test_leading_byte_order_marks_never_reach_a_column_name(tmp_path: Path, boms: int, kind: str) -> None:
    """One, two or three UTF-8 BOMs before the header: the first column keeps its name (annotator is optional in a
    comparisons table, so a BOM glued to it would drop it without a word)."""
    text = (
        "annotator,item_a,item_b,outcome\nu1,a,b,1\nu2,b,c,-1\n"
        if kind == "comparisons"
        else "task,worker,label\nt1,w1,0\nt1,w2,1\n"
    )
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xef\xbb\xbf" * boms + text.encode())
    got = read_table(path, INPUTS[kind]).df
    first = text.split(",", 1)[0]
    assert first in got.columns and got[first].notna().all()
