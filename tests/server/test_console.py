"""``GET /console`` in a real browser: Playwright driving Debian's chromium against a real
`openhood serve` process with four models (MiniLM, SmolLM2, EfficientNet-Lite0, a digits MLP).

The page loads nothing from outside loopback, its live numbers move while `openhood loadtest`
runs, a chat answer streams into it piece by piece, a dropped photo gets its known top-1 class,
and with an API key set the live stream is refused until the key is typed in. The sampler behind
the stream has its own tests (test_console_snapshot.py).
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest

from openhood.models import default_model_dir

from .conftest import API_KEY, ServerProcess

PHOTOS = Path(__file__).parents[1] / "fixtures" / "vision" / "photos"
# What .ci/run's chromium gets: no first-run, sync, component updates or background requests.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
WAIT_MS = 60_000  # generous: two shared cores, four models
PAGE_BUDGET_BYTES = 300_000  # the page-weight budget
# Bounded: 15 requests/s for 4 s, at most 80 requests, to the embedding model; a long read timeout
# so a busy machine slows the requests down instead of making the load test give up on them.
LOADTEST_ARGS = ["--rate", "15", "--duration", "4", "--warmup", "0", "--quiet", "--model", "minilm"]
LOADTEST_ARGS += ["--max-requests", "80", "--timeout", "60"]


@pytest.fixture(scope="module")
def browser(missing_tool):
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        missing_tool("chromium is not installed (apt-get install -y chromium)", "OPENHOOD_REQUIRE_BROWSER")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing_tool("playwright is not installed (pip install -e '.[test]')", "OPENHOOD_REQUIRE_BROWSER")
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def console_server(tmp_path_factory, smollm2_path, effnet_dir, digits_mlp_dir):
    srv = ServerProcess(
        tmp_path_factory.mktemp("console") / "server.log",
        "--model",
        f"minilm={default_model_dir()}",
        "--model",
        f"smollm2={smollm2_path}",
        "--model",
        f"effnet={effnet_dir}",
        "--model",
        f"digits={digits_mlp_dir}",
        "--workers",
        "1",
        "--threads",
        "1",
        "--buckets",
        "32",
        "--max-body-bytes",
        str(1 << 20),
        "--gen-max-running",
        "2",
        "--gen-max-context",
        "512",
    )
    yield srv
    assert srv.stop() == 0


def open_console(browser, url: str, **context):
    """A fresh page on ``url``/console, with every request URL and page error it makes recorded."""
    page = browser.new_context(viewport={"width": 1280, "height": 800}, **context).new_page()
    page.set_default_timeout(WAIT_MS)
    page.requests, page.errors = [], []
    page.on("request", lambda r: page.requests.append(r.url))
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.goto(url + "/console")
    return page


def ticks_at_least(page, n: int) -> None:
    page.wait_for_function(f"() => Number(document.body.dataset.ticks || 0) >= {n}")


@pytest.fixture(scope="module")
def page(browser, console_server):
    page = open_console(browser, console_server.url)
    ticks_at_least(page, 2)
    yield page
    page.context.close()


def card_value(page, model: str, key: str) -> str:
    return page.inner_text(f'[data-model="{model}"] [data-k="{key}"]')


def test_page_loads_only_from_loopback_within_its_weight(page, console_server):
    resp = httpx.get(console_server.url + "/console", timeout=10)
    csp = resp.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp and "http" not in csp
    hosts = {urlparse(u).hostname for u in page.requests}
    assert hosts == {"127.0.0.1"}, page.requests
    weight = sum(
        len(httpx.get(console_server.url + p, timeout=10).content)
        for p in ("/console", "/console/console.js", "/console/console.css")
    )
    assert weight < PAGE_BUDGET_BYTES
    assert page.errors == []
    # one card per served model, with its task
    for name, task in [
        ("minilm", "embed"),
        ("smollm2", "generate"),
        ("effnet", "image-classify"),
        ("digits", "classify"),
    ]:
        assert task in page.inner_text(f'[data-model="{name}"] h2')
    busy, workers = card_value(page, "effnet", "decoding").split(" / ")  # the image model's decode pool
    assert int(busy) >= 0 and int(workers) >= 1


def card_boxes(page) -> list[dict]:
    """Where every live-view card sits: numbers changing must not move any of them."""
    return page.eval_on_selector_all(
        "#live .card",
        "(cards) => cards.map((c) => { const r = c.getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; })",
    )


def test_live_numbers_move_while_loadtest_runs(page, console_server):
    before = float(card_value(page, "minilm", "total"))
    boxes = card_boxes(page)
    loadtest = subprocess.Popen(
        [sys.executable, "-m", "openhood.cli", "loadtest", console_server.url, *LOADTEST_ARGS],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        # requests/s above zero while it runs, then the total past where it was
        page.wait_for_function(
            """() => Number(document.querySelector('[data-model="minilm"] [data-k="rps"]').textContent) > 0"""
        )
        page.wait_for_function(
            f"""() => Number(document.querySelector('[data-model="minilm"] [data-k="total"]').textContent) > {before}"""
        )
    finally:
        assert loadtest.wait(120) == 0, loadtest.stderr.read().decode()[-2000:]
    assert float(card_value(page, "minilm", "total")) >= before + 10
    # the sliding-window table has a P50 for the length bucket the load test's texts fall in
    p50s = page.locator('[data-model="minilm"] table td:nth-child(3)').all_inner_texts()
    assert any(v != "—" for v in p50s), p50s
    assert card_boxes(page) == boxes  # no layout shift while the numbers changed
    # the batch-size chart drew bars
    heights = page.eval_on_selector_all(
        '[data-model="minilm"] svg.bars rect', "(rects) => rects.map((r) => Number(r.getAttribute('height')))"
    )
    assert max(heights) > 0, heights
    # preemption (the NumPy engine yields between layers): its stage in the split, its yields
    # counted as /stats counts them (the console's total never ahead of the server's)
    assert page.locator('[data-model="minilm"] [data-k="stage-preempted"]').count() == 1
    stats = httpx.get(console_server.url + "/stats", timeout=10).json()["models"]["minilm"]["preemption"]
    if stats["enabled"]:
        page.wait_for_function(
            """() => /\\(\\d+\\)$/.test(document.querySelector('[data-model="minilm"] [data-k="yields"]').textContent)"""
        )
        shown = int(card_value(page, "minilm", "yields").rsplit("(", 1)[1].rstrip(")"))
        later = httpx.get(console_server.url + "/stats", timeout=10).json()["models"]["minilm"]["preemption"]
        assert shown <= later["yields"], (shown, later)
    else:
        assert page.locator('[data-model="minilm"] [data-k="yields"]').count() == 0


def test_a_closed_tab_ends_its_stream(browser, page, console_server):
    consoles = "() => document.getElementById('p-consoles').textContent"
    page.wait_for_function(f"{consoles} === '1'")
    other = open_console(browser, console_server.url)
    ticks_at_least(other, 1)
    page.wait_for_function(f"{consoles} === '2'")  # the server counts both streams
    other.context.close()
    page.wait_for_function(f"{consoles} === '1'")  # and forgets the closed tab's within a tick


def test_chat_answer_streams_into_the_page(page):
    page.focus("#tab-live")
    page.keyboard.press("ArrowRight")  # the tabs are keyboard-driven
    assert page.get_attribute("#tab-chat", "aria-selected") == "true"
    page.fill("#chat-temp", "0")
    page.fill("#chat-max", "12")
    page.fill("#chat-input", "Name three colours.")
    # Count the text changes of the answer as they happen: a stream shows several before it ends.
    page.evaluate(
        """() => { window.pieces = 0; new MutationObserver(() => { window.pieces += 1; })
           .observe(document.getElementById('chat-log'), {childList: true, subtree: true, characterData: true}); }"""
    )
    page.focus("#chat-input")
    page.keyboard.press("Control+Enter")
    page.wait_for_selector(".msg.assistant[data-done]")
    answer = page.inner_text(".msg.assistant")
    assert answer.strip() and page.locator(".msg.assistant .errors").count() == 0, answer
    assert page.evaluate("() => window.pieces") >= 3
    stats = page.inner_text("#chat-stats")
    assert "TTFT" in stats and " ms" in stats and "tokens" in stats, stats


def test_dropped_photo_gets_its_top1(page):
    page.click("#tab-images")
    data = base64.b64encode((PHOTOS / "flower.jpg").read_bytes()).decode()
    page.evaluate(
        """(data) => {
            const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
            const dt = new DataTransfer();
            dt.items.add(new File([bytes], "flower.jpg", {type: "image/jpeg"}));
            document.getElementById("drop").dispatchEvent(new DragEvent("drop", {dataTransfer: dt, bubbles: true}));
        }""",
        data,
    )
    page.wait_for_selector("#image-top li")
    top = page.locator("#image-top li").all_inner_texts()
    assert len(top) == 5 and top[0].startswith("daisy"), top


def test_image_chosen_from_the_keyboard(page):
    page.click("#tab-images")
    with page.expect_file_chooser() as chooser:
        page.focus("#drop")
        page.keyboard.press("Enter")
    chooser.value.set_files(str(PHOTOS / "china.jpg"))
    page.wait_for_function("() => document.getElementById('image-status').textContent.startsWith('china.jpg')")
    top1 = page.locator("#image-top li").first.inner_text()
    # the classes tests/engine/test_efficientnet.py accepts as this photo's top-1
    assert top1.rsplit(" ", 1)[0] in {"palace", "bell cote", "monastery"}, top1


def test_embeddings_and_digits_playgrounds(page, console_server):
    page.click("#tab-embed")
    page.click("#pair-form button[type=submit]")
    page.wait_for_function("() => document.getElementById('pair-out').textContent.startsWith('cosine')")
    assert 0.5 < float(page.inner_text("#pair-out").split()[1]) <= 1.0
    page.click("#matrix-form button[type=submit]")
    page.wait_for_selector("#matrix-out table")
    assert page.locator("#matrix-out tr").count() == 5  # header + 4 texts

    page.click("#tab-classify")
    from openhood.train.data import load_digits_dataset

    x = load_digits_dataset().x_test[0]
    page.fill("#features", ", ".join(f"{v:g}" for v in x))
    page.click("#classify-form button[type=submit]")
    page.wait_for_selector("#classify-top li")
    with console_server.client() as c:
        want = c.post("/v1/classify", json={"model": "digits", "input": [x.tolist()]}).json()["data"][0]["label"]
    assert page.inner_text("#classify-status") == f"predicted {want}"
    assert page.locator("#classify-top li").count() == 5


def test_console_refuses_the_stream_without_the_api_key(browser, server):
    # The shared server runs with --api-key: the page opens (like /docs), its stream does not.
    assert httpx.get(server.url + "/console/events", timeout=10).status_code == 401
    page = open_console(browser, server.url)
    try:
        page.wait_for_selector("#login:not([hidden])")
        assert page.inner_text("#status") == "API key needed"
        page.fill("#key", "wrong")
        page.press("#key", "Enter")
        page.wait_for_function("() => document.getElementById('status').textContent === 'wrong API key'")
        assert page.evaluate("() => document.body.dataset.ticks") is None  # no number reached the page
        page.fill("#key", API_KEY)
        page.press("#key", "Enter")
        ticks_at_least(page, 1)
        assert page.is_hidden("#login") and page.inner_text("#status") == "live"
        assert {urlparse(u).hostname for u in page.requests} == {"127.0.0.1"}
    finally:
        page.context.close()
