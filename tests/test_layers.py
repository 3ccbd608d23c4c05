"""The server and the scheduler know tasks, never architectures: importing them (and building a
server's state) pulls in no BERT code. A fresh interpreter, so other tests' imports do not count."""

from __future__ import annotations

import subprocess
import sys


def test_server_and_scheduler_import_no_architecture_code():
    code = (
        "import sys, openhood.server.app, openhood.server.state, openhood.cli.serve, openhood.scheduler\n"
        "print(sorted(m for m in sys.modules if m.startswith(('openhood.engine', 'openhood.export'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout
