"""Personal-rankings and personal-models jobs end to end (CLI → flow → Parquet), checked against truth."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import kendalltau

from crowdflow.personal_models import fit_personal_models
from crowdflow.synth.personal_models import field_estimation_instance
from crowdflow.synth.personal_rankings import synthetic_personal_comparisons
from flows.cli import main

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]


def _run_dir(out: Path) -> Path:
    (manifest,) = sorted(out.rglob("manifest.json"))
    assert json.loads(manifest.read_text())["status"] == "completed"
    return manifest.parent


def test_personal_rankings_recover_truth(tmp_path: Path) -> None:
    syn = synthetic_personal_comparisons(60, 3, 8.0, seed=1)
    path = tmp_path / "cmp.csv"
    syn.comparisons.to_csv(path, index=False)
    out = tmp_path / "out"
    assert main(["personal-rank", "--comparisons", str(path), "--rank", "3", "--out", str(out)]) == 0
    run = _run_dir(out)
    pr = pd.read_parquet(run / "personal_rankings.parquet")
    assert len(pr) == len(syn.users) * len(syn.items)
    assert pr.groupby("user")["rank"].apply(lambda r: sorted(r) == list(range(1, len(syn.items) + 1))).all()
    est = pr.pivot(index="user", columns="item", values="score").loc[syn.users, syn.items].to_numpy()
    taus = [kendalltau(est[i], syn.X_star[i]).statistic for i in range(len(syn.users))]
    assert np.mean(taus) > 0.6  # per-user orders agree with the generating scores
    factors = pd.read_parquet(run / "user_factors.parquet")
    assert list(factors.columns) == ["user", "f0", "f1", "f2", "missing_reason"] and len(factors) == len(syn.users)
    assert factors["missing_reason"].isna().all()
    assert pd.read_parquet(run / "excluded.parquet").empty


def test_personal_rankings_disconnected_blocks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cmp.csv"
    path.write_text("annotator,item_a,item_b,outcome\nu1,a,b,1\nu1,b,c,-1\nu2,x,y,1\nu2,y,z,1\n")
    out = tmp_path / "out"
    assert main(["personal-rank", "--comparisons", str(path), "--rank", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "annotator–item graph has 2 connected components" in err and "[a,b,c]" in err
    assert not out.exists() or not any(out.rglob("*.parquet"))


def test_personal_models_match_centralized(tmp_path: Path) -> None:
    inst = field_estimation_instance(3, n=25)
    agents, edges = tmp_path / "agents.csv", tmp_path / "edges.csv"
    inst.agents.to_csv(agents, index=False)
    inst.edges.to_csv(edges, index=False)
    out = tmp_path / "out"
    rc = main(
        [
            "personal-models",
            "--agents",
            str(agents),
            "--edges",
            str(edges),
            "--loss",
            "quadratic",
            "--reg",
            "0.1",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    run = _run_dir(out)
    got = pd.read_parquet(run / "personal_models.parquet").set_index("agent")
    ref = fit_personal_models(inst.agents, inst.edges, loss="quadratic", reg=0.1, method="centralized")
    theta_col = next(c for c in got.columns if c.startswith("theta"))
    want = ref.personal_models.set_index("agent")[theta_col]
    rel = np.abs(got[theta_col] - want.loc[got.index]).max() / np.abs(want).max()
    assert rel < 1e-6
    man = json.loads((run / "manifest.json").read_text())
    assert man["metrics"]["converged"] and man["metrics"]["error_bound"] < 1e-6


def test_personal_models_asymmetric_edges_block(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    agents, edges = tmp_path / "agents.csv", tmp_path / "edges.csv"
    agents.write_text("agent,y,x0\na,1.0,1\nb,2.0,1\nc,0.5,1\n")
    edges.write_text("source,target,weight\na,b,1.0\nb,a,2.0\nb,c,1.0\n")
    out = tmp_path / "out"
    assert main(["personal-models", "--agents", str(agents), "--edges", str(edges), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "different weights: (a,b)" in err and str(edges) in err


def test_personal_models_on_dask_equal_in_process(tmp_path: Path, dask_spy: list[int]) -> None:
    """Issue #6: blocked DJAM with its blocks run as Dask tasks (a real local cluster, 2 processes)
    gives the in-process result; both match the centralized optimum to the stopping tolerance."""
    from crowdflow.spec import parse_spec
    from flows.personal_models import personal_models_flow

    inst = field_estimation_instance(5, n=30)
    agents, edges = tmp_path / "agents.csv", tmp_path / "edges.csv"
    inst.agents.to_csv(agents, index=False)
    inst.edges.to_csv(edges, index=False)
    opts = {"loss": "quadratic", "reg": 0.1, "method": "djam_blocked", "n_blocks": 3, "seed": 4}
    spec = parse_spec(
        {
            "name": "dask",
            "job": "personal_models",
            "agents": {"path": str(agents)},
            "edges": {"path": str(edges)},
            "personal_models": {**opts, "executor": "dask"},
            "output": {"dir": str(tmp_path / "out")},
        }
    )
    summary = personal_models_flow(spec)
    assert dask_spy and set(dask_spy) == {3}  # every block round went through Dask, 3 blocks each
    on_dask = pd.read_parquet(Path(summary["run_dir"]) / "personal_models.parquet").set_index("agent")
    inline = fit_personal_models(
        inst.agents, inst.edges, **{k: v for k, v in opts.items() if k != "n_blocks"}, n_blocks=3
    ).personal_models.set_index("agent")
    theta = [c for c in on_dask.columns if c.startswith("theta")]
    np.testing.assert_allclose(
        on_dask[theta].to_numpy(), inline.loc[on_dask.index, theta].to_numpy(), rtol=0, atol=1e-12
    )
    ref = fit_personal_models(inst.agents, inst.edges, loss="quadratic", reg=0.1, method="centralized")
    want = ref.personal_models.set_index("agent").loc[on_dask.index, theta].to_numpy()
    assert np.abs(on_dask[theta].to_numpy() - want).max() <= 1e-6 * np.abs(want).max()


def _ranked_comparisons(seed: int, n_items: int = 20, m: int = 1500, outlier_share: float = 0.1) -> tuple:
    rng = np.random.default_rng(seed)
    theta = np.linspace(2.0, -2.0, n_items)  # item i0 best … last worst
    a = rng.integers(0, n_items, m)
    b = (a + rng.integers(1, n_items, m)) % n_items
    y = np.sign(theta[a] - theta[b] + rng.normal(0, 0.5, m))
    flip = rng.random(m) < outlier_share
    y[flip] = -np.sign(theta[a[flip]] - theta[b[flip]])  # outliers: always against the true order
    items = np.array([f"i{k:02d}" for k in range(n_items)])
    df = pd.DataFrame(
        {"annotator": rng.integers(0, 30, m).astype(str), "item_a": items[a], "item_b": items[b], "outcome": y}
    )
    return df, items, flip


def test_ranking_recovers_order_and_flags_outliers(tmp_path: Path) -> None:
    df, items, flip = _ranked_comparisons(0)
    path = tmp_path / "cmp.csv"
    df.to_csv(path, index=False)
    out = tmp_path / "out"
    assert main(["rank", "--comparisons", str(path), "--outliers", "lbi", "--budget", "0.1", "--out", str(out)]) == 0
    run = _run_dir(out)
    ranking = pd.read_parquet(run / "ranking.parquet").set_index("item")
    assert list(ranking.columns[:4]) == ["score", "rank", "component", "n_comparisons"]
    tau = kendalltau(ranking.loc[items, "score"], -np.arange(len(items))).statistic
    assert tau > 0.95
    outliers = pd.read_parquet(run / "outliers.parquet").sort_values("row_id")
    flagged = outliers["is_outlier"].to_numpy()
    precision = flip[flagged].mean()
    assert flagged.sum() > 0 and precision > 0.8  # what LBI flags are mostly the injected flips
    rates = pd.read_parquet(run / "annotators.parquet")
    assert set(rates.columns) >= {"annotator", "n_comparisons", "n_outliers", "outlier_rate"}


def test_ranking_disconnected_graph_scores_per_component(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cmp.csv"
    path.write_text("annotator,item_a,item_b,winner\nu,a,b,a\nu,b,c,b\nu,a,c,a\nv,x,y,x\nv,y,z,y\nv,x,z,x\n")
    out = tmp_path / "out"
    assert main(["rank", "--comparisons", str(path), "--outliers", "none", "--out", str(out)]) == 0
    ranking = pd.read_parquet(_run_dir(out) / "ranking.parquet").set_index("item")
    assert ranking.loc[["a", "b", "c"], "component"].nunique() == 1
    assert ranking.loc["a", "component"] != ranking.loc["x", "component"]
    assert ranking.loc["a", "rank"] == 1 and ranking.loc["x", "rank"] == 1  # ranks restart per component
    out2 = tmp_path / "out2"
    assert main(["rank", "--comparisons", str(path), "--require-connected", "--out", str(out2)]) == 2
    assert "item comparison graph has 2 connected components" in capsys.readouterr().err


def _brute_force_best(cand: pd.DataFrame, budget: int, wcap: int | dict[str, int], tcap: int | dict[str, int]) -> float:
    """Best total score by enumerating every support (caps: one number or a cap per id)."""
    from itertools import combinations

    def ok(counts: pd.Series, cap: int | dict[str, int]) -> bool:
        return all(n <= (cap[k] if isinstance(cap, dict) else cap) for k, n in counts.items())

    best = 0.0
    rows = list(cand.itertuples(index=False))
    for k in range(budget + 1):
        for pick in combinations(rows, k):
            w = pd.Series([r.worker for r in pick], dtype=object).value_counts()
            t = pd.Series([r.task for r in pick], dtype=object).value_counts()
            if ok(w, wcap) and ok(t, tcap):
                best = max(best, sum(r.score for r in pick))
    return best


def test_assignment_is_optimal_and_respects_caps(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    cand = pd.DataFrame([(f"t{t}", f"w{w}") for t in range(4) for w in range(3)], columns=["task", "worker"])
    cand["score"] = np.round(rng.uniform(-0.2, 1.0, len(cand)), 3)
    path = tmp_path / "cand.csv"
    cand.to_csv(path, index=False)
    out = tmp_path / "out"
    rc = main(
        [
            "assign",
            "--candidates",
            str(path),
            "--budget",
            "5",
            "--worker-cap",
            "2",
            "--task-cap",
            "2",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    run = _run_dir(out)
    a = pd.read_parquet(run / "assignment.parquet")
    assert len(a) <= 5 and a["worker"].value_counts().max() <= 2 and a["task"].value_counts().max() <= 2
    assert (a["score"] > 0).all()
    assert a["score"].sum() == pytest.approx(_brute_force_best(cand, 5, 2, 2), abs=1e-9)
    man = json.loads((run / "manifest.json").read_text())
    assert man["metrics"]["certified"] and man["metrics"]["n_assigned"] == len(a)
    loads = pd.read_parquet(run / "worker_load.parquet").set_index("worker")
    assert loads["n_assigned"].sum() == len(a)


def test_assignment_with_caps_tables_and_defaults(tmp_path: Path) -> None:
    """--worker-caps / --task-caps tables set per-entity caps; --worker-cap is the default for the
    workers the table omits; the optimum equals brute force under exactly those caps."""
    rng = np.random.default_rng(11)
    cand = pd.DataFrame([(f"t{t}", f"w{w}") for t in range(4) for w in range(3)], columns=["task", "worker"])
    cand["score"] = np.round(rng.uniform(0.05, 1.0, len(cand)), 3)
    cand.to_csv(tmp_path / "cand.csv", index=False)
    (tmp_path / "wcaps.csv").write_text("worker,capacity\nw0,0\nw1,3\n")  # w2 omitted -> default 1
    (tmp_path / "tcaps.csv").write_text("task,cap\nt0,1\nt1,2\nt2,1\nt3,2\n")
    out = tmp_path / "out"
    args = ["assign", "--candidates", str(tmp_path / "cand.csv"), "--budget", "5", "--out", str(out)]
    caps = ["--worker-caps", str(tmp_path / "wcaps.csv"), "--task-caps", str(tmp_path / "tcaps.csv")]
    assert main([*args, *caps, "--worker-cap", "1"]) == 0
    a = pd.read_parquet(_run_dir(out) / "assignment.parquet")
    wcap = {"w0": 0, "w1": 3, "w2": 1}
    tcap = {"t0": 1, "t1": 2, "t2": 1, "t3": 2}
    assert "w0" not in set(a["worker"])
    assert all(n <= wcap[w] for w, n in a["worker"].value_counts().items())
    assert all(n <= tcap[t] for t, n in a["task"].value_counts().items())
    assert a["score"].sum() == pytest.approx(_brute_force_best(cand, 5, wcap, tcap), abs=1e-9)
    loads = pd.read_parquet(_run_dir(out) / "worker_load.parquet").set_index("worker")
    assert loads.loc["w2", "capacity"] == 1 and loads.loc["w1", "capacity"] == 3
    # without a default, a worker missing from the table is an error naming it, and nothing is written
    out2 = tmp_path / "out2"
    args2 = ["assign", "--candidates", str(tmp_path / "cand.csv"), "--budget", "5", "--out", str(out2)]
    assert main([*args2, *caps]) == 2
    assert not any(out2.rglob("*.parquet"))


def test_assignment_budget_zero_is_an_explicit_empty_result(tmp_path: Path) -> None:
    path = tmp_path / "cand.csv"
    path.write_text("task,worker,score\nt1,w1,0.5\nt2,w1,0.3\n")
    out = tmp_path / "out"
    assert main(["assign", "--candidates", str(path), "--budget", "0", "--out", str(out)]) == 0
    run = _run_dir(out)
    assert pd.read_parquet(run / "assignment.parquet").empty
    assert json.loads((run / "manifest.json").read_text())["metrics"]["n_assigned"] == 0


def test_closed_loop_next_batch_from_skills_run(tmp_path: Path, rte_dir: Path) -> None:
    """Issue #7 closed loop: skills run (PGD on RTE) → open tasks × available workers → capped assignment."""
    skills_out = tmp_path / "skills-out"
    assert main(["skills", "--labels", str(rte_dir / "labels.csv"), "--out", str(skills_out), "--name", "rte"]) == 0
    skills_run = _run_dir(skills_out)
    skills = pd.read_parquet(skills_run / "skills.parquet")
    consensus = pd.read_parquet(skills_run / "consensus.parquet")
    open_tasks = consensus.sort_values("confidence").iloc[::40][["task"]]  # 20 tasks, a spread of confidences
    good = skills.nlargest(5, "skill")["worker"].tolist()
    weak = skills.nsmallest(5, "skill")["worker"].tolist()
    pool = pd.DataFrame({"worker": good + weak + ["newcomer"]})
    (tmp_path / "open.csv").write_text(open_tasks.to_csv(index=False))
    (tmp_path / "workers.csv").write_text(pool.to_csv(index=False))
    out = tmp_path / "out"
    rc = main(
        [
            "next-batch",
            "--skills-run",
            str(skills_out / "rte"),
            "--open-tasks",
            str(tmp_path / "open.csv"),
            "--workers",
            str(tmp_path / "workers.csv"),
            "--budget",
            "20",
            "--worker-cap",
            "4",
            "--task-cap",
            "1",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    run = _run_dir(out)
    man = json.loads((run / "manifest.json").read_text())
    assert man["skills_run"]["run_id"] == skills_run.name and man["metrics"]["n_workers_without_skill"] == 1
    a = pd.read_parquet(run / "assignment.parquet")
    assert len(a) == 20 and a["task"].is_unique and a["worker"].value_counts().max() <= 4
    assert "newcomer" not in set(a["worker"])
    # the budget goes to the most skilled workers first: 5 good workers x cap 4 = 20 pairs
    assert set(a["worker"]) == set(good)
    cand = pd.read_parquet(run / "candidates.parquet")
    by_task = cand[cand["worker"] == good[0]].merge(consensus, on="task").sort_values("confidence")
    assert np.all(np.diff(by_task["score"].to_numpy()) <= 1e-12)  # for one worker, less certain tasks score higher
    assert by_task["score"].iloc[0] > 10 * by_task["score"].iloc[-1]
