"""Every shell block of README.md and docs/*.md works as pasted.

Each ```` ```bash ```` block runs with ``bash -e -o pipefail`` in a fresh working directory per document (blocks of
one document run in order there, so a later block sees what an earlier one made), with ``HOME`` in that
directory (``~`` too), this environment's ``bin`` first on ``PATH`` and no ``FLUSS_LAKE_*`` / ``DAGSTER_*``
variables. An HTML comment on the line before a block, ``<!-- docs-test: DIRECTIVE; DIRECTIVE -->``, says how
to run what cannot run as a one-shot command; nothing is skipped:

``install .ci/run``
    The block's leading ``&&`` steps create ``./.venv`` and install into it: each must be a step of ``.ci/run``,
    the CI entry point that performs them on every run (``-U`` = ``--upgrade``; CI installs the project with
    its extras). The steps after them run here, with ``.venv/bin/`` meaning this environment's ``bin``.
``suite .ci/run``
    The remaining step runs the test suite: it must be ``.ci/run``'s own test command (run here, it would run
    this test again).
``server PATH [FLAG]``
    Each remaining command is a server: started on free ports (each ``--port N`` / ``--http-port N`` replaced, or a
    ``--port`` added), it must answer ``GET http://127.0.0.1:PORT/PATH`` with 200 on the port of FLAG (default
    ``--port``), then stop with exit code 0 on SIGTERM, leaving no process of its group behind.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
CI_RUN = REPO / ".ci" / "run"
BIN = Path(sys.executable).parent
STARTUP_S = 180
STOP_S = 60
_FENCE = re.compile(r"^```(\w*)\s*$")
_ANNOTATION = re.compile(r"^<!--\s*docs-test:\s*(.*?)\s*-->\s*$")
_SHELLS = {"bash", "sh", "shell"}
_DIRECTIVES = {"install", "suite", "server"}


@dataclass(frozen=True)
class Block:
    """One shell block: where it is, its text and its directives (name -> argument)."""

    document: Path
    line: int
    text: str
    directives: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.document.relative_to(REPO)}:{self.line}"


def shell_blocks(document: Path) -> list[Block]:
    """The shell blocks of a Markdown file with the directives of the annotation right above each."""
    lines = document.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        if fence.group(1) in _SHELLS:
            note = _ANNOTATION.match(lines[i - 1]) if i else None
            directives = {}
            for item in filter(None, (part.strip() for part in (note.group(1) if note else "").split(";"))):
                name, _, argument = item.partition(" ")
                directives[name] = argument.strip()
            blocks.append(Block(document, i + 1, "\n".join(lines[i + 1 : end]), directives))
        i = end + 1
    return blocks


def _environment(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLUSS_LAKE_", "DAGSTER_"))}
    env["HOME"] = str(workdir)
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def _commands(text: str) -> list[str]:
    """The block's commands: one per line, comments dropped."""
    words = (shlex.split(line, comments=True) for line in text.splitlines())
    return [" ".join(w) for w in words if w]


def _ci_steps() -> list[str]:
    return [" ".join(shlex.split(line, comments=True)) for line in CI_RUN.read_text().splitlines()]


def _same_install(step: str, ci_step: str) -> bool:
    """The same command up to the upgrade flag's spelling and the project's extras."""

    def norm(text: str) -> str:
        text = re.sub(r"(^| )-U( |$)", r"\1--upgrade\2", text)
        return re.sub(r"\.\[[\w,]+\]", ".", text)

    return norm(step) == norm(ci_step)


def _split_install(block: Block) -> list[str]:
    """Check the block's install steps against .ci/run; return the steps that follow them."""
    [command] = _commands(block.text)
    steps = [s.strip() for s in command.split("&&")]
    ci = _ci_steps()
    installs = [s for s in steps if s.startswith(("python3 -m venv .venv", ".venv/bin/pip "))]
    assert steps[: len(installs)] == installs, f"{block.where}: the install steps must come first"
    for step in installs:
        assert any(_same_install(step, c) for c in ci), f"{block.where}: {step!r} is not a step of .ci/run"
    return steps[len(installs) :]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _with_ports(command: str, flag: str) -> tuple[str, int]:
    """The command with a free port for each of its port options (a ``--port`` added if it has none), and the port
    of `flag`."""
    ports: dict[str, int] = {}

    def free(match: re.Match) -> str:
        ports[match.group(1)] = _free_port()
        return f"{match.group(1)} {ports[match.group(1)]}"

    line = re.sub(r"(?<![\w-])(--port|--http-port) \d+", free, command)
    if not ports:
        ports["--port"] = _free_port()
        line = f"{line} --port {ports['--port']}"
    assert flag in ports, f"{command!r} has no {flag} option"
    return line, ports[flag]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _serve_and_stop(command: str, argument: str, workdir: Path, where: str) -> None:
    path, flag = ([*argument.split(), "--port"])[:2]
    line, port = _with_ports(command, flag)
    log = workdir / f"server-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=workdir, env=_environment(workdir), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            assert proc.poll() is None, f"{where}: {line!r} exited early:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"{where}: {line!r} did not serve in {STARTUP_S} s"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(STOP_S)
        assert code == 0, f"{where}: {line!r} exited {code} on SIGTERM:\n{log.read_text()[-3000:]}"
        deadline = time.monotonic() + 10
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _group_alive(proc.pid), f"{where}: {line!r} left processes behind"
    finally:
        if _group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.wait(STOP_S)


def _run_script(script: str, workdir: Path, where: str) -> None:
    out = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=workdir, env=_environment(workdir),
                         capture_output=True, text=True, timeout=900, check=False)
    assert out.returncode == 0, f"{where} failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"


def run_block(block: Block, workdir: Path) -> None:
    unknown = set(block.directives) - _DIRECTIVES
    assert not unknown, f"{block.where}: unknown docs-test directives {sorted(unknown)}"
    if not block.directives:
        _run_script(block.text, workdir, block.where)
        return
    commands = _split_install(block) if "install" in block.directives else _commands(block.text)
    if "suite" in block.directives:
        [suite] = commands
        assert suite in _ci_steps(), f"{block.where}: {suite!r} is not .ci/run's test command"
        return
    commands = [c.replace(".venv/bin/", f"{BIN}/") for c in commands]  # the venv the steps installed: this one
    if "server" in block.directives:
        for command in commands:
            _serve_and_stop(command, block.directives["server"], workdir, block.where)
    else:
        _run_script(" && ".join(commands), workdir, block.where)


def test_the_runner_finds_every_shell_block_and_knows_every_directive():
    blocks = [b for doc in DOCUMENTS for b in shell_blocks(doc)]
    wheres = {b.where.split(":")[0] for b in blocks}
    assert {"README.md", "docs/DAGSTER.md"} <= wheres
    assert all(set(b.directives) <= _DIRECTIVES for b in blocks), [b.directives for b in blocks]
    readme = shell_blocks(REPO / "README.md")
    assert [b.directives for b in readme[:2]] == [
        {"install": ".ci/run", "server": "/server_info"}, {"install": ".ci/run", "suite": ".ci/run"}]
    # the checks have teeth: a step .ci/run does not perform, or another test command, is refused
    fake = Block(REPO / "README.md", 0, "python3 -m venv .venv && .venv/bin/pip install -e other && true",
                 {"install": ".ci/run"})
    with pytest.raises(AssertionError, match=r"not a step of \.ci/run"):
        _split_install(fake)
    with pytest.raises(AssertionError, match=r"not \.ci/run's test command"):
        run_block(Block(REPO / "README.md", 0, ".venv/bin/python -m pytest -x",
                        {"install": ".ci/run", "suite": ".ci/run"}), REPO)


@pytest.mark.parametrize("document", [d for d in DOCUMENTS if shell_blocks(d)], ids=lambda d: d.name)
def test_shell_blocks_work_as_pasted(document, tmp_path):
    for block in shell_blocks(document):
        run_block(block, tmp_path)
