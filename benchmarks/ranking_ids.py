"""Global ranking from raw id columns vs Evalica, over a family of input shapes (issue #19, ranking row).

Each shape is one comparison table as a user hands it over: id columns of a given kind (Arrow-backed strings, as
the readers give; Python ``str`` objects; integers), a number of items, ±1 or graded outcomes. For every shape the
same process times ``crowdflow.ranking.fit_hodgerank`` (HodgeRank least squares from the DataFrame, with and without its Hodge
diagnostics) and Evalica 0.4's Bradley–Terry and Elo on the same id columns and outcomes (winner = sign of the
outcome, 0 a draw), each the best of ``--reps`` runs. The table reports the ratio ours / Evalica BT per shape and
the worst ratio over the family (what a user on an unknown shape should expect).

    python -m benchmarks.ranking_ids                 # 10^5 and 10^6 rows, 30 shapes; results/ranking_ids.md
    python -m benchmarks.ranking_ids --rows 1e5      # a quick look
"""

from __future__ import annotations

import os

# single-threaded BLAS, as in the other benchmarks: on this shared 2-core host a threaded OpenBLAS call under
# contention took 0.2-1.4 s for a 1,000 x 1,000 Cholesky that takes 0.02-0.03 s on one thread
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import itertools  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from benchmarks.timing import best_of  # noqa: E402
from crowdflow.ranking import fit_hodgerank  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "ranking_ids.md"


def comparisons(m: int, n: int, ids: str, outcomes: str, seed: int = 0) -> pd.DataFrame:
    """``m`` comparisons of ``n`` items, ids of kind ``ids`` (arrow | object | int), ``outcomes`` (pm1 | graded)."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, n, m)
    b = (a + 1 + rng.integers(0, n - 1, m)) % n
    theta = rng.normal(size=n)
    y = theta[a] - theta[b] + rng.normal(size=m)
    out = np.sign(y) if outcomes == "pm1" else np.round(y, 2)
    if ids == "int":
        col_a, col_b = pd.Series(a), pd.Series(b)
    else:
        names = np.array([f"item-{k:06d}" for k in range(n)], dtype=object)
        dtype = "string[pyarrow]" if ids == "arrow" else object
        col_a, col_b = pd.Series(names[a], dtype=dtype), pd.Series(names[b], dtype=dtype)
    return pd.DataFrame({"item_a": col_a, "item_b": col_b, "outcome": out})


def run(rows: list[int], reps: int) -> str:
    import evalica

    lines = [
        "# Global ranking from raw id columns vs Evalica (family of shapes)\n",
        "`python -m benchmarks.ranking_ids` on this machine (2 cores, shared), one process, single-threaded BLAS; "
        "best of "
        f"{reps} run(s) per cell. Ours: `fit_hodgerank(df)` (least squares + Hodge diagnostics, from the DataFrame) "
        "and `fit_hodgerank(df, diagnostics=False)` (scores only). "
        "Peer: Evalica 0.4 `bradley_terry` and `elo` on the same two id columns and outcomes (winner = sign).\n",
        "| rows | items | ids | outcomes | ours (s) | ours, scores only (s) | Evalica BT (s) | Evalica Elo (s) "
        "| ours / BT | scores only / BT | scores only / Elo |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    worst_full = worst_bt = worst_elo = 0.0
    for m, n, ids, outcomes in itertools.product(
        rows, (100, 1_000, 10_000), ("arrow", "object", "int"), ("pm1", "graded")
    ):
        if n >= m // 10:
            continue
        df = comparisons(m, n, ids, outcomes)
        win = np.where(
            df["outcome"] > 0, evalica.Winner.X, np.where(df["outcome"] < 0, evalica.Winner.Y, evalica.Winner.Draw)
        )
        winners = pd.Series(win)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ours = best_of(lambda: fit_hodgerank(df), reps)
            bare = best_of(lambda: fit_hodgerank(df, diagnostics=False), reps)
            bt = best_of(lambda: evalica.bradley_terry(df["item_a"], df["item_b"], winners), reps)
            elo = best_of(lambda: evalica.elo(df["item_a"], df["item_b"], winners), reps)
        worst_full = max(worst_full, ours / bt)
        worst_bt, worst_elo = max(worst_bt, bare / bt), max(worst_elo, bare / elo)
        lines.append(
            f"| {m:.0e} | {n:,} | {ids} | {outcomes} | {ours:.3f} | {bare:.3f} | {bt:.3f} | {elo:.3f} | "
            f"{ours / bt:.2f} | {bare / bt:.2f} | {bare / elo:.2f} |"
        )
        print(lines[-1], flush=True)
    lines.append(
        f"\n**Worst over the family:** scores only / Evalica BT = {worst_bt:.2f}, / Evalica Elo = {worst_elo:.2f}; "
        f"with the Hodge diagnostics (Fiedler values, triangles, curl split: what Evalica does not compute) / BT = "
        f"{worst_full:.2f}.\n"
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1e5,1e6", help="comma-separated row counts (default 1e5,1e6)")
    ap.add_argument("--reps", type=int, default=2, help="runs per cell; the best is reported")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    text = run([int(float(r)) for r in args.rows.split(",")], args.reps)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return text


if __name__ == "__main__":
    main()
