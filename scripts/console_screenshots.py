"""Screenshots of every console tab for docs/console.md, taken from a real server in Debian's chromium.

Starts ``openhood serve`` on loopback with four models (MiniLM, the bundled SmolLM2, the bundled
EfficientNet-Lite0 converted by ``openhood convert``, a digits MLP trained by ``openhood train``),
runs a short bounded ``openhood loadtest`` so the live view has numbers, uses each playground tab
the way a person would, and writes ``docs/img/console-<tab>.png`` (1280×800, plus the live view
at phone width), quantized to 256 colours so they stay small in the repository:

    .venv/bin/python scripts/console_screenshots.py
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from PIL import Image
from playwright.sync_api import Page, sync_playwright

from openhood.engine.models.efficientnet import bundled_checkpoint
from openhood.generate.bundled import default_gguf_path
from openhood.models import default_model_dir
from openhood.server.console_snapshot import RSS_TREND_MIN_S
from openhood.soak.launch import LaunchedServer
from openhood.soak.runner import wait_ready

ROOT = Path(__file__).resolve().parent.parent
PHOTO = ROOT / "tests" / "fixtures" / "vision" / "photos" / "china.jpg"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
CHROMIUM_ARGS += ["--disable-sync", "--no-first-run"]
# Bounded traffic for the live view: 12 requests/s for 8 s, at most 120 requests.
LOADTEST_ARGS = ["--rate", "12", "--duration", "8", "--warmup", "0", "--quiet", "--model", "minilm"]
LOADTEST_ARGS += ["--max-requests", "120", "--timeout", "30"]  # no give-ups on a busy machine
SERVE_ARGS = ["--log-level", "warning", "--workers", "1", "--threads", "1", "--buckets", "32,64"]
SERVE_ARGS += ["--max-body-bytes", str(1 << 22), "--gen-max-context", "512"]
# A "7" on the 8×8 grid, as cell indices (row * 8 + column).
SEVEN = [9, 10, 11, 12, 13, 14, 21, 28, 29, 35, 36, 42, 43, 49, 50, 57]


def openhood(*args: str, **kw: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "openhood.cli", *args], check=True, **kw)  # type: ignore[call-overload]


def save(page: Page, out: Path, name: str) -> None:
    png = page.screenshot(full_page=False)
    img = Image.open(io.BytesIO(png)).convert("RGB").quantize(256)
    path = out / f"console-{name}.png"
    img.save(path, optimize=True)
    print(f"wrote {path} ({path.stat().st_size // 1024} KiB)")


def shoot(url: str, out: Path, dark: bool) -> None:
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=shutil.which("chromium"), headless=True, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 800}, color_scheme="dark" if dark else "light")
        page = context.new_page()
        page.set_default_timeout(120_000)
        page.goto(url + "/console")
        page.wait_for_function("() => Number(document.body.dataset.ticks || 0) >= 2")
        time.sleep(RSS_TREND_MIN_S)  # the RSS trend needs this much history
        load = subprocess.Popen(
            [sys.executable, "-m", "openhood.cli", "loadtest", url, *LOADTEST_ARGS],
            stdout=subprocess.DEVNULL,
        )
        time.sleep(7)  # the rates cover the last 5 s of ticks
        save(page, out, "live")
        phone = browser.new_context(viewport={"width": 390, "height": 844}, color_scheme="dark" if dark else "light")
        small = phone.new_page()
        small.goto(url + "/console")
        small.wait_for_function("() => Number(document.body.dataset.ticks || 0) >= 2")
        save(small, out, "phone")
        phone.close()
        load.wait(120)

        page.click("#tab-chat")
        page.fill("#chat-temp", "0")
        page.fill("#chat-max", "48")
        page.fill("#chat-input", "In two sentences, what is a batching server?")
        page.click("#chat-send")
        page.wait_for_selector(".msg.assistant[data-done]")
        save(page, out, "chat")

        page.click("#tab-embed")
        page.click("#pair-form button[type=submit]")
        page.click("#matrix-form button[type=submit]")
        page.wait_for_selector("#matrix-out table")
        page.wait_for_function("() => document.getElementById('pair-out').textContent.startsWith('cosine')")
        save(page, out, "embeddings")

        page.click("#tab-images")
        page.set_input_files("#image-file", str(PHOTO))
        page.wait_for_selector("#image-top li")
        save(page, out, "images")

        page.click("#tab-classify")
        for i in SEVEN:
            page.click(f'#digit [data-i="{i}"]')
        page.click("#classify-form button[type=submit]")
        page.wait_for_selector("#classify-top li")
        save(page, out, "classify")
        browser.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    ap.add_argument("--dark", action="store_true", help="the dark colour scheme instead of the light one")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        effnet, digits = Path(tmp) / "effnet", Path(tmp) / "digits"
        openhood("convert", str(bundled_checkpoint()), str(effnet), stdout=subprocess.DEVNULL)
        openhood("train", "--dataset", "digits", "--out", str(digits), "--hidden", "32", "--epochs", "20")
        models = [f"minilm={default_model_dir()}", f"smollm2={default_gguf_path()}", f"effnet={effnet}"]
        with LaunchedServer(
            [*models, f"digits={digits}"], Path(tmp) / "server.log", SERVE_ARGS, debug_endpoints=False
        ) as server:
            with httpx.Client(base_url=server.url, timeout=10) as client:
                wait_ready(client, 300)
            shoot(server.url, args.out, args.dark)


if __name__ == "__main__":
    main()
