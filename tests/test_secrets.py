"""Credentials never enter a spec inline (issue #18, class 3): refused, named, never echoed or stored.

A secret is planted in every URL position a spec has (a SQL source's connection, the warehouse
connection, the Dask runner address), in every form a user might type it (a plain password in the user
part, one holding a space, ``/`` or ``@``, a secret query parameter such as ``sslpassword`` or ``token``).
Each spec goes through the three doors a run has: the CLI (``run`` and ``validate``), a deployment run
created through the Prefect API (the server refuses it against the parameter schema before storing it),
and the spec-file flow (the spec is read inside a flow run). Then every written file, the captured output
and every Prefect API object (flow runs and their parameters, logs, artifacts, events) is scanned.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import TypeAdapter

from crowdflow.contracts.errors import SpecError
from crowdflow.spec import PipelineSpec, parse_spec
from crowdflow.storage.secrets import (
    NO_INLINE_SECRET_PATTERN,
    NO_USERINFO_PATTERN,
    inline_secret,
    redact,
    refuse_inline_secret,
)
from flows.cli import main

SECRET = "Zq9-pl4nted"

USERINFO = [
    f"alice:{SECRET}",
    f"alice:{SECRET} with space",
    f"alice:{SECRET}/slash",
    f"alice:{SECRET}@at",
]
QUERY = [f"password={SECRET}", f"sslpassword={SECRET}", f"token={SECRET}", f"api_key={SECRET}"]


def _urls(scheme_host: str) -> list[str]:
    scheme, host = scheme_host.split("://")
    return [f"{scheme}://{u}@{host}" for u in USERINFO] + [
        f"{scheme}://alice@{host}?sslmode=require&{q}" for q in QUERY
    ]


def _cases() -> list[tuple[str, dict[str, Any]]]:
    base: dict[str, Any] = {"name": "leak", "skills": {"method": "mv"}, "output": {"dir": "out"}}
    out: list[tuple[str, dict[str, Any]]] = []
    for url in _urls("postgresql://127.0.0.1:9/db"):
        out.append(("labels.connection", {**base, "labels": {"sql": "SELECT 1", "connection": url}}))
    for url in _urls("duckdb:///w.duckdb") + _urls("postgresql://127.0.0.1:9/db"):
        spec = {**base, "labels": {"path": "labels.csv"}, "output": {"dir": "out", "warehouse": {"connection": url}}}
        out.append(("output.warehouse.connection", spec))
    for addr in [f"tcp://alice:{SECRET}@127.0.0.1:8786", f"tls://{SECRET}@127.0.0.1:8786"]:
        out.append(
            ("runner.address", {**base, "labels": {"path": "labels.csv"}, "runner": {"kind": "dask", "address": addr}})
        )
    return out


CASES = _cases()
# through every door (each spec-file run is a flow run): each position with a password holding '/' and '@'
# and a secret query parameter; the parse test above covers every form
DOOR_CASES = [c for i, c in enumerate(CASES) if i in (2, 3, 5, 9, 13, 17, 24, 25)]


def test_rule_and_schema_pattern_agree_on_every_position() -> None:
    import re

    for field, data in CASES:
        value = str(_get(data, field))
        address = field == "runner.address"
        assert inline_secret(value, allow_user=not address) is not None, value
        assert re.fullmatch(NO_USERINFO_PATTERN if address else NO_INLINE_SECRET_PATTERN, value) is None, value
        if ":" + SECRET in value or "=" + SECRET in value:  # a password form: redacted wherever it is recorded
            assert SECRET not in redact(value, secrets=[]), value
    clean = ["postgresql://alice@db:5432/crowd?sslmode=require", "duckdb:///data/a@b.duckdb", "tcp://127.0.0.1:8786"]
    for value in clean:
        assert inline_secret(value) is None and re.fullmatch(NO_INLINE_SECRET_PATTERN, value)
        assert refuse_inline_secret(value, "x") == value
    # the UI/API form carries the pattern on each such field
    # (every source's SQL form and the warehouse carry a connection; the runner an address)
    props: list[tuple[str, dict]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            props.extend((k, v) for k, v in (node.get("properties") or {}).items() if isinstance(v, dict))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(TypeAdapter(PipelineSpec).json_schema())
    connections = [v for k, v in props if k == "connection"]
    addresses = [v for k, v in props if k == "address"]
    assert len(connections) >= 2 and all(v.get("pattern") == NO_INLINE_SECRET_PATTERN for v in connections)
    assert addresses and all(v.get("pattern") == NO_USERINFO_PATTERN for v in addresses)


def _get(data: dict[str, Any], dotted: str) -> Any:
    for k in dotted.split("."):
        data = data[k]
    return data


@pytest.mark.parametrize(("field", "data"), CASES, ids=[f"{f}-{i}" for i, (f, _) in enumerate(CASES)])
def test_parse_refuses_naming_the_field(field: str, data: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(SpecError) as exc:
        parse_spec(data, origin="spec.yaml", base_dir=tmp_path)
    msg = str(exc.value)
    assert field in msg and "password_env" in msg
    assert SECRET not in msg


def _scan_files(folder: Path, skip: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and p != skip and SECRET.encode() in p.read_bytes()]


def _prefect_objects() -> tuple[str, int, int, int]:
    """Every flow run (with parameters), log, artifact and event the session's Prefect API holds, as text."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs()
        logs = client.read_logs()
        artifacts = client.read_artifacts()
        page = client.request("POST", "/events/filter", json={"limit": 50}).json()
        events = list(page["events"])
        while page.get("next_page"):
            page = client._client.get(page["next_page"]).json()
            events += page["events"]
    text = json.dumps(
        [
            [r.model_dump(mode="json") for r in runs],
            [entry.model_dump(mode="json") for entry in logs],
            [a.model_dump(mode="json") for a in artifacts],
            events,
        ]
    )
    return text, len(runs), len(logs), len(events)


@pytest.mark.flow
@pytest.mark.usefixtures("prefect_harness")
def test_no_door_leaks_a_planted_secret(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from prefect.client.orchestration import get_client
    from prefect.exceptions import PrefectHTTPStatusError

    from flows.deploy import run_pipeline, run_spec_file

    (tmp_path / "labels.csv").write_text("task,worker,label\nt1,w1,a\nt1,w2,b\nt2,w1,a\n")
    deployment_id = run_pipeline.to_deployment(name="secret-scan").apply()
    for i, (field, data) in enumerate(DOOR_CASES):
        spec_file = tmp_path / f"spec-{i}.yaml"
        spec_file.write_text(yaml.safe_dump(data))
        for command in ("validate", "run"):  # the CLI
            assert main([command, str(spec_file)]) == 2
            captured = capsys.readouterr()
            assert field in captured.err and SECRET not in captured.err + captured.out
        # a deployment run created through the API: the parameter schema refuses it before anything is stored
        with get_client(sync_client=True) as client, pytest.raises(PrefectHTTPStatusError) as exc:
            client.create_flow_run_from_deployment(deployment_id, parameters={"spec": data})
        assert exc.value.response.status_code == 409
        # the spec-file flow: the spec is read inside a flow run, which fails with a message naming the field
        with pytest.raises(SpecError) as failed:
            run_spec_file(str(spec_file))
        assert field in str(failed.value) and SECRET not in str(failed.value)
        captured = capsys.readouterr()
        assert SECRET not in captured.err + captured.out
    # only the spec files the user wrote hold the secret
    assert all(p.name.startswith("spec-") for p in _scan_files(tmp_path, skip=tmp_path))
    assert not (tmp_path / "out").exists()
    text, n_runs, n_logs, n_events = _prefect_objects()
    assert n_runs >= len(DOOR_CASES) and n_logs > 0 and n_events > 0  # the scan saw the failed spec-file runs
    assert SECRET not in text
