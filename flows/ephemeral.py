"""The CLI's embedded Prefect API: started at the beginning of a run, so it boots while the run imports its code.

With ``PREFECT_API_URL`` unset, Prefect starts a temporary API server on the first client call
(``prefect.server.api.server.SubprocessASGIServer``): the run then waits for its boot (~6 s, more under load)
after all its own imports, and the client process first imports the whole server package (~4 s) only to reach
that class. :func:`embedded_api` starts the same server the same way (same command, environment, database under
``PREFECT_HOME``, UI off) as soon as the CLI knows it will run a flow, points this process at it through
``PREFECT_API_URL``, and stops it at exit as Prefect does (SIGTERM, then SIGKILL after 5 s). The server boots
in its own process while the CLI imports the models, Great Expectations and matplotlib; the runs, task runs and
artifacts land in the same database as before. With an API configured (environment or profile), or the
ephemeral server disabled, it does nothing.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import importlib.util
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

_SERVER_ENV = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
_PORT_IN_USE = 3  # uvicorn's exit code when the port is taken


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmbeddedAPI:
    """A temporary Prefect API server process (``None`` process: an API is configured, nothing started)."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self._env: dict[str, str] = {}
        self._timeout = 20.0
        self._ready = False
        self._confirmed = False
        self.log = logging.getLogger("prefect")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def launch(self) -> None:
        """Start the server process unless ``PREFECT_API_URL`` is set; :meth:`confirm` checks the other settings.

        Before Prefect is imported (~2 s) only the environment is known: the server is started at once and stopped
        by :meth:`confirm` when a profile or settings file configures an API. With Prefect imported already (a
        flow test, a notebook), the settings are checked first.
        """
        if "PREFECT_API_URL" in os.environ:
            self._confirmed = True
            return
        if "prefect.settings" in sys.modules:
            self.confirm()
            return
        self._env = {**os.environ, **_SERVER_ENV}
        self._launch()

    def confirm(self) -> None:
        """Keep the server if Prefect's settings call for the embedded API (else stop it); point this process at it."""
        if self._confirmed:
            return
        self._confirmed = True
        from prefect.settings import get_current_settings

        settings = get_current_settings()
        if settings.api.url or not settings.server.ephemeral.enabled:
            self._terminate()
            return
        self._timeout = float(settings.server.ephemeral.startup_timeout_seconds)
        if self.process is None:
            self._env = {**os.environ, **_SERVER_ENV, **settings.to_environment_variables(exclude_unset=True)}
            self._launch()
        atexit.register(self.stop)
        os.environ["PREFECT_API_URL"] = self.url
        _refresh_settings()

    def _launch(self) -> None:
        spec = importlib.util.find_spec("prefect")  # the package's folder, without importing it
        assert spec is not None and spec.submodule_search_locations is not None, "prefect is not installed"
        app_dir = str(Path(next(iter(spec.submodule_search_locations))).parent)
        self.port = _free_port()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--app-dir",
                app_dir,
                "--factory",
                "prefect.server.api.server:create_app",
                *("--host", "127.0.0.1", "--port", str(self.port), "--log-level", "error", "--lifespan", "on"),
            ],
            env=self._env,
        )

    def wait(self, warm: Iterable[str] = ()) -> None:
        """Import the modules ``warm`` (while the server boots), then block until the server answers ``/health``."""
        self.confirm()
        if self.process is None or self._ready:
            return
        for name in warm:
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
        import httpx

        self.log.info(  # Prefect's own message; its console logging is set up by now
            "Starting temporary server on http://127.0.0.1:%d\nSee https://docs.prefect.io/v3/concepts/server"
            "#how-to-guides for more information on running a dedicated Prefect server.",
            self.port,
        )
        deadline = time.monotonic() + self._timeout
        with httpx.Client() as client:
            while time.monotonic() < deadline:
                code = self.process.poll()
                if code == _PORT_IN_USE:
                    self._launch()
                    os.environ["PREFECT_API_URL"] = self.url
                    _refresh_settings()
                    continue
                if code is not None:
                    raise RuntimeError(f"Ephemeral Prefect API server process exited with code {code}.")
                try:
                    if client.get(f"{self.url}/health").status_code == 200:
                        self._ready = True
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
        raise RuntimeError(
            "Timed out while attempting to connect to ephemeral Prefect API server "
            f"(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS={self._timeout:g})."
        )

    def stop(self) -> None:
        if self.process is not None and self._confirmed:
            self.log.info("Stopping temporary server on http://127.0.0.1:%d", self.port)
        self._terminate()

    def _terminate(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None


def _refresh_settings() -> None:
    """Make ``PREFECT_API_URL`` as set now the process-wide setting (threads without a context read it)."""
    from prefect.context import refresh_global_settings_context

    refresh_global_settings_context()


def embedded_api() -> EmbeddedAPI:
    """Start the embedded API now (unless an API is configured); call ``confirm()`` once the run is known to go
    ahead (``stop()`` if it does not) and ``wait()`` before the run.

    The server is stopped at interpreter exit, as Prefect stops its own: after Prefect's log and event workers have
    sent what they hold (exit handlers run last-registered first, and this one is registered before theirs).
    """
    api = EmbeddedAPI()
    api.launch()
    return api
