"""``run_ui``'s stop logic on a small stand-in process tree (a server that starts a worker, like ``dagster dev``):
Ctrl-C while SIGINT was inherited as ignored, a server that shuts down on SIGTERM, and one that ignores it
and must be killed with its whole process group. The real ``dagster dev`` is stopped in test_demo_ui.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]

# The stand-in server: starts a worker (same process group), writes both pids, then waits. On SIGTERM it either
# stops its worker and exits 0, or ignores the signal.
SERVER = """
import os, signal, subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
if sys.argv[2] == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    def stop(signum, frame):
        worker.terminate(); worker.wait(); sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
with open(sys.argv[1], "w") as f:
    f.write(f"{os.getpid()} {worker.pid} {signal.getsignal(signal.SIGINT) != signal.SIG_IGN}")
while True:
    time.sleep(0.1)
"""

# run_ui in a process that inherited SIGINT as ignored (a `cmd &` from a non-interactive shell)
RUNNER = """
import signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
from pathlib import Path
from assets.ui import run_ui
sys.exit(run_ui(home=Path(sys.argv[1]), stop_timeout=2.0,
                command=[sys.executable, "-c", sys.argv[2], sys.argv[3], sys.argv[4]]))
"""


@pytest.fixture
def started():
    """Process groups the test started; any still alive at teardown are killed (a failing test leaves none)."""
    groups: list[int] = []
    yield groups
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _start(tmp_path: Path, behaviour: str, started: list[int]) -> tuple[subprocess.Popen, list[int], bool]:
    pids = tmp_path / "pids"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("DAGSTER_HOME", None)
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, str(tmp_path / "home"), SERVER, str(pids), behaviour],
                              env=env, cwd=tmp_path, start_new_session=True, stdout=subprocess.DEVNULL)
    started.append(runner.pid)
    deadline = time.monotonic() + 60
    while not (pids.exists() and pids.read_text().count(" ") == 2):
        assert runner.poll() is None and time.monotonic() < deadline, "the stand-in server did not start"
        time.sleep(0.05)
    server, worker, sigint_default = pids.read_text().split()
    started.append(int(server))  # the server leads its own process group (run_ui starts it in a new session)
    return runner, [int(server), int(worker)], sigint_default == "True"


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_request_is_forwarded_and_the_server_stops_its_workers(tmp_path, sig, started):
    runner, pids, sigint_default = _start(tmp_path, "stop", started)
    assert sigint_default, "the server must not inherit SIGINT as ignored (dagster dev would then ignore SIGTERM too)"
    runner.send_signal(sig)
    assert runner.wait(30) == 0
    assert not _alive(pids)
    assert (tmp_path / "home" / "dagster" / "dagster.yaml").exists()


def test_a_server_ignoring_sigterm_is_killed_with_its_process_group(tmp_path, started):
    runner, pids, _ = _start(tmp_path, "ignore", started)
    t0 = time.monotonic()
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(60) == 0
    assert not _alive(pids)
    assert time.monotonic() - t0 >= 2.0  # it was given stop_timeout before the group was ended
