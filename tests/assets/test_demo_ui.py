"""The main command for real: ``fluss-lake ui`` (here ``python -m assets.cli ui``) serves the demo's assets in the
Dagster UI, a headless Chromium shows them on the Assets page, and SIGTERM stops everything it started.

Startup takes 10-20 s, so one UI process serves the whole module, and the module has a single test that runs
the phases in order (pytest-xdist's default ``load`` mode would otherwise start one UI per worker); each phase
is a function whose assertion messages name it. The UI is started with SIGINT ignored, as a process started with ``&`` from a non-interactive shell is: plain
``dagster dev`` then ignores SIGTERM too (STACK-NOTES §5).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest
from test_demo_definitions import expected_asset_keys

from assets.tables import DEMO_TABLES, JOB_TABLES, SOURCE_TABLES

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
STARTUP_S = 150
STOP_BOUND_S = 60


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str, timeout: float = 5) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def _graphql(base: str, query: str) -> dict:
    request = urllib.request.Request(f"{base}/graphql", data=json.dumps({"query": query}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        body = json.loads(response.read())
    assert "errors" not in body, body
    return body["data"]


_ASSET_NODES = "{ assetNodes { assetKey { path } groupName hasAssetChecks } }"


class _Ui:
    def __init__(self, proc: subprocess.Popen, base: str, home: Path, log: Path) -> None:
        self.proc, self.base, self.home, self.log = proc, base, home, log


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    home = tmp_path_factory.mktemp("ui") / "home"
    log = home.parent / "ui.log"
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLUSS_LAKE_", "DAGSTER_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    with open(log, "wb") as out:
        command = [sys.executable, "-m", "assets.cli", "ui", "--port", str(port), "--home", str(home)]
        ignore_sigint_then_exec = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                                   "os.execv(sys.argv[1], sys.argv[1:])")
        proc = subprocess.Popen([sys.executable, "-c", ignore_sigint_then_exec, *command], cwd=REPO, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_S
    try:
        while True:  # the webserver answers first; the code location loads a little later
            assert proc.poll() is None, f"the UI exited early:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no UI after {STARTUP_S} s:\n{log.read_text()[-3000:]}"
            try:
                if _get(f"{base}/server_info")[0] == 200 and len(_graphql(base, _ASSET_NODES)["assetNodes"]) > 0:
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        yield _Ui(proc, base, home, log)
    finally:
        if proc.poll() is None:  # a failed test left it running
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(STOP_BOUND_S)


def _graphql_lists_every_demo_asset_with_its_checks(ui):
    nodes = _graphql(ui.base, _ASSET_NODES)["assetNodes"]
    assert {"/".join(n["assetKey"]["path"]) for n in nodes} == expected_asset_keys()
    groups = {"/".join(n["assetKey"]["path"]): n["groupName"] for n in nodes}
    assert {groups[name] for name in SOURCE_TABLES} == {"live"} and {groups[n] for n in JOB_TABLES} == {"jobs"}
    assert groups["lake/customer_360__hist"] == "lake" and groups["training/fraud_training_set"] == "training"
    assert all(n["hasAssetChecks"] for n in nodes if n["groupName"] != "training")
    assert _get(f"{ui.base}/server_info")[0] == 200
    assert (ui.home / "dagster" / "dagster.yaml").read_text().count("enabled: false") == 2


def _the_demo_materializes_from_the_ui(ui):
    launched = _graphql(ui.base, """mutation { launchRun(executionParams: {selector: {
        repositoryLocationName: "assets.definitions", repositoryName: "__repository__", jobName: "demo_pipeline"}}) {
        __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }""")["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]
    deadline = time.monotonic() + STARTUP_S
    status = None
    while time.monotonic() < deadline:
        status = _graphql(ui.base, f'{{ runOrError(runId: "{run_id}") {{ ... on Run {{ status }} }} }}')["runOrError"]["status"]
        if status in ("SUCCESS", "FAILURE", "CANCELED"):
            break
        time.sleep(1)
    assert status == "SUCCESS", ui.log.read_text()[-3000:]
    import fluss_lake as fl  # the run wrote into the embedded default under --home
    import tiering

    connection = fl.connect(str(ui.home / "live"))
    assert connection.list_tables("c360") == sorted(DEMO_TABLES)
    assert connection.get_table("c360.orders").to_polars().height > 0
    lake = tiering.Lake.local(ui.home / "lake")  # the embedded lake beside the store, under --home (same name)
    assert tiering.read_lake(lake, "c360.fraud_risk").collect().height == \
        connection.get_table("c360.payments").scan_log().height


def _assets_page_in_headless_chromium_shows_the_demo(ui, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "the browser test needs Debian's chromium: apt-get install -y chromium (.ci/run does this)"
    assert _graphql(ui.base, "mutation { setNuxSeen }") == {"setNuxSeen": True}  # no sign-up modal over the page
    # a tall window: the asset list is virtualized (only rows in view are in the DOM)
    dom = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
         "--no-first-run", f"--user-data-dir={tmp_path / 'chromium'}", "--window-size=1400,6000",
         "--virtual-time-budget=15000", "--dump-dom", f"{ui.base}/assets"],
        check=False, capture_output=True, text=True, timeout=120).stdout
    assert "<html" in dom
    missing = [name for name in DEMO_TABLES if f'href="/assets/{name}"' not in dom]
    assert not missing, f"asset links missing from the Assets page: {missing}"
    # prefixed keys: the page links their folders (lake/..., training/...) or the assets themselves
    for prefix in ("lake", "training"):
        assert f'href="/assets/{prefix}' in dom, f"no link to the {prefix} assets on the Assets page"


def _sigterm_stops_the_ui_and_everything_it_started(ui):
    started = psutil.Process(ui.proc.pid).children(recursive=True)
    assert any("dagster" in " ".join(p.cmdline()) for p in started)
    t0 = time.monotonic()
    ui.proc.send_signal(signal.SIGTERM)
    code = ui.proc.wait(STOP_BOUND_S)
    elapsed = time.monotonic() - t0
    assert code == 0, ui.log.read_text()[-3000:]
    alive = [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"left running after {elapsed:.1f} s: {[p.cmdline()[:4] for p in alive]}"
    with pytest.raises(urllib.error.URLError):
        _get(f"{ui.base}/server_info", timeout=2)


def test_the_ui_serves_runs_shows_and_stops_the_demo(ui, tmp_path):
    _graphql_lists_every_demo_asset_with_its_checks(ui)
    _the_demo_materializes_from_the_ui(ui)
    _assets_page_in_headless_chromium_shows_the_demo(ui, tmp_path)
    _sigterm_stops_the_ui_and_everything_it_started(ui)
