"""Generated families of date-partitioned label and comparison folders, and the edits an incremental run must follow."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from crowdflow.ranking.folded import ROW_QUANTILES
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


def comparisons_family(
    seed: int,
    n_days: int = 4,
    n_items: int = 15,
    per_day: int = 60,
    outcomes: str = "real",
    weights: str | None = None,
    groups: int = 1,
) -> list[pd.DataFrame]:
    """One frame of comparisons per day, with a few planted outliers.

    ``outcomes``: ``real`` (graded, 3 decimals), ``sign`` (wins/losses/ties ±1/0) or ``int`` (−3..3); ``weights``:
    none, ``int`` (1-4) or ``real``; ``groups`` > 1 splits the items into that many groups never compared with each
    other (a disconnected graph), each connected by a spanning path from the first day.
    """
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=n_items)
    group = np.arange(n_items) % groups
    members = [np.flatnonzero(group == g) for g in range(groups)]
    out = []
    for d in range(n_days):
        g = rng.integers(0, groups, per_day)
        i, j = np.empty(per_day, dtype=np.int64), np.empty(per_day, dtype=np.int64)
        for k, m in enumerate(members):
            at = np.flatnonzero(g == k)
            a = rng.integers(0, m.size, at.size)
            i[at], j[at] = m[a], m[(a + 1 + rng.integers(0, m.size - 1, at.size)) % m.size]
        if d == 0:  # a spanning path per group so each group is connected from the first day
            path = [(m[t], m[t + 1]) for m in members for t in range(m.size - 1)]
            i[: len(path)], j[: len(path)] = np.asarray(path).T
        y = theta[i] - theta[j] + 0.3 * rng.normal(size=per_day)
        flip = rng.random(per_day) < 0.05
        y[flip] = -3 * np.sign(y[flip])
        frame = pd.DataFrame(
            {
                "annotator": [f"a{k}" for k in rng.integers(0, 6, per_day)],
                "item_a": [f"it{v}" for v in i],
                "item_b": [f"it{v}" for v in j],
                "outcome": np.round(y, 3),
            }
        )
        if outcomes == "sign":
            frame["outcome"] = np.sign(np.round(y)).astype(np.int64)
        elif outcomes == "int":
            frame["outcome"] = np.clip(np.round(y), -3, 3).astype(np.int64)
        if weights == "int":
            frame["weight"] = rng.integers(1, 5, per_day).astype(np.float64)
        elif weights == "real":
            frame["weight"] = np.round(rng.uniform(0.2, 2.0, per_day), 4)
        out.append(frame)
    return out


def write_day(folder: Path, day: int, df: pd.DataFrame) -> Path:
    """``<folder>/day=2026-11-<day>/part-0.parquet``."""
    d = folder / f"day=2026-11-{day + 1:02d}"
    d.mkdir(parents=True, exist_ok=True)
    path = d / "part-0.parquet"
    df.to_parquet(path, index=False)
    return path


#: components columns a folded run reproduces exactly (crowdflow/ranking/folded.py)
EXACT = ["component", "n_items", "n_rows", "n_edges", "cycle_dim", "n_triangles",
         "n_cyclic_triangles", "tsr", "harmonic_dim", "n_undetectable"]  # fmt: skip
SHARES = ["total_inconsistency", "bicycle_share", "curl_share", "harmonic_share"]


def per_pair(residuals: pd.DataFrame) -> pd.DataFrame:
    """A full run's per-row residuals summed per pair (lo < hi in text order, outcomes oriented lo → hi)."""
    a, b = residuals["item_a"].astype(str), residuals["item_b"].astype(str)
    flip = (a > b).to_numpy()
    sign = np.where(flip, -1.0, 1.0)
    w, y = residuals["weight"].to_numpy(dtype=float), residuals["outcome"].to_numpy(dtype=float) * sign
    frame = pd.DataFrame(
        {"lo": np.where(flip, b, a), "hi": np.where(flip, a, b), "n": 1, "w": w, "s": w * y, "q": w * y * y,
         "rss": w * residuals["residual"].to_numpy(dtype=float) ** 2,
         "fitted": residuals["fitted"].to_numpy(dtype=float) * sign}
    )  # fmt: skip
    sums = frame.groupby(["lo", "hi"], sort=True)[["n", "w", "s", "q", "rss"]].sum()
    return sums.join(frame.groupby(["lo", "hi"])["fitted"].first()).reset_index()


def close(got: np.ndarray, want: np.ndarray, rel: float, what: str) -> None:
    scale = max(1.0, float(np.nanmax(np.abs(want), initial=0.0)))
    assert np.array_equal(np.isnan(got), np.isnan(want)), what
    assert float(np.nanmax(np.abs(got - want), initial=0.0)) <= rel * scale, what


#: comparison families of the folded-run tests (keyword arguments of :func:`comparisons_family`)
FAMILIES = {
    "sign": {"outcomes": "sign"},
    "int-weights-disconnected": {"outcomes": "int", "weights": "int", "groups": 2},
    "real": {"outcomes": "real"},
    "real-weights-disconnected": {"outcomes": "real", "weights": "real", "groups": 3},
}


def assert_folded_tables(
    got_tables: Mapping[str, pd.DataFrame], want_tables: Mapping[str, pd.DataFrame], integral: bool, what: str
) -> None:
    """A folded run's tables against a full least-squares run's (docs/methods/ranking.md §2.5): ``ranking`` bit
    for bit when ``integral`` (else scores ≤ 1e-12 relative), ``components`` column by column, ``pair_residuals``
    equal to the full run's ``residuals`` summed per pair."""
    assert sorted(got_tables) == ["components", "pair_residuals", "ranking"], what
    assert sorted(want_tables) == ["components", "ranking", "residuals"], what
    got, want = got_tables["ranking"], want_tables["ranking"]
    if integral:
        pd.testing.assert_frame_equal(got, want, check_exact=True, obj=f"ranking {what}")
    else:
        pd.testing.assert_frame_equal(got.drop(columns="score"), want.drop(columns="score"), obj=what)
        close(got["score"].to_numpy(), want["score"].to_numpy(), 1e-12, f"scores {what}")
    cg, cw = got_tables["components"], want_tables["components"]
    assert list(cg.columns) == list(cw.columns), what
    pd.testing.assert_frame_equal(cg[EXACT], cw[EXACT], check_exact=True, obj=f"components {what}")
    for col in SHARES:  # fractions of Σ w·y²: another summation order
        close(cg[col].to_numpy(dtype=float), cw[col].to_numpy(dtype=float), 1e-12, f"{col} {what}")
    for col in ("weight", "fiedler_value"):  # functions of the Laplacian: exact when the weights are integers
        close(cg[col].to_numpy(), cw[col].to_numpy(), 0.0 if integral else 1e-12, f"{col} {what}")
    assert cg[list(ROW_QUANTILES)].isna().all().all() and cg["missing_reason"].str.contains("pair_residuals").all()
    pairs, ref = got_tables["pair_residuals"], per_pair(want_tables["residuals"])
    assert pairs[["lo", "hi"]].astype(str).values.tolist() == ref[["lo", "hi"]].values.tolist(), what
    assert (pairs["n"].to_numpy() == ref["n"].to_numpy()).all(), what
    for col in ("w", "s", "q"):
        close(pairs[col].to_numpy(), ref[col].to_numpy(), 0.0 if integral else 1e-12, f"{col} {what}")
    close(pairs["fitted"].to_numpy(), ref["fitted"].to_numpy(), 1e-12, f"fitted {what}")
    close(pairs["rss"].to_numpy(), ref["rss"].to_numpy(), 1e-9, f"rss {what}")


def restyle_ids(days: list[pd.DataFrame], style: str, seed: int = 0) -> list[pd.DataFrame]:
    """The days with other ids: ``text`` (as generated: task ids grow day by day), ``int`` (task and worker ids as
    integers) or ``shuffled`` (task ids random text, so a new day's tasks sort among the old ones)."""
    if style == "text":
        return days
    tasks = pd.unique(pd.concat([d["task"] for d in days]).astype(str))
    workers = pd.unique(pd.concat([d["worker"] for d in days]).astype(str))
    rng = np.random.default_rng(seed)
    if style == "int":
        t_map = {t: int(k) * 7 + 3 for k, t in enumerate(tasks)}
        w_map: dict[str, object] = {w: int(k) + 10 for k, w in enumerate(workers)}
    else:
        t_map = {t: f"q{v:08x}" for t, v in zip(tasks, rng.choice(16**8, tasks.size, replace=False), strict=True)}
        w_map = {w: w for w in workers}
    return [d.assign(task=d["task"].astype(str).map(t_map), worker=d["worker"].astype(str).map(w_map)) for d in days]


def reasons_by_column(text: object) -> dict[str, set[str]]:
    """A ``missing_reason`` cell as column → reasons (the writer's ``cols: reason; cols: reason`` form)."""
    out: dict[str, set[str]] = {}
    if not isinstance(text, str):
        return out
    for clause in text.split("; "):
        cols, why = clause.split(": ", 1)
        for c in cols.split(","):
            out.setdefault(c, set()).add(why)
    return out


def assert_folded_skills_tables(
    got_tables: Mapping[str, pd.DataFrame], want_tables: Mapping[str, pd.DataFrame], what: str
) -> None:
    """A folded majority-vote run's tables against a full ``method: mv`` run's (docs/methods/skills.md §4.4): every
    table and column equal bit for bit, except the distinct-co-labeller columns (``n_partners``; ``n_edges``,
    ``d_max``, ``D_sum``), which are NaN with their reason; the other reasons are the full run's."""
    from crowdflow.skills.reasons import PARTITIONED_MISSING

    assert sorted(got_tables) == sorted(want_tables), what
    for name, want in want_tables.items():
        got = got_tables[name]
        assert list(got.columns) == list(want.columns), f"{name} {what}"
        skip = set(PARTITIONED_MISSING.get(name, ()))
        same = [c for c in want.columns if c not in skip and c != "missing_reason"]
        pd.testing.assert_frame_equal(got[same], want[same], check_exact=True, obj=f"{name} {what}")
        for c in skip:
            assert got[c].isna().all(), f"{name}.{c} {what}"
        if "missing_reason" in want.columns:
            for g, w in zip(got["missing_reason"], want["missing_reason"], strict=True):
                # the column missing_reason itself is named where it was empty when a status reason was added
                # (the full run's non-ok workers): in a folded run it already holds the co-labeller reason
                rg = {k: v for k, v in reasons_by_column(g).items() if k not in skip | {"missing_reason"}}
                rw = {k: v for k, v in reasons_by_column(w).items() if k not in skip | {"missing_reason"}}
                assert rg == rw, f"{name} missing_reason {what}: {g!r} vs {w!r}"
                assert all("co-labellers" in " ".join(reasons_by_column(g)[c]) for c in skip), what
