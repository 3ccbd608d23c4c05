"""Every fenced code block of README.md runs, in order, against a real `openhood serve` process.

The server is the README's own `openhood serve` line, started through bash in a scratch folder
(so its `$(python -c …)` and relative folders mean what they say) on a free port of 127.0.0.1,
after the blocks before it (`openhood convert`, `openhood train`) made its model folders. What the
test changes in a snippet, and nothing else: `127.0.0.1:8000` / `localhost:8000` become the
server's address; `curl` gets `--fail-with-body`, so an HTTP error (a 404 for a wrong model name)
fails the snippet instead of printing a body; the serve line gets the port and two start-up
knobs that leave every answer unchanged (one worker per model, a fixed token budget instead of
the start-up calibration). A block that must not run is preceded by `<!-- not-run: reason -->`;
every other block must be `sh` or `python`, and must have run and exited 0.
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
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
NOT_RUN = re.compile(r"<!--\s*not-run:\s*(?P<reason>\S.*?)\s*-->")
FENCE = re.compile(r"^```(?P<lang>[\w-]*)\n(?P<code>.*?)^```[ \t]*$", re.M | re.S)
README_ADDRESS = re.compile(r"\b(?:127\.0\.0\.1|localhost):8000\b")
SERVE = "openhood serve"
SERVE_KNOBS = "--workers 1 --max-batch-tokens 512"  # start-up speed only: no answer changes
READY_TIMEOUT_S = 240  # four models loading on busy shared cores
COMMAND_TIMEOUT_S = 300
# The module fixture runs every block inside the first test that asks for it: about a minute on
# two quiet cores, several on a machine shared with other test runs.
pytestmark = pytest.mark.timeout(900)


@dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    not_run: str | None  # the marker's reason, or None: the block runs

    @property
    def id(self) -> str:
        return f"L{self.line}-{self.lang or 'plain'}"


def readme_blocks(text: str) -> list[Block]:
    blocks = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip().splitlines()
        marker = NOT_RUN.fullmatch(before[-1].strip()) if before else None
        line = text.count("\n", 0, m.start()) + 1
        blocks.append(Block(line, m["lang"], m["code"], marker["reason"] if marker else None))
    return blocks


def shell_commands(code: str) -> list[str]:
    """The block's commands: physical lines joined while a line ends in a backslash or a quote is
    still open (a JSON body spread over lines)."""
    commands, pending = [], ""
    for raw in code.splitlines():
        pending = f"{pending}\n{raw}" if pending else raw
        if not pending.strip() or pending.rstrip().endswith("\\"):
            continue
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # "No closing quotation": the command goes on
            continue
        commands.append(pending)
        pending = ""
    assert not pending.strip(), f"unterminated command in README block: {pending!r}"
    return [c for c in commands if c.strip() and not c.lstrip().startswith("#")]


@dataclass
class Outcome:
    ran: bool = False
    failures: list[str] | None = None


class Runner:
    """Runs README blocks in a scratch folder with the virtual environment first on PATH."""

    def __init__(self, work: Path, port: int):
        self.work, self.port = work, port
        self.url = f"http://127.0.0.1:{port}"
        bin_dir = str(Path(sys.executable).parent)
        self.env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
        self.env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        self.server: subprocess.Popen | None = None
        self.log = work / "server.log"

    def rewrite(self, code: str) -> str:
        code = README_ADDRESS.sub(f"127.0.0.1:{self.port}", code)
        return re.sub(r"(?m)(^|\s)curl ", r"\1curl --fail-with-body ", code)

    def run_block(self, block: Block) -> list[str]:
        """The failures of one block (empty: it ran and every command exited 0)."""
        if block.lang == "python":
            script = self.work / f"readme_L{block.line}.py"
            script.write_text(self.rewrite(block.code))
            return self._check([sys.executable, str(script)], f"python block at line {block.line}")
        failures = []
        for command in shell_commands(block.code):
            if command.lstrip().startswith(SERVE):
                failures += self.start_server(command)
            else:
                failures += self._check(["bash", "-c", "set -o pipefail\n" + self.rewrite(command)], command)
        return failures

    def _check(self, argv: list[str], what: str) -> list[str]:
        try:
            out = subprocess.run(
                argv, cwd=self.work, env=self.env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            return [f"{what}\n  timed out after {COMMAND_TIMEOUT_S} s"]
        if out.returncode != 0:
            return [f"{what}\n  exit {out.returncode}\n  stdout: {out.stdout[-1500:]}\n  stderr: {out.stderr[-1500:]}"]
        return []

    def start_server(self, command: str) -> list[str]:
        assert self.server is None, "README.md has more than one runnable `openhood serve` line"
        assert "#" not in command, "the serve line takes arguments appended by the test: no trailing comment"
        line = f"exec {command} --host 127.0.0.1 --port {self.port} {SERVE_KNOBS}"  # exec: SIGTERM reaches it
        with open(self.log, "wb") as log:
            self.server = subprocess.Popen(
                ["bash", "-c", line], cwd=self.work, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + READY_TIMEOUT_S
        with httpx.Client(timeout=httpx.Timeout(10.0, connect=1.0)) as client:
            while time.monotonic() < deadline:
                if self.server.poll() is not None:
                    return [f"{command}\n  exited {self.server.returncode}:\n{self.log.read_text()[-3000:]}"]
                try:
                    if client.get(self.url + "/health/ready").status_code == 200:
                        return []
                except httpx.TransportError:
                    pass
                time.sleep(0.25)
        return [f"{command}\n  not ready within {READY_TIMEOUT_S} s:\n{self.log.read_text()[-3000:]}"]

    def stop_server(self) -> int | None:
        if self.server is None:
            return None
        if self.server.poll() is None:
            self.server.send_signal(signal.SIGTERM)
            try:
                self.server.wait(60)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait(10)
        return self.server.returncode


BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory):
    """Every runnable block, in README order, once; then the server is stopped and must exit 0."""
    work = tmp_path_factory.mktemp("readme")
    (work / "tests").symlink_to(ROOT / "tests")  # the snippets run from the repository root
    runner = Runner(work, free_port())
    outcomes = {b.line: Outcome() for b in BLOCKS}
    try:
        for block in BLOCKS:
            if block.not_run is None:
                outcomes[block.line] = Outcome(ran=True, failures=runner.run_block(block))
        yield runner, outcomes
    finally:
        code = runner.stop_server()
    assert code == 0, f"the README's server exited {code}:\n{runner.log.read_text()[-3000:]}"


def test_the_readme_has_one_runnable_serve_line_and_runs_python_and_shell():
    runnable = [b for b in BLOCKS if b.not_run is None]
    assert {b.lang for b in runnable} == {"sh", "python"}
    serves = [c for b in runnable if b.lang == "sh" for c in shell_commands(b.code) if c.lstrip().startswith(SERVE)]
    assert len(serves) == 1, serves
    assert any(b.not_run for b in BLOCKS)  # the marker is in use, so its spelling is checked below


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_readme_block(block, readme_run):
    _, outcomes = readme_run
    if block.not_run is not None:
        pytest.skip(f"marked not-run: {block.not_run}")
    outcome = outcomes[block.line]
    assert outcome.ran, f"README block at line {block.line} never ran"
    assert not outcome.failures, "\n\n".join(outcome.failures)


def test_every_unmarked_block_ran(readme_run):
    _, outcomes = readme_run
    unmarked = {b.line for b in BLOCKS if b.not_run is None}
    assert unmarked and unmarked == {line for line, o in outcomes.items() if o.ran}


def test_a_snippet_asking_for_a_model_the_server_lacks_fails(readme_run):
    """The harness itself: the README's embeddings request with a wrong model name must fail (404)."""
    runner, _ = readme_run
    block = next(b for b in BLOCKS if b.lang == "sh" and "/v1/embeddings" in b.code)
    broken = Block(block.line, "sh", block.code.replace('"model": "all-MiniLM-L6-v2"', '"model": "minilm"'), None)
    assert broken.code != block.code
    failures = runner.run_block(broken)
    assert failures and all("exit 22" in f for f in failures), failures  # curl's status for an HTTP error
