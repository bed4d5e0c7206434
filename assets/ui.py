"""Run the Dagster UI (``dagster dev``) on the embedded default, and stop it cleanly on Ctrl-C or SIGTERM.

``dagster dev`` copies its SIGINT handler onto SIGTERM; if it inherits SIGINT as *ignored* (a process started
with ``&`` from a non-interactive shell) it then ignores both and cannot be stopped (STACK-NOTES §5). So
:func:`run_ui` installs its own handlers before starting the child (exec resets handlers, not ignores: the
child starts with both signals at their defaults), starts it as the leader of a new process group, forwards
the first SIGINT/SIGTERM to it and waits; whatever is left of the group after ``stop_timeout`` is terminated,
then killed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from assets.resources import HOME_ENV, fluss_lake_home

__all__ = ["DAGSTER_YAML", "group_processes", "prepare_home", "run_ui", "ui_command"]

#: Written to ``$DAGSTER_HOME/dagster.yaml`` when there is none: no telemetry, no sign-up modal.
DAGSTER_YAML = """\
# Written by `fluss-lake ui`: the embedded default Dagster instance of fluss-lake.
telemetry:
  enabled: false
nux:
  enabled: false
"""


def prepare_home(home: Path) -> Path:
    """Create the home folder and its Dagster instance folder (``$DAGSTER_HOME`` if set, else ``<home>/dagster``);
    returns the latter, absolute (Dagster refuses a relative ``DAGSTER_HOME``).

    An existing ``dagster.yaml`` is left as it is.

    Examples
    --------
    >>> import tempfile
    >>> dagster_home = prepare_home(Path(tempfile.mkdtemp()))
    >>> "enabled: false" in (dagster_home / "dagster.yaml").read_text()
    True
    """
    dagster_home = Path(os.environ.get("DAGSTER_HOME") or home / "dagster").expanduser().resolve()  # Dagster: absolute
    dagster_home.mkdir(parents=True, exist_ok=True)
    config = dagster_home / "dagster.yaml"
    if not config.exists():
        config.write_text(DAGSTER_YAML)
    return dagster_home


def ui_command(*, host: str, port: int) -> list[str]:
    """The ``dagster dev`` command line serving the ``assets`` code location."""
    return [sys.executable, "-m", "dagster", "dev", "-m", "assets.definitions", "-h", host, "-p", str(port)]


def group_processes(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.info["pid"]) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(proc.info["pid"])
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def _end_group(pgid: int, grace: float) -> None:
    """SIGTERM what is left of the group, then SIGKILL it after `grace` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not group_processes(pgid):
            return
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and group_processes(pgid):
            time.sleep(0.2)


def run_ui(
    *,
    host: str = "127.0.0.1",
    port: int = 3000,
    home: Path | None = None,
    stop_timeout: float = 30.0,
    command: Sequence[str] | None = None,
) -> int:
    """Start ``dagster dev`` on the ``assets`` code location and block until it exits or is asked to stop.

    `command` replaces the server command line (default: :func:`ui_command`). After a stop request the server
    gets `stop_timeout` seconds; then its process group is terminated and, ``min(10, stop_timeout)`` seconds
    later, killed. Returns 0 after a requested stop, else the server's exit code.
    """
    home = (home or fluss_lake_home()).resolve()
    dagster_home = prepare_home(home)
    env = {**os.environ, HOME_ENV: str(home), "DAGSTER_HOME": str(dagster_home)}
    requested: list[int] = []

    def request_stop(signum: int, _frame: object) -> None:
        requested.append(signum)

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        child = subprocess.Popen(list(command or ui_command(host=host, port=port)), env=env, start_new_session=True)
        print(f"fluss-lake ui: Dagster UI on http://{host}:{port} (home {home}); Ctrl-C stops it", flush=True)
        while child.poll() is None and not requested:
            time.sleep(0.2)
        if requested and child.poll() is None:
            child.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(stop_timeout)
        _end_group(child.pid, grace=min(10.0, stop_timeout))
        code = child.wait()
        return 0 if requested else code
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
