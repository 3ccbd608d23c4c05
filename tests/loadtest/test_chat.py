"""Chat mode against the streaming stub server (loopback, a few seconds in all), the command
line, and the HTML report (well-formed, and rendered by headless Chromium)."""

import json
import shutil
import subprocess

import pytest

from openhood.cli import main
from openhood.loadtest.chat import ChatConfig, run_chat
from openhood.loadtest.chat_report import PLOT_IDS
from openhood.loadtest.chat_stats import summarize_chat
from openhood.loadtest.chat_workload import ChatWorkload, LengthDist
from openhood.loadtest.client import ClientPlan

from .test_report import Checker


def _chat(url, levels, *, out="12", duration=0.8, warmup=0.2, path="/v1/chat/completions", drain=120.0):
    cfg = ChatConfig(url=url + path, levels=levels, duration=duration, warmup=warmup, seed=1, drain=drain)
    plan = ClientPlan(max_connections=max(levels), connect_timeout=3.05, read_timeout=5.0, pool_timeout=5.0)
    result = run_chat(cfg, plan, lambda: ChatWorkload(LengthDist.parse("4-40"), LengthDist.parse(out), 1))
    return result, summarize_chat(result)


def test_streams_are_timed_token_by_token_and_scale_with_a_batching_server(stub):
    s = stub(ttft_s=0.03, itl_s=0.01)
    result, summary = _chat(s.url, (1, 4))
    one, four = summary["levels"]
    for lv in (one, four):
        assert lv["error_count"] == 0 and lv["ok"] >= 3
        assert lv["finish_reasons"] == {"length": lv["ok"]}
        assert lv["output_tokens_mean"] == 12  # usage.completion_tokens == max_tokens == text chunks
        assert lv["prompt_tokens_source"] == "usage.prompt_tokens"
        # Lower bounds only: the stub sleeps at least this long (an upper bound would be a timing assert).
        assert lv["ttft_ms"]["p50"] >= 30 and lv["inter_token_ms"]["p50"] >= 10
    assert all(s.token_times.size == 12 for lv in result.levels for s in lv.samples)
    # The stub streams every request at once: 4 streams give several times the tokens/s of one.
    assert four["output_tokens_per_s"] > 2.5 * one["output_tokens_per_s"]


def test_a_serial_server_shows_as_flat_throughput_and_growing_ttft(stub):
    # Generations of ~0.2 s, long against the client's own per-request overhead, which at one
    # stream leaves the serial server idle between requests.
    s = stub(ttft_s=0.01, itl_s=0.01, serial=True)
    _, summary = _chat(s.url, (1, 4), out="20", duration=1.2)
    one, four = summary["levels"]
    assert four["output_tokens_per_s"] < 1.6 * one["output_tokens_per_s"]
    assert four["ttft_ms"]["p50"] > 2 * one["ttft_ms"]["p50"]  # each waits behind ~3 whole generations


def test_http_errors_and_streams_cut_mid_way_are_counted(stub):
    s = stub(ttft_s=0.005, itl_s=0.002, fail_every=5, fail_status=503, cut_every=3)
    result, summary = _chat(s.url, (2,), out="10")
    lv = summary["levels"][0]
    assert set(lv["errors"]) == {"503", "incomplete_stream"}
    assert lv["ok"] + lv["error_count"] == lv["requests"]
    cut = [x for x in result.levels[0].samples if x.status == "incomplete_stream"]
    assert cut and all(x.token_times.size == 5 and x.finish_reason is None for x in cut)


def test_streams_still_running_at_the_drain_deadline_are_unfinished_not_errors(stub):
    # 40 tokens x 50 ms = 2 s per stream; the level's window is 0.5 s and its drain 0.4 s.
    s = stub(ttft_s=0.01, itl_s=0.05)
    result, summary = _chat(s.url, (2,), out="40", duration=0.5, warmup=0.0, drain=0.4)
    lv = summary["levels"][0]
    assert lv["error_count"] == 0 and lv["ok"] == 0 and lv["unfinished"] == lv["requests"] == 2
    assert result.levels[0].wall_s < 1.5  # the drain bounded the level, not the 2 s streams
    assert lv["ttft_ms"]["count"] == 2 and lv["inter_token_ms"]["count"] > 0  # their tokens still count


def test_the_completions_endpoint_is_driven_with_a_prompt(stub):
    s = stub(ttft_s=0.005, itl_s=0.002)
    _, summary = _chat(s.url, (2,), out="6", path="/v1/completions")
    lv = summary["levels"][0]
    assert lv["error_count"] == 0 and lv["ok"] > 0 and lv["output_tokens_mean"] == 6


@pytest.fixture(scope="module")
def chat_report(tmp_path_factory):
    from .stub_server import StubServer, StubState

    out = tmp_path_factory.mktemp("chat-report")
    with StubServer(StubState(ttft_s=0.01, itl_s=0.004)) as s:
        rc = main(
            [
                "loadtest",
                s.url,
                "--chat",
                "--levels",
                "1,3",
                "--duration",
                "0.8",
                "--warmup",
                "0.2",
                "--output-tokens",
                "8-16",
                "--prompt-tokens",
                "lognormal:20:0.5",
                "--json",
                "--quiet",
                "--report",
                str(out),
            ]
        )
    assert rc == 0
    return out


def test_chat_report_is_well_formed_html_with_its_plots(chat_report):
    html = (chat_report / "index.html").read_text(encoding="utf-8")
    c = Checker()
    c.feed(html)
    c.close()
    assert not c.errors and not c.stack, (c.errors, c.stack)
    for pid in PLOT_IDS:
        assert c.svgs[pid]["shapes"] > 0, f"{pid} has no data drawn"
    assert "TTFT P99" in html and "inter-token P99" in html
    summary = json.loads((chat_report / "summary.json").read_text())["run"]
    assert [lv["concurrency"] for lv in summary["levels"]] == [1, 3]
    csv_text = (chat_report / "requests.csv").read_text()
    assert "Continue" not in csv_text and "tok" not in csv_text.split("\n", 1)[1]  # numbers only, no text


def test_chat_report_renders_in_headless_chromium(chat_report, missing_tool):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        missing_tool("chromium is not installed (apt-get install -y chromium)", "OPENHOOD_REQUIRE_BROWSER")
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", (chat_report / "index.html").as_uri()],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for pid in PLOT_IDS:
        assert f'id="{pid}"' in proc.stdout


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--rate", "5"], "closed loop"),
        ([], "--levels"),
        (["--levels", "2", "--output-tokens", "lots"], "length distribution"),
        (["--levels", "0,2"], "comma list"),
    ],
)
def test_chat_usage_mistakes_are_one_line_and_exit_2(extra, message, capsys):
    assert main(["loadtest", "http://127.0.0.1:9", "--chat", "--wait-ready", "0", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1


def test_chat_refuses_a_remote_target(capsys):
    assert main(["loadtest", "http://192.0.2.1:8000", "--chat", "--levels", "1"]) == 2
    assert "loopback" in capsys.readouterr().err
