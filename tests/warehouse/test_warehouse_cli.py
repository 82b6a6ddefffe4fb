"""What the CLI says about warehouse specs that cannot run (no Prefect run needed: they fail before)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flows.cli import main

SECRET = "hunter2-Xy"


def _spec(tmp_path: Path, labels: dict[str, object], **output: object) -> str:
    data = {"name": "w", "labels": labels, "skills": {"method": "mv"}, "output": {"dir": "out", **output}}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_inline_password_in_spec_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = _spec(tmp_path, {"sql": "SELECT 1", "connection": f"postgresql://alice:{SECRET}@127.0.0.1:5/db"})
    for cmd in ("validate", "run"):
        assert main([cmd, spec]) == 2
        err = capsys.readouterr().err
        assert "labels.connection" in err and "contains a password" in err and "password_env" in err
        assert SECRET not in err
    assert not (tmp_path / "out").exists()


def test_unset_password_env_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CROWDFLOW_TEST_UNSET_PW", raising=False)
    spec = _spec(
        tmp_path,
        {
            "sql": "SELECT 1",
            "connection": "postgresql://alice@127.0.0.1:5/db",
            "password_env": "CROWDFLOW_TEST_UNSET_PW",
        },
    )
    assert main(["validate", spec]) == 2
    assert "environment variable CROWDFLOW_TEST_UNSET_PW (password_env) is not set" in capsys.readouterr().err


def test_wrong_password_exits_2_without_echoing_it(
    pg_server, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CROWDFLOW_TEST_WRONG_PW", SECRET)
    spec = _spec(tmp_path, {"sql": "SELECT 1", "connection": pg_server.url, "password_env": "CROWDFLOW_TEST_WRONG_PW"})
    assert main(["validate", spec]) == 2
    err = capsys.readouterr().err
    assert "password authentication failed" in err and SECRET not in err


def test_duckdb_query_error_names_the_connection(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import duckdb

    duckdb.connect(str(tmp_path / "in.duckdb")).close()
    spec = _spec(tmp_path, {"sql": "SELECT * FROM labels", "connection": "duckdb:///in.duckdb"})
    assert main(["validate", spec]) == 2
    err = capsys.readouterr().err
    assert "duckdb:///in.duckdb: query failed" in err and "labels" in err


def test_example_warehouse_spec_validates(capsys: pytest.CaptureFixture[str]) -> None:
    from crowdflow.spec import load_spec

    path = Path(__file__).resolve().parents[2] / "deployments" / "specs" / "rte-skills-warehouse.yaml"
    spec = load_spec(path)
    assert spec.output.layout == "hive" and spec.output.warehouse is not None
    assert spec.output.warehouse.connection.startswith("duckdb:///")
    assert main(["validate", str(path)]) == 0
    assert "labels" in capsys.readouterr().out


def test_query_result_goes_through_the_validation_suite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A fetched table is validated like a file: a null worker id fails the labels suite (exit 2)."""
    import duckdb

    con = duckdb.connect(str(tmp_path / "in.duckdb"))
    con.execute(
        "CREATE TABLE l AS SELECT * FROM (VALUES ('t1', 'w1', 'a'), ('t1', NULL, 'b'), ('t2', 'w2', 'a')) v(task, worker, label)"
    )
    con.close()
    spec = _spec(tmp_path, {"sql": "SELECT * FROM l", "connection": "duckdb:///in.duckdb"})
    assert main(["validate", spec]) == 2
    err = capsys.readouterr().err
    assert "duckdb:///in.duckdb" in err and "worker" in err
