"""The docs a newcomer reads name things that exist: every relative link and repository path in
README.md and docs/*.md resolves, docs/architecture.md's modules and dotted names are in the tree,
and docs/benchmarks.md stays a short page of current results with no machine's own paths.

Paths are read from the text, not imported: the check costs milliseconds and runs on any tree,
which is the point (a rename that forgets a doc fails here). The trade-off: a name written in
prose without a path or a dotted form is not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "openhood"
DOCS = ROOT / "docs"
ARCHITECTURE = DOCS / "architecture.md"
BENCHMARKS = DOCS / "benchmarks.md"
BENCHMARKS_MAX_LINES = 400

LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
# A path as the docs write it: from the repository root (src/, tests/, …) or, for a package of
# openhood, from src/openhood/ (``engine/graph/packing.py``, ``server/routes/``).
PATH = re.compile(r"(?<![\w./~-])(?P<path>(?:[a-z_0-9]+/)+(?:[\w.-]+\.(?:py|toml|md|json|svg))?)")
PACKAGES = {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()}
REPO_DIRS = {"src", "tests", "benchmarks", "scripts", "deploy"}
# architecture.md also names docs/ files; elsewhere docs/ can be another project's (TEI's docs/openapi.json)
ARCHITECTURE_DIRS = REPO_DIRS | {"docs"}
# A machine's own absolute paths (a home, a scratch or work folder); /dev/shm and the like are
# the OS's, not a machine's.
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|root|home|tmp|Users|mnt|srv|opt)/")
DOTTED = re.compile(r"(?<![\w.])(?P<name>(?:openhood\.)?[a-z_]+(?:\.[A-Za-z_]\w*)+)")
TABLE_ROW = re.compile(r"^\|\s*`(?P<dir>[\w/]+/)`\s*\|(?P<cells>.*)$", re.M)


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def relative_links(doc: Path) -> list[str]:
    """Broken relative links of one markdown file (URLs, mail and in-page anchors skipped)."""
    broken = []
    for m in LINK.finditer(doc.read_text(encoding="utf-8")):
        target = m["target"].split("#", 1)[0]
        if not target or re.match(r"^[a-z]+:", target):
            continue
        if not (doc.parent / target).exists():
            broken.append(m["target"])
    return broken


def resolve_path(path: str, root_dirs: set[str] = ARCHITECTURE_DIRS) -> Path | None:
    """Where a written path points, or None for a word with a slash in it (``P99/P50``)."""
    first = path.split("/", 1)[0]
    if first in root_dirs:
        return ROOT / path
    return SRC / path if first in PACKAGES else None


def missing_paths(text: str, root_dirs: set[str] = REPO_DIRS) -> list[str]:
    found = {m["path"]: resolve_path(m["path"], root_dirs) for m in PATH.finditer(text)}
    return sorted(p for p, where in found.items() if where is not None and not where.exists())


def module_file(parts: list[str]) -> Path | None:
    base = SRC.joinpath(*parts)
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return base.with_suffix(".py") if base.with_suffix(".py").is_file() else None


def defines(source: str, name: str) -> bool:
    return bool(
        re.search(rf"^\s*(?:def|class)\s+{name}\b|^{name}\s*[:=]|^\s*(?:from|import)\b.*\b{name}\b", source, re.M)
    )


def dotted_name_exists(name: str) -> bool:
    """``openhood.models.loading.task_for`` or ``models.loading.task_for``: the longest prefix that
    is a module, then a name that module defines or imports (and at most one attribute of it)."""
    parts = name.removeprefix("openhood.").split(".")
    for cut in range(len(parts), -1, -1):  # down to 0: the package's own __init__.py
        found = module_file(parts[:cut])
        if found is not None:
            rest = parts[cut:]
            return not rest or (len(rest) <= 2 and defines(found.read_text(encoding="utf-8"), rest[0]))
    return False


def architecture_names(text: str) -> tuple[set[str], set[str]]:
    """(paths, dotted names) that docs/architecture.md mentions, the engine table's modules included."""
    paths = {m["path"] for m in PATH.finditer(text) if resolve_path(m["path"]) is not None}
    for row in TABLE_ROW.finditer(text):
        for module in re.findall(r"`([\w]+\.py)`", row["cells"]):
            paths.add(row["dir"] + module)
    dotted = set()
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # fences would pair the backticks wrongly
    for span in re.findall(r"`([^`]+)`", prose):
        for m in DOTTED.finditer(span):
            name = m["name"]
            first = name.removeprefix("openhood.").split(".", 1)[0]
            if (name.startswith("openhood.") or first in PACKAGES) and not name.endswith((".py", ".md", ".toml")):
                dotted.add(name)
    return paths, dotted


@pytest.mark.parametrize("doc", doc_files(), ids=lambda p: p.name)
def test_relative_links_resolve(doc):
    assert relative_links(doc) == []


@pytest.mark.parametrize("doc", [d for d in doc_files() if d != ARCHITECTURE], ids=lambda p: p.name)
def test_repository_paths_exist(doc):
    """Every src/, tests/, benchmarks/, scripts/, deploy/ or openhood package path a doc names is in
    the tree (architecture.md has its own, stricter test below)."""
    assert missing_paths(doc.read_text(encoding="utf-8")) == []


def test_every_path_and_module_architecture_names_exists():
    paths, dotted = architecture_names(ARCHITECTURE.read_text(encoding="utf-8"))
    assert len(paths) > 40 and len(dotted) > 5  # the extraction still finds what the page names
    assert sorted(p for p in paths if not resolve_path(p).exists()) == []
    assert sorted(n for n in dotted if not dotted_name_exists(n)) == []


def test_the_checks_find_a_missing_name():
    """The extraction and resolution above, on names that do not exist."""
    paths, dotted = architecture_names(
        "`models/features.py`, `engine/topk.py`, `openhood.models.nope`, `openhood.models.loading.task_for`\n"
        "| `engine/graph/` | `graph.py`, `nope.py` | x |\n"
    )
    assert {"models/features.py", "engine/topk.py", "engine/graph/nope.py"} <= paths
    assert {"openhood.models.nope", "openhood.models.loading.task_for"} == dotted
    assert not resolve_path("models/features.py").exists() and not resolve_path("engine/topk.py").exists()
    assert not dotted_name_exists("openhood.models.nope")
    assert dotted_name_exists("openhood.models.loading.task_for") and dotted_name_exists("openhood.NUMBA_CACHE_DIR")
    written = "`tests/no_such_test.py`, `src/openhood/cli/serve.py`, `engine/packing.py`, P99/P50, TEI's docs/x.json"
    assert missing_paths(written) == ["engine/packing.py", "tests/no_such_test.py"]


def test_benchmarks_page_is_short_and_names_no_machine_path():
    text = BENCHMARKS.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= BENCHMARKS_MAX_LINES
    assert [m.group(0) for m in MACHINE_PATH.finditer(text)] == []
    assert MACHINE_PATH.search("python /work/main/.venv-ref/bin/python") is not None
    assert MACHINE_PATH.search("decode into /dev/shm, corpus ../shared/data/dev_corpus.jsonl") is None
