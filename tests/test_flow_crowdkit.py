"""A Crowd-Kit aggregator in the skills pipeline, end to end under a temporary Prefect API (issue #34 item 3).

``crowdflow skills --method crowdkit:<Name>`` on a bundled set completes for GLAD, MACE, Wawa, MMSR and
ZeroBasedSkill, writes the native methods' tables (consensus, skills, components, gold tables, report) and its
consensus is Crowd-Kit's call on the same frame; bad parameters and a missing extra exit 2 before any step.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from crowdflow.skills import prepare_labels
from crowdflow.skills.crowdkit_adapter import labels_frame
from flows.cli import main

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]

ck = pytest.importorskip("crowdkit.aggregation")

WSD = Path(__file__).resolve().parents[1] / "crowdflow" / "data" / "snow_wsd"

# small iteration counts: GLAD, MACE and ZeroBasedSkill run in seconds on the 1,770 WSD labels
RUNS: dict[str, dict[str, Any]] = {
    "GLAD": {"n_iter": 3},
    "MACE": {"n_restarts": 2, "n_iter": 10},
    "Wawa": {},
    "MMSR": {"n_iter": 500},
    "ZeroBasedSkill": {"n_iter": 15},
}


def _reference(name: str, df: pd.DataFrame, params: dict[str, Any]) -> pd.Series:
    """Crowd-Kit's call on the file's rows, in the order every skills fit uses (sorted by task, worker)."""
    df = labels_frame(prepare_labels(df)[0])
    agg = getattr(ck, name)(**params)
    if name in (
        "Wawa",
        "ZeroBasedSkill",
    ):  # their predict trips over scikit-learn (tests/skills/test_crowdkit_adapter.py)
        return ck.MajorityVote().fit(df, skills=agg.fit(df).skills_).labels_
    return agg.fit_predict(df)


@pytest.mark.parametrize("name", list(RUNS))
def test_pipeline_run_with_a_crowdkit_aggregator(name: str, tmp_path: Path) -> None:
    params = RUNS[name]
    out = tmp_path / "out"
    argv = ["skills", "--labels", str(WSD / "labels.csv"), "--truth", str(WSD / "truth.csv"), "--out", str(out)]
    argv += ["--method", f"crowdkit:{name}"]
    if params:
        argv += ["--crowdkit-params", ",".join(f"{k}={v}" for k, v in params.items())]
    assert main(argv) == 0
    (manifest_path,) = sorted(out.rglob("manifest.json"))
    man = json.loads(manifest_path.read_text())
    assert man["status"] == "completed" and man["method"] == f"crowdkit:{name}"
    assert man["fit"]["crowdkit_method"] == name and man["fit"]["crowdkit_params"] == params
    assert man["fit"]["crowdkit_version"] == "1.4.2"
    assert set(man["outputs"]) == {"consensus", "skills", "components", "gold_workers", "gold_confusion", "report"}
    run = manifest_path.parent
    consensus = pd.read_parquet(run / "consensus.parquet")
    assert list(consensus.columns) == ["task", "label", "confidence", "n_labels", "fallback", "missing_reason"]
    df = pd.read_csv(WSD / "labels.csv", dtype=str)
    ref = _reference(name, df, params)
    got = consensus.set_index("task")["label"]
    assert len(got) == 177 and (got == ref.reindex(got.index).astype(str)).all()
    assert consensus["confidence"].between(0, 1).all()  # all five give probabilities (MMSR: weighted vote shares)
    skills = pd.read_parquet(run / "skills.parquet")
    assert len(skills) == df["worker"].nunique() and skills["skill"].notna().all()
    gold = pd.read_csv(WSD / "truth.csv", dtype=str).set_index("task")["label"]
    accuracy = float((got.reindex(gold.index) == gold).mean())
    assert man["metrics"]["accuracy"] == pytest.approx(accuracy, abs=1e-12) and accuracy > 0.9
    assert f"crowdkit:{name}" in (run / "report.html").read_text()


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--method", "crowdkit:GLAD", "--crowdkit-params", "n_iter=-3"], "crowdkit:GLAD n_iter=-3"),
        (
            ["--method", "crowdkit:MACE", "--crowdkit-params", "restarts=2"],
            "restarts: not a parameter of crowdkit:MACE",
        ),
        (["--method", "ds", "--crowdkit-params", "n_iter=2"], "crowdkit_params apply to a crowdkit: method only"),
        (["--method", "crowdkit:MACE", "--crowdkit-params", "n_iter"], "is not NAME=VALUE"),
    ],
)
def test_bad_params_exit_2_naming_them(
    flags: list[str], words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    rc = main(["skills", "--labels", str(WSD / "labels.csv"), "--out", str(out), *flags])
    assert rc == 2 and not out.exists()
    assert words in capsys.readouterr().err


def test_without_the_extra_a_run_stops_before_any_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "crowdkit", None)
    out = tmp_path / "out"
    rc = main(["skills", "--labels", str(WSD / "labels.csv"), "--out", str(out), "--method", "crowdkit:Wawa"])
    assert rc == 2 and not out.exists()
    assert "pip install 'crowdflow[crowdkit]'" in capsys.readouterr().err


def test_kos_on_three_classes_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    rc = main(["skills", "--labels", str(WSD / "labels.csv"), "--out", str(out), "--method", "crowdkit:KOS"])
    assert rc == 2
    assert "aggregates two classes only; the labels have 3" in capsys.readouterr().err
