"""Blocked DJAM on an agents dataset read file by file (crowdflow/personal_models/partitioned.py, issue #21).

The claim: for any agents table cut into files (an agent's rows may span files), the partitioned fit equals
:func:`djam_blocked` on the whole table, and refuses what :func:`build_problem` refuses. Checked over a generated
family: three losses (features as columns or an ``x`` vector; logistic 0/1 or ±1), agents without data, geometric,
chain, star, dense random and disconnected graphs, 1–5 files, 1–6 blocks, both engines.
"""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from crowdflow.contracts.errors import DegenerateInput, InputError
from crowdflow.executors import inline_executor
from crowdflow.personal_models import build_problem, djam_blocked
from crowdflow.personal_models.partitioned import fit_personal_models_partitioned

LOSS_DEFAULTS = {"reg": 0.5, "prior_mean": 0.0, "huber_c": 1.0, "huber_kappa": 1.345, "feature_cols": None}


def _graph(rng: np.random.Generator, ids: list[str], shape: str) -> pd.DataFrame:
    n = len(ids)
    if shape == "chain":
        pairs = [(i, i + 1) for i in range(n - 1)]
    elif shape == "star":
        pairs = [(0, i) for i in range(1, n)]
    elif shape == "dense":
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.4]
        pairs += [(i, i + 1) for i in range(n - 1)]
    elif shape == "two_parts":  # two components (allow_disconnected)
        half = n // 2
        pairs = [(i, i + 1) for i in range(half - 1)] + [(i, i + 1) for i in range(half, n - 1)]
    else:  # geometric plus a chain (connected)
        pos = rng.random((n, 2))
        d = np.linalg.norm(pos[:, None] - pos[None], axis=2)
        iu, ju = np.nonzero(np.triu(d < 0.35, 1))
        pairs = list(zip(iu.tolist(), ju.tolist(), strict=True)) + [(i, i + 1) for i in range(n - 1)]
    pairs = sorted(set(pairs))
    return pd.DataFrame(
        {
            "source": [ids[i] for i, _ in pairs],
            "target": [ids[j] for _, j in pairs],
            "weight": rng.uniform(0.2, 2.0, len(pairs)),
        }
    )


def _case(seed: int) -> dict[str, Any]:
    """One member of the family: tables, files, options."""
    rng = np.random.default_rng(seed)
    loss = ["quadratic", "huber", "logistic"][seed % 3]
    n = int(rng.integers(2, 28))
    p = int(rng.integers(1, 4))
    vector = loss != "huber" and bool(rng.random() < 0.3)
    pm1 = bool(rng.random() < 0.5)
    ids = [f"w{i:03d}" if rng.random() < 0.8 else str(1000 + i) for i in range(n)]
    rows = []
    for a in ids:
        k = int(rng.integers(0, 7))
        for _ in range(k):
            x = rng.normal(size=p)
            if loss == "logistic":
                y = float(rng.random() < 1 / (1 + np.exp(-x.sum())))
                y = 2 * y - 1 if pm1 else y
            else:
                y = float(x.sum() + rng.standard_t(3))
            row: dict[str, Any] = {"agent": a, "y": y, "weight": float(rng.uniform(0.5, 2))}
            row.update({"x": x.tolist()} if vector else {f"f{j}": x[j] for j in range(p)})
            rows.append(row)
        if k == 0:  # an agent without data: its prior pins it down
            rows.append({"agent": a, "y": np.nan, "weight": 1.0, **({"x": None} if vector else {})})
    df = pd.DataFrame(rows).sample(frac=1.0, random_state=seed).reset_index(drop=True)
    shape = ["geometric", "chain", "star", "dense", "two_parts"][int(rng.integers(0, 5))] if n > 3 else "chain"
    edges = _graph(rng, ids, shape)
    n_files = int(rng.integers(1, 6))
    cuts = np.sort(rng.integers(0, len(df) + 1, n_files - 1))
    files = np.split(np.arange(len(df)), cuts)
    return {
        "df": df,
        "edges": edges,
        "files": [df.iloc[f] for f in files],
        "args": {**LOSS_DEFAULTS, "loss": loss, "reg": float(rng.choice([0.1, 0.5, 2.0]))},
        "allow": shape == "two_parts",
        "n_blocks": int(rng.integers(1, 7)),
        "engine": "simulation" if rng.random() < 0.25 else "matching",
        "seed": seed,
    }


def _write(files: list[pd.DataFrame], folder: Path) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, f in enumerate(files):
        path = folder / f"in-{k}.parquet"
        f.to_parquet(path)
        paths.append(str(path))
    return paths


def _fit(case: dict[str, Any], paths: list[str], folder: Path, executor: Any = inline_executor, **kw: Any) -> Any:
    return fit_personal_models_partitioned(
        paths,
        pd.read_parquet,
        case["edges"],
        executor,
        str(folder),
        loss_args=case["args"],
        allow_disconnected=case["allow"],
        n_blocks=case["n_blocks"],
        seed=case["seed"],
        tol=1e-7,
        engine=case["engine"],
        **kw,
    )


@pytest.mark.parametrize("seed", [*range(12), *(pytest.param(s, marks=pytest.mark.slow) for s in range(12, 60))])
def test_the_partitioned_fit_equals_blocked_djam_on_the_whole_table(seed: int, tmp_path: Path) -> None:
    case = _case(seed)
    prob = build_problem(case["df"], case["edges"], allow_disconnected=case["allow"], **case["args"])
    ref = djam_blocked(prob, n_blocks=case["n_blocks"], seed=seed, tol=1e-7, engine=case["engine"])
    got = _fit(case, _write(case["files"], tmp_path / "in"), tmp_path / "blocks")
    assert ref.converged and got.converged
    # the same rounds and read-outs: equal models, copies, certificate and trace
    np.testing.assert_allclose(got.theta, ref.theta, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(got.copies, ref.copies, rtol=1e-12, atol=1e-13)
    assert got.iterations == ref.iterations and got.metadata["sweeps"] == ref.metadata["sweeps"]
    assert got.error_bound == pytest.approx(ref.error_bound, rel=1e-9, abs=1e-15)
    pd.testing.assert_frame_equal(got.diagnostics, ref.diagnostics, rtol=1e-9, atol=1e-14)
    pd.testing.assert_frame_equal(got.personal_models, ref.personal_models, rtol=1e-10, atol=1e-12)
    assert got.metadata["files"] == len(case["files"]) and got.metadata["passes"] >= 3


def test_workers_in_any_order_give_the_same_fit(tmp_path: Path) -> None:
    case = _case(4)
    paths = _write(case["files"], tmp_path / "in")
    one = _fit(case, paths, tmp_path / "a")
    with ThreadPoolExecutor(3) as pool:
        two = _fit(case, paths, tmp_path / "b", executor=lambda fn, items: list(pool.map(fn, items)))
    np.testing.assert_array_equal(one.theta, two.theta)


def test_a_round_budget_stops_with_a_warning_like_the_in_memory_fit(tmp_path: Path) -> None:
    case = _case(3)
    prob = build_problem(case["df"], case["edges"], allow_disconnected=case["allow"], **case["args"])
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        ref = djam_blocked(prob, n_blocks=case["n_blocks"], seed=3, tol=1e-14, max_rounds=60, engine=case["engine"])
    with pytest.warns(RuntimeWarning, match="without certifying"):
        got = _fit({**case}, _write(case["files"], tmp_path / "in"), tmp_path / "b", max_rounds=60)
    assert not got.converged and got.iterations == ref.iterations
    np.testing.assert_allclose(got.theta, ref.theta, rtol=1e-12, atol=1e-13)


def _tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    agents = pd.DataFrame({"agent": ["a", "a", "b", "c", "c"], "y": [1.0, 0.0, 1.0, 0.0, 1.0], "f": [1, 2, 3, 4, 5.0]})
    edges = pd.DataFrame({"source": ["a", "b"], "target": ["b", "c"], "weight": [1.0, 1.0]})
    return agents, edges


def _run(files: list[pd.DataFrame], edges: pd.DataFrame, tmp_path: Path, **args: Any) -> Any:
    case = {
        "edges": edges,
        "args": {**LOSS_DEFAULTS, **args},
        "allow": False,
        "n_blocks": 2,
        "engine": "matching",
        "seed": 0,
    }
    return _fit(case, _write(files, tmp_path / "in"), tmp_path / "blocks")


def test_files_that_disagree_on_the_features_are_named(tmp_path: Path) -> None:
    agents, edges = _tables()
    other = agents.rename(columns={"f": "g"})
    with pytest.raises(
        InputError, match=r"different model parameters \(in-0.parquet: \['f'\]; in-1.parquet: \['g'\]\)"
    ):
        _run([agents.iloc[:3], other.iloc[3:]], edges, tmp_path)


def test_logistic_codings_mixed_across_files_are_refused_as_in_memory(tmp_path: Path) -> None:
    agents, edges = _tables()
    mixed = agents.copy()
    mixed.loc[3, "y"] = -1.0  # files {0, 1} and {-1, 1}: each valid alone
    with pytest.raises(DegenerateInput, match=r"logistic targets must be 0/1 or ±1, got \[-1.0, 0.0, 1.0\]"):
        build_problem(mixed, edges, loss="logistic")
    with pytest.raises(DegenerateInput, match=r"logistic targets must be 0/1 or ±1, got \[-1.0, 0.0, 1.0\]"):
        _run([mixed.iloc[:3], mixed.iloc[3:]], edges, tmp_path, loss="logistic")


def test_an_agent_without_a_strongly_convex_loss_is_named(tmp_path: Path) -> None:
    agents, edges = _tables()
    agents["f2"] = agents["f"]  # collinear features: X'X singular for every agent
    # a block names its own agents (the in-memory fit names the first of all): here b or c, or a
    with pytest.raises(DegenerateInput, match=r"agent [abc]: loss not strongly convex .* with \d samples for p = 2"):
        _run([agents.iloc[:2], agents.iloc[2:]], edges, tmp_path, reg=0.0)


def test_an_edge_to_an_unknown_agent_is_refused(tmp_path: Path) -> None:
    agents, edges = _tables()
    edges.loc[1, "target"] = "zz"
    with pytest.raises(ValueError, match=r"edges: unknown agent id\(s\) \[zz\]"):
        _run([agents], edges, tmp_path)
