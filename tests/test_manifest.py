"""The run manifest records no secret (issue #9, item 4): passwords in URLs, secret env values."""

from __future__ import annotations

import json

import pytest

from crowdflow.storage.manifest import build_manifest, input_record
from crowdflow.storage.secrets import REDACTED, redact, secret_env_values


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("postgresql://ana:s3cr3t@db:5432/crowd", "postgresql://ana:***@db:5432/crowd"),
        (
            "postgresql+psycopg://ana:p%40ss@db/crowd?sslmode=require",
            "postgresql+psycopg://ana:***@db/crowd?sslmode=require",
        ),
        ("s3://KEYID:SECRETKEY@bucket/labels.parquet", "s3://KEYID:***@bucket/labels.parquet"),
        ("tcp://user:pw@scheduler:8786", "tcp://user:***@scheduler:8786"),
        ("duckdb:///data/x.db?password=hunter22&mode=ro", "duckdb:///data/x.db?password=***&mode=ro"),
        ("https://host/api?token=abc123#frag", "https://host/api?token=***#frag"),
        ("postgresql://ana:p@ss@db:5432/crowd", "postgresql://ana:***@db:5432/crowd"),  # unencoded '@': all of it
        ("postgresql://ana@db/crowd", "postgresql://ana@db/crowd"),  # no password: unchanged
        ("/data/labels.csv", "/data/labels.csv"),
        ("a:b@c is not a URL", "a:b@c is not a URL"),
    ],
)
def test_redact_urls(raw: str, want: str) -> None:
    assert redact(raw, secrets=[]) == want


def test_redact_nested_and_env_secrets() -> None:
    env = {"PGPASSWORD": "correct-horse", "API_TOKEN": "tok_123456", "HOME": "/root", "SHORT_TOKEN": "abc"}
    secrets = secret_env_values(env)
    assert secrets == ["correct-horse", "tok_123456"]  # HOME is no secret; 3 characters are too short to scan
    value = {"sql": ["select 1 -- correct-horse", {"u": "x://u:pw@h"}], "n": 3, "f": 0.5, "ok": True}
    assert redact(value, secrets) == {
        "sql": [f"select 1 -- {REDACTED}", {"u": "x://u:***@h"}],
        "n": 3,
        "f": 0.5,
        "ok": True,
    }


def test_manifest_never_records_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CROWDFLOW_DB_PASSWORD", "pa55word-from-env")
    spec = {
        "name": "p",
        "labels": {"path": "postgresql://ana:s3cr3t@db/crowd"},
        "personal_models": {"dask_address": "tcp://ana:s3cr3t@sched:8786"},
        "note": "query with pa55word-from-env inlined",
    }
    m = build_manifest(
        run_id="r1",
        pipeline="p",
        job="skills",
        spec=spec,
        inputs=[input_record("labels", "postgresql://ana:s3cr3t@db/crowd", "0" * 64, 3, "sql")],
        checks={},
        metrics={"accuracy": 0.9},
        timings={"fit": 0.1},
        extra={"source_url": "https://ana:s3cr3t@example.org/x.csv"},
    )
    text = json.dumps(m)
    assert "s3cr3t" not in text and "pa55word-from-env" not in text
    assert m["inputs"][0]["path"] == "postgresql://ana:***@db/crowd"
    assert m["spec"]["labels"]["path"] == "postgresql://ana:***@db/crowd"
    assert m["metrics"] == {"accuracy": 0.9} and m["run_id"] == "r1"


def test_written_manifest_is_strict_json(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Undefined numbers (a majority vote has no PGD step size) are null, never the NaN token."""
    import numpy as np
    import pandas as pd

    from crowdflow.storage.run_store import write_run

    manifest = {"fit": {"eta": float("nan"), "final_loss": np.float64("inf"), "iterations": 0}, "x": [1.5, -np.inf]}
    run = write_run(tmp_path, "p", "r1", {"t": pd.DataFrame({"a": [1]})}, manifest)
    text = (run.path / "manifest.json").read_text()

    def strict(token: str) -> None:
        raise ValueError(f"non-standard JSON token {token}")

    m = json.loads(text, parse_constant=strict)
    assert m["fit"] == {"eta": None, "final_loss": None, "iterations": 0} and m["x"] == [1.5, None]
    assert m["status"] == "completed"
