"""Storage options are secrets by default (issue #33, item 4): only a short allow-list may be written inline.

Every ``storage_options`` key that is not on :data:`crowdflow.storage.secrets.PUBLIC_STORAGE_OPTIONS` takes only a
reference, ``{env: VARIABLE}`` or ``{secret_block: name}``. An inline value is refused before the run (CLI, parse,
and the Prefect server's parameter schema), naming the key, never the value. A run whose options come from the
environment and a Secret block is scanned: the run folders, the temporary folder, captured output and logs, every
Prefect object (flow runs with their parameters, logs, artifacts, events) and the Prefect database file itself.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pandas as pd
import pytest
import yaml
from fsspec.implementations.local import LocalFileSystem

from crowdflow.contracts.errors import SpecError
from crowdflow.spec import parse_spec
from crowdflow.storage.secrets import PUBLIC_STORAGE_OPTIONS, resolve_storage_options, storage_option_refusal
from flows.cli import main

ENV_MARK = "Mk-env-7f3c91"
BLOCK_MARK = "Mk-block-a2d804"
INLINE_MARK = "Mk-inline-55e1b0"
# credentials under names the old rule (key/secret/token/password/credentials) let through, and a few it caught
SECRET_KEYS = ["connection_string", "passphrase", "sas_token", "client_secret", "key", "account_key", "x_made_up"]
DASK = {"kind": "dask", "n_workers": 1, "processes": False, "partitions": 2}


class _OptionsFS(LocalFileSystem):
    """A remote-looking file system (``cftest://``) over the local disk that takes any option, as s3fs or adlfs
    take their credentials: a ``file://`` URL is a local path (never an fsspec file system), so the test reaches
    the storage options' whole way (spec → resolution → fsspec) through this protocol instead."""

    protocol = "cftest"

    def __init__(self, *args: Any, **storage_options: Any) -> None:
        super().__init__()

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        text = str(path)
        return super()._strip_protocol(text[len("cftest://") :] if text.startswith("cftest://") else text)


fsspec.register_implementation("cftest", _OptionsFS, clobber=True)


def _remote(path: Path) -> str:
    return "cftest://" + str(path)


def _spec(path: str, options: dict[str, Any], out: str = "out") -> dict[str, Any]:
    return {
        "name": "sec",
        "labels": {"path": path, "storage_options": options},
        "skills": {"method": "mv"},
        "runner": DASK,
        "output": {"dir": out},
    }


@pytest.mark.parametrize("key", [*SECRET_KEYS, "Anon", "endpoint"])
def test_an_inline_value_of_any_key_off_the_list_is_refused_naming_the_key(key: str, tmp_path: Path) -> None:
    """Before #33 ``connection_string`` and ``passphrase`` were accepted and written in clear."""
    with pytest.raises(SpecError) as exc:
        parse_spec(_spec("file:///data/labels/", {key: f"AccountKey={INLINE_MARK}"}), base_dir=tmp_path)
    msg = str(exc.value)
    assert f"'{key}'" in msg and "{env: VARIABLE}" in msg and INLINE_MARK not in msg


def test_public_options_take_values_and_secret_ones_take_references(tmp_path: Path) -> None:
    public: dict[str, Any] = {"anon": True, "endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"}
    refs = {"connection_string": {"env": "AZ_CONN"}, "passphrase": {"secret_block": "sftp-pass"}}
    spec = parse_spec(_spec("s3://bucket/labels/", {**public, **refs}), base_dir=tmp_path)
    assert spec.labels.storage_options["anon"] is True
    assert storage_option_refusal({**public, **refs}) is None
    # an endpoint with a user part is a credential too
    assert "endpoint_url" in str(storage_option_refusal({"endpoint_url": f"http://ak:{INLINE_MARK}@h:9000"}))
    assert INLINE_MARK not in str(storage_option_refusal({"endpoint_url": f"http://ak:{INLINE_MARK}@h:9000"}))
    # a reference holds exactly one source
    for bad in ({"env": "A", "secret_block": "b"}, {}, {"env": "1bad"}):
        with pytest.raises(SpecError):
            parse_spec(_spec("s3://bucket/labels/", {"key": bad}), base_dir=tmp_path)
    # resolution: the variable's value; an unset one is named, never a value
    got = resolve_storage_options({"anon": False, "key": {"env": "AZ_CONN"}}, environ={"AZ_CONN": ENV_MARK})
    assert got == {"anon": False, "key": ENV_MARK}
    with pytest.raises(SpecError, match="AZ_CONN, which is not set"):
        resolve_storage_options({"key": {"env": "AZ_CONN"}}, environ={})
    with pytest.raises(SpecError, match="Secret block 'b'"):
        resolve_storage_options({"key": {"secret_block": "b"}})
    assert len(PUBLIC_STORAGE_OPTIONS) <= 20  # a short list, by design


def test_the_cli_refuses_an_inline_secret_option_without_echoing_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "spec.yaml").write_text(
        yaml.safe_dump(_spec((tmp_path / "labels").as_uri(), {"passphrase": INLINE_MARK}))
    )
    for command in ("validate", "run"):
        assert main([command, str(tmp_path / "spec.yaml")]) == 2
        captured = capsys.readouterr()
        assert "'passphrase'" in captured.err and INLINE_MARK not in captured.out + captured.err
    assert not (tmp_path / "out").exists()


def _labels(rte_dir: Path) -> pd.DataFrame:
    return pd.read_csv(rte_dir / "labels.csv", dtype=str).sample(frac=1.0, random_state=3).reset_index(drop=True)


def _inputs(rte_dir: Path, root: Path) -> dict[str, Path]:
    """The same labels as one Parquet file, a folder of parts and a hive folder (``day=…/``)."""
    df = _labels(rte_dir)
    (root / "file").mkdir(parents=True)
    df.to_parquet(root / "file" / "labels.parquet", index=False)
    for k, rows in enumerate(np.array_split(np.arange(len(df)), 3)):
        (root / "folder").mkdir(exist_ok=True)
        df.iloc[rows].to_parquet(root / "folder" / f"part-{k}.parquet", index=False)
        (root / "hive" / f"day=2026-11-0{k + 1}").mkdir(parents=True)
        df.iloc[rows].to_parquet(root / "hive" / f"day=2026-11-0{k + 1}" / "part-0.parquet", index=False)
    return {"file": root / "file" / "labels.parquet", "folder": root / "folder", "hive": root / "hive"}


def _scan(folder: Path) -> list[Path]:
    marks = (ENV_MARK.encode(), BLOCK_MARK.encode(), INLINE_MARK.encode())
    return [p for p in folder.rglob("*") if p.is_file() and any(m in p.read_bytes() for m in marks)]


@pytest.mark.flow
@pytest.mark.usefixtures("prefect_harness")
def test_no_run_writes_a_storage_secret_anywhere(
    rte_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A marker in every secret option of every input kind (file, folder, hive folder, all as remote URLs; a SQL or
    local source takes no storage_options): the runs succeed, the file system got the values, nothing recorded them."""
    import fsspec.core
    from prefect.blocks.system import Secret
    from prefect.client.orchestration import get_client
    from prefect.exceptions import PrefectHTTPStatusError
    from prefect.settings import PREFECT_API_DATABASE_CONNECTION_URL

    from flows.deploy import run_pipeline

    caplog.set_level(logging.DEBUG)
    data, work = tmp_path / "data", tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("TMPDIR", str(work))
    monkeypatch.setenv("CF_TEST_STORAGE_SECRET", ENV_MARK)
    Secret(value=BLOCK_MARK).save("cf-storage-secret", overwrite=True)
    seen: list[dict[str, Any]] = []
    real = fsspec.core.url_to_fs

    def spy(url: str, **kwargs: Any) -> Any:
        seen.append(kwargs)
        return real(url, **kwargs)

    monkeypatch.setattr(fsspec.core, "url_to_fs", spy)
    options: dict[str, Any] = {k: {"env": "CF_TEST_STORAGE_SECRET"} for k in SECRET_KEYS}
    options["passphrase"] = {"secret_block": "cf-storage-secret"}
    options["anon"] = False
    runs = []
    for kind, path in _inputs(rte_dir, data).items():
        spec = parse_spec(_spec(_remote(path), options, str(work / "out")), base_dir=work)
        runs.append(run_pipeline(spec))
        assert (Path(runs[-1]["run_dir"]) / "manifest.json").exists(), kind
    assert len(seen) >= 3
    for kwargs in seen:  # the file system received the resolved values
        assert kwargs["passphrase"] == BLOCK_MARK and kwargs["connection_string"] == ENV_MARK
    manifest = json.loads((Path(runs[0]["run_dir"]) / "manifest.json").read_text())
    assert "CF_TEST_STORAGE_SECRET" in json.dumps(manifest)  # the reference is recorded, not its value
    # an inline value through the Prefect server: refused by the parameter schema before it is stored
    deployment_id = run_pipeline.to_deployment(name="storage-secret-scan").apply()
    inline = _spec(_remote(data.joinpath("folder")), {"connection_string": INLINE_MARK})
    with get_client(sync_client=True) as client, pytest.raises(PrefectHTTPStatusError) as exc:
        client.create_flow_run_from_deployment(deployment_id, parameters={"spec": inline})
    assert exc.value.response.status_code == 409
    # the scan
    assert _scan(work) == []
    captured = capsys.readouterr()
    for mark in (ENV_MARK, BLOCK_MARK, INLINE_MARK):
        assert mark not in captured.out + captured.err + caplog.text
    with get_client(sync_client=True) as client:
        objects = json.dumps(
            [
                [r.model_dump(mode="json") for r in client.read_flow_runs()],
                [r.model_dump(mode="json") for r in client.read_task_runs()],
                [x.model_dump(mode="json") for x in client.read_logs()],
                [a.model_dump(mode="json") for a in client.read_artifacts()],
                client.request("POST", "/events/filter", json={"limit": 50}).json(),
            ]
        )
    assert "cf-storage-secret" in objects or "CF_TEST_STORAGE_SECRET" in objects  # the scan saw the runs
    for mark in (ENV_MARK, BLOCK_MARK, INLINE_MARK):
        assert mark not in objects
    url = PREFECT_API_DATABASE_CONNECTION_URL.value() or ""
    db = Path(url.split("///", 1)[-1]) if "sqlite" in url else None
    assert db is not None and db.exists()
    for f in db.parent.glob(db.name + "*"):
        raw = f.read_bytes()  # the database file and its write-ahead log, raw bytes (the block's value is encrypted)
        assert ENV_MARK.encode() not in raw and INLINE_MARK.encode() not in raw and BLOCK_MARK.encode() not in raw
