"""What a command imports: the server and the scheduler know tasks, never architectures
(importing them, and building a server's state, pulls in no BERT code), and ``openhood``'s
parser and its one-shot ``embed`` import only what they run, so start-up does not pay for NumPy,
the batcher, the engine or the HTTP stack they never use. A fresh interpreter per check, so
other tests' imports do not count."""

from __future__ import annotations

import subprocess
import sys

# Third-party packages whose import costs tens to hundreds of milliseconds.
HEAVY = ("numpy", "numba", "onnxruntime", "fastapi", "uvicorn", "starlette", "scipy", "psutil", "PIL")


def imported_after(code: str) -> list[str]:
    """The modules loaded after ``code`` runs in a fresh interpreter."""
    code += "\nimport sys\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.split()


def test_server_and_scheduler_import_no_architecture_code():
    modules = imported_after(
        "import openhood.server.app, openhood.server.state, openhood.cli.serve, openhood.scheduler"
    )
    assert [m for m in modules if m.startswith(("openhood.engine", "openhood.export"))] == []


def test_building_the_parser_imports_no_heavy_module():
    # serve's and train's options read their defaults from plain dataclasses (server.config,
    # scheduler.policy, models.options, train.config), never from the modules that use them.
    modules = imported_after("from openhood.cli import build_parser; build_parser()")
    heavy = sorted({m.split(".")[0] for m in modules} & set(HEAVY))
    ours = [
        m
        for m in modules
        if m.startswith(("openhood.backends", "openhood.engine", "openhood.models.loading", "openhood.models.served"))
        or (m.startswith("openhood.scheduler.") and m != "openhood.scheduler.policy")
        or (m.startswith("openhood.server.") and m != "openhood.server.config")
    ]
    assert heavy == [] and ours == [], (heavy, ours)


def test_one_shot_embedding_never_schedules_or_serves():
    code = "import contextlib, io\nfrom openhood.cli import main\nwith contextlib.redirect_stdout(io.StringIO()):\n    assert main(['embed', 'x']) == 0"
    modules = imported_after(code)
    unused = [
        m
        for m in modules
        if m.split(".")[0] in ("onnxruntime", "fastapi", "uvicorn", "starlette", "PIL")
        or (m.startswith("openhood.scheduler.") and m != "openhood.scheduler.policy")
        or (m.startswith("openhood.server.") and m != "openhood.server.config")
    ]
    assert unused == []
