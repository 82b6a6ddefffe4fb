"""Global ranking from raw id columns vs Evalica, over a family of input shapes (issue #19, ranking row).

Each shape is one comparison table as a user hands it over: id columns of a given kind (Arrow-backed strings, as
the readers give; Python ``str`` objects; integers), a number of items (10^2-10^5), uniform or Zipf-skewed item
popularity, ±1 outcomes with ties (0) or graded outcomes, 10^5-10^7 rows. For every shape the same process times
``crowdflow.ranking.fit_hodgerank`` (HodgeRank least squares from the DataFrame, with and without its Hodge
diagnostics) and Evalica 0.4's Bradley–Terry and Elo on the same id columns and outcomes (winner = sign of the
outcome, 0 a draw), each the best of ``--reps`` runs. Evalica BT builds a dense n × n matrix: at 10^5 items
(80 GB) it cannot run, and Elo is the peer there. With ``--before PATH`` the same shape is also timed, right
after, in a child process importing the crowdflow at PATH (e.g. the main checkout): before vs after in one run.
The table is sorted by the worst ratio first.

    python -m benchmarks.ranking_ids --before /work/main     # the family below; results/ranking_ids.md
    python -m benchmarks.ranking_ids --quick                  # 10^5 rows only
    python -m benchmarks.ranking_ids --deciding --reps 3 --before /work/main   # 10^5-item cells, scores only
"""

from __future__ import annotations

import os

# single-threaded BLAS, as in the other benchmarks: on this shared 2-core host a threaded OpenBLAS call under
# contention took 0.2-1.4 s for a 1,000 x 1,000 Cholesky that takes 0.02-0.03 s on one thread
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

# the --worker child runs this file with PYTHONPATH = the other checkout: its benchmarks.timing and crowdflow
from benchmarks.timing import best_of  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "ranking_ids.md"


#: (rows, items, ids, popularity, outcomes): the family of shapes
FAMILY: list[tuple[int, int, str, str, str]] = [
    *[
        (m, n, ids, pop, out)
        for m in (100_000, 1_000_000)
        for n in (100, 1_000)
        for ids in ("arrow", "object", "int")
        for pop, out in (("uniform", "pm1_ties"), ("zipf", "graded"))
    ],
    (1_000_000, 100_000, "arrow", "uniform", "pm1_ties"),
    (1_000_000, 100_000, "int", "zipf", "graded"),
    (10_000_000, 1_000, "arrow", "uniform", "pm1_ties"),
    (10_000_000, 1_000, "object", "zipf", "graded"),
    (10_000_000, 100_000, "arrow", "uniform", "pm1_ties"),
    (10_000_000, 100_000, "arrow", "zipf", "graded"),
]
#: Evalica BT's dense n × n matrix is not attempted above this many items (10^5 items: 80 GB)
BT_MAX_ITEMS = 20_000


def comparisons(m: int, n: int, ids: str, outcomes: str, seed: int = 0, popularity: str = "uniform") -> pd.DataFrame:
    """``m`` comparisons of ``n`` items, ids of kind ``ids`` (arrow | object | int), ``outcomes`` (pm1 | pm1_ties |
    graded), item popularity uniform or Zipf (``p_k ∝ k^-1.1``; a self-pair's second item moves to the next one)."""
    rng = np.random.default_rng(seed)
    if popularity == "zipf":
        p = 1.0 / np.arange(1, n + 1) ** 1.1
        p /= p.sum()
        a = rng.choice(n, m, p=p)
        b = rng.choice(n, m, p=p)
        b = np.where(a == b, (a + 1) % n, b)
    else:
        a = rng.integers(0, n, m)
        b = (a + 1 + rng.integers(0, n - 1, m)) % n
    theta = rng.normal(size=n)
    y = theta[a] - theta[b] + rng.normal(size=m)
    if outcomes == "pm1":
        out = np.sign(y)
    elif outcomes == "pm1_ties":
        out = np.where(np.abs(y) < 0.25, 0.0, np.sign(y))  # ~15 % ties
    else:
        out = np.round(y, 2)
    if ids == "int":
        col_a, col_b = pd.Series(a), pd.Series(b)
    else:
        names = np.array([f"item-{k:06d}" for k in range(n)], dtype=object)
        dtype = "string[pyarrow]" if ids == "arrow" else object
        col_a, col_b = pd.Series(names[a], dtype=dtype), pd.Series(names[b], dtype=dtype)
    return pd.DataFrame({"item_a": col_a, "item_b": col_b, "outcome": out})


def _ours(df: pd.DataFrame, reps: int) -> tuple[float, float]:
    from crowdflow.ranking import fit_hodgerank

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = best_of(lambda: fit_hodgerank(df), reps)
        bare = best_of(lambda: fit_hodgerank(df, diagnostics=False), reps)
    return full, bare


def _before(path: str, shape: tuple[int, int, str, str, str], reps: int) -> tuple[float, float]:
    """The same shape timed in a child process whose ``crowdflow`` is the one at ``path``."""
    env = {**os.environ, "PYTHONPATH": path}
    args = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps([*shape, reps])]
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=True, cwd=path)
    full, bare = json.loads(out.stdout.strip().splitlines()[-1])
    return float(full), float(bare)


def _worker(spec: str) -> None:
    m, n, ids, pop, outcomes, reps, *mode = json.loads(spec)
    df = comparisons(m, n, ids, outcomes, popularity=pop)
    if mode == ["bare"]:
        from crowdflow.ranking import fit_hodgerank

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            print(json.dumps(best_of(lambda: fit_hodgerank(df, diagnostics=False), reps)))
        return
    print(json.dumps(_ours(df, reps)))


#: the cells that decide issue #19's two open ranking targets: every shape of the family at 10^5 items
DECIDING = [s for s in FAMILY if s[1] == 100_000]


def _bare_in(path: str, shape: tuple[int, int, str, str, str], reps: int) -> float:
    """``fit_hodgerank(df, diagnostics=False)`` on ``shape``, best of ``reps``, in a child importing crowdflow at
    ``path`` (each side in a fresh process: neither inherits the other's heap)."""
    env = {**os.environ, "PYTHONPATH": path}
    args = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps([*shape, reps, "bare"])]
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=True, cwd=path)
    return float(json.loads(out.stdout.strip().splitlines()[-1]))


def _elo(shape: tuple[int, int, str, str, str], reps: int) -> float:
    """Evalica Elo on ``shape``'s id columns and winners, best of ``reps``."""
    import evalica

    m, n, ids, pop, outcomes = shape
    df = comparisons(m, n, ids, outcomes, popularity=pop)
    win = np.where(
        df["outcome"] > 0, evalica.Winner.X, np.where(df["outcome"] < 0, evalica.Winner.Y, evalica.Winner.Draw)
    )
    winners = pd.Series(win)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return best_of(lambda: evalica.elo(df["item_a"], df["item_b"], winners), reps)


def run_deciding(reps: int, before: str | None) -> str:
    """Scores only (``diagnostics=False``) on the 10^5-item cells: before, after and Evalica Elo, best of ``reps``
    each (Elo once at 10^7 rows), one cell after the other; a markdown table with the load averages at start and
    end."""
    here = str(Path(__file__).resolve().parents[1])
    load0 = os.getloadavg()
    lines = [
        "| rows | items | ids | popularity | outcomes | before (s) | after (s) | Evalica Elo (s) | before / Elo | "
        "after / Elo | after / before |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for shape in DECIDING:
        m, n, ids, pop, outcomes = shape
        elo = _elo(shape, reps if m < 10_000_000 else 1)  # Elo: informative only at 10^7 rows (40-80 s a run)
        after = _bare_in(here, shape, reps)
        old = _bare_in(before, shape, reps) if before else None
        f = lambda x: "—" if x is None else f"{x:.3f}"  # noqa: E731
        r = lambda x, y: "—" if x is None or y is None else f"{x / y:.2f}"  # noqa: E731
        line = (
            f"| {m:.0e} | {n:,} | {ids} | {pop} | {outcomes} | {f(old)} | {after:.3f} | {elo:.3f} | {r(old, elo)} | "
            f"{r(after, elo)} | {r(after, old)} |"
        )
        lines.append(line)
        print(line, flush=True)
    load1 = os.getloadavg()
    lines.append(
        f"\nLoad average (1, 5, 15 min) at start {load0[0]:.2f}, {load0[1]:.2f}, {load0[2]:.2f}; "
        f"at end {load1[0]:.2f}, {load1[1]:.2f}, {load1[2]:.2f}.\n"
    )
    return "\n".join(lines) + "\n"


def run(family: list[tuple[int, int, str, str, str]], reps: int, before: str | None) -> str:
    import evalica

    rows: list[tuple[float, str]] = []
    worst_full = worst_bt = worst_elo = 0.0
    ten7: list[str] = []
    for m, n, ids, pop, outcomes in family:
        df = comparisons(m, n, ids, outcomes, popularity=pop)
        win = np.where(
            df["outcome"] > 0, evalica.Winner.X, np.where(df["outcome"] < 0, evalica.Winner.Y, evalica.Winner.Draw)
        )
        winners = pd.Series(win)
        r = reps if m < 10_000_000 else max(1, reps - 1)
        ours, bare = _ours(df, r)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            bt = (
                best_of(lambda: evalica.bradley_terry(df["item_a"], df["item_b"], winners), r)
                if n <= BT_MAX_ITEMS
                else None
            )
            elo = (
                best_of(lambda: evalica.elo(df["item_a"], df["item_b"], winners), r)
                if bt is None or m < 10_000_000
                else None
            )
        old = _before(before, (m, n, ids, pop, outcomes), r) if before else None
        peer = bt if bt is not None else elo
        assert peer is not None
        if bt is not None:
            worst_full, worst_bt = max(worst_full, ours / bt), max(worst_bt, bare / bt)
        if elo is not None:
            worst_elo = max(worst_elo, bare / elo)
        f = lambda x: "—" if x is None else f"{x:.3f}"  # noqa: E731
        ratio = lambda x, y: "—" if x is None or y is None else f"{x / y:.2f}"  # noqa: E731
        line = (
            f"| {m:.0e} | {n:,} | {ids} | {pop} | {outcomes} | {f(old[1] if old else None)} | {bare:.3f} | "
            f"{f(old[0] if old else None)} | {ours:.3f} | {f(bt) if bt is not None else 'not run (dense n×n)'} | "
            f"{f(elo)} | {ratio(bare, bt)} | {ratio(ours, bt)} | {ratio(bare, elo)} |"
        )
        rows.append((bare / peer, line))
        if m >= 10_000_000:
            ten7.append(f"{n:,} items, {ids} ids, {pop}: scores only {bare:.2f} s, with diagnostics {ours:.2f} s")
        print(line, flush=True)
    rows.sort(key=lambda t: -t[0])
    head = (
        "| rows | items | ids | popularity | outcomes | before: scores only (s) | scores only (s) | "
        "before: with diagnostics (s) | with diagnostics (s) | Evalica BT (s) | Evalica Elo (s) | scores only / BT | "
        "with diagnostics / BT | scores only / Elo |"
    )
    lines = [
        "# Global ranking from raw id columns vs Evalica (family of shapes)\n",
        "`python -m benchmarks.ranking_ids` on this machine (2 cores, shared), one process, single-threaded BLAS; "
        f"best of {reps} run(s) per cell ({max(1, reps - 1)} at 10^7 rows). Ours: `fit_hodgerank(df)` (least squares "
        "+ Hodge diagnostics, from the DataFrame) and `fit_hodgerank(df, diagnostics=False)` (scores only); "
        "'before' is the same shape in a child process importing the crowdflow at "
        f"`{before}` right after. Peer: Evalica 0.4 `bradley_terry` and `elo` on the same two id columns and "
        "outcomes (winner = sign, 0 a draw); BT is not run above "
        f"{BT_MAX_ITEMS:,} items (its dense n × n matrix: 80 GB at 10^5 items), Elo is the peer there (not run at "
        "10^7 rows where BT runs). Rows sorted by scores only / peer (BT, else Elo), worst first.\n",
        head,
        "|" + "---|" * (head.count("|") - 1),
        *[line for _, line in rows],
        f"\n**Worst over the family:** scores only / Evalica BT = {worst_bt:.2f}, / Evalica Elo = {worst_elo:.2f}; "
        f"with the Hodge diagnostics (Fiedler values, triangles, curl split: what Evalica does not compute) / BT = "
        f"{worst_full:.2f}.\n",
        "**10^7 comparisons:** " + "; ".join(ten7) + ".\n" if ten7 else "",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10^5 rows only")
    ap.add_argument("--reps", type=int, default=2, help="runs per cell; the best is reported (one fewer at 10^7)")
    ap.add_argument("--before", default=None, help="path of another checkout whose crowdflow is timed alongside")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument(
        "--deciding",
        action="store_true",
        help="only the 10^5-item cells, scores only, before / after / Elo (printed, not written to --out)",
    )
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        _worker(args.worker)
        return ""
    if args.deciding:
        text = run_deciding(args.reps, args.before)
        print(text)
        return text
    family = [s for s in FAMILY if s[0] <= 100_000] if args.quick else FAMILY
    text = run(family, args.reps, args.before)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return text


if __name__ == "__main__":
    main()
