// openhood console: the live view (one server-sent-events stream, read with fetch so it can carry
// the API key) and the playground tabs (real requests through the public API). No libraries:
// charts are SVG elements created once and updated in place, so nothing moves while numbers change.
// The API key lives in `apiKey` only: never in storage, cookies or the URL.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const SVG = "http://www.w3.org/2000/svg";
  const HISTORY = 120; // sparkline points kept per series (2 minutes at one tick a second)
  const STAGES = [["queue", "queue"], ["tokenize", "preprocess"], ["inference", "inference"], ["preempted", "preempted"], ["postprocess", "postprocess"]];
  let apiKey = "";
  let models = []; // /v1/models entries
  let ticks = 0;

  function headers(extra) {
    const h = Object.assign({}, extra || {});
    if (apiKey) h.Authorization = "Bearer " + apiKey;
    return h;
  }

  function el(tag, attrs, text) {
    const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function fmt(x, digits) {
    if (x === null || x === undefined || Number.isNaN(x)) return "—";
    return Number(x).toFixed(digits === undefined ? 1 : digits);
  }

  function bytes(n) {
    if (n === null || n === undefined) return "—";
    const mb = n / (1 << 20);
    return mb >= 1024 ? (mb / 1024).toFixed(2) + " GiB" : mb.toFixed(1) + " MiB";
  }

  // Server errors come in OpenAI's shape: {"error": {"message", "code", ...}}.
  async function apiError(resp) {
    let text = resp.status + " " + resp.statusText;
    try {
      const body = await resp.json();
      if (body.error) text = resp.status + " " + (body.error.code || "") + ": " + body.error.message;
    } catch (e) { /* not JSON: keep the status line */ }
    return text;
  }

  // A streamed response body, line by line as it arrives (server-sent events are "data: …" lines).
  async function readLines(resp, onLine) {
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += decoder.decode(value, { stream: true });
      let end;
      while ((end = buf.indexOf("\n")) >= 0) {
        onLine(buf.slice(0, end).trim());
        buf = buf.slice(end + 1);
      }
    }
  }

  async function postJSON(path, body) {
    const resp = await fetch(path, { method: "POST", headers: headers({ "Content-Type": "application/json" }), body: JSON.stringify(body) });
    if (!resp.ok) throw new Error(await apiError(resp));
    return resp.json();
  }

  // ---- tabs (WAI-ARIA tabs: arrows, Home and End move between them)
  const tabs = Array.from(document.querySelectorAll('[role="tab"]'));
  function selectTab(tab, focus) {
    for (const t of tabs) {
      const on = t === tab;
      t.setAttribute("aria-selected", String(on));
      t.tabIndex = on ? 0 : -1;
      $(t.getAttribute("aria-controls")).hidden = !on;
    }
    if (focus) tab.focus();
  }
  tabs.forEach((tab, i) => {
    tab.addEventListener("click", () => selectTab(tab, false));
    tab.addEventListener("keydown", (e) => {
      const to = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: tabs.length - 1 }[e.key];
      if (to === undefined) return;
      e.preventDefault();
      selectTab(tabs[(to + tabs.length) % tabs.length], true);
    });
  });

  // ---- the live stream
  const status = $("status");
  function setStatus(text, kind) {
    status.textContent = text;
    status.className = "pill " + (kind || "");
  }

  let stream = null; // the AbortController of the open stream
  let retryTimer = null;
  function retry() {
    clearTimeout(retryTimer);
    retryTimer = setTimeout(connect, 2000);
  }

  async function connect() {
    clearTimeout(retryTimer);
    if (stream) stream.abort();
    const mine = (stream = new AbortController());
    setStatus("connecting…");
    let resp;
    try {
      resp = await fetch("/console/events", { headers: headers(), signal: mine.signal, cache: "no-store" });
    } catch (e) {
      if (mine.signal.aborted) return;
      setStatus("server unreachable, retrying…", "bad");
      return retry();
    }
    if (resp.status === 401) {
      setStatus(apiKey ? "wrong API key" : "API key needed", "bad");
      $("login").hidden = false;
      $("key").focus();
      return;
    }
    if (!resp.ok) {
      setStatus("stream refused: " + resp.status + ", retrying…", "bad");
      return retry();
    }
    $("login").hidden = true;
    setStatus("live", "live");
    loadModels();
    try {
      await readLines(resp, (line) => line.startsWith("data: ") && render(JSON.parse(line.slice(6))));
    } catch (e) {
      if (mine.signal.aborted) return;
    }
    setStatus("stream ended, retrying…", "bad");
    retry();
  }

  $("login").addEventListener("submit", (e) => {
    e.preventDefault();
    apiKey = $("key").value.trim();
    connect();
  });

  // ---- drawing
  const history = {}; // series name → recent values
  function push(name, value) {
    const h = history[name] || (history[name] = []);
    h.push(value === null || value === undefined ? 0 : value);
    if (h.length > HISTORY) h.shift();
    return h;
  }

  function spark(svg, values) {
    let line = svg.firstChild;
    if (!line) line = svg.appendChild(el("svg:polyline"));
    const max = Math.max(1e-9, ...values);
    const step = 120 / (HISTORY - 1);
    const x0 = 120 - (values.length - 1) * step;
    line.setAttribute("points", values.map((v, i) => (x0 + i * step).toFixed(1) + "," + (31 - (v / max) * 29).toFixed(1)).join(" "));
  }

  function text(node, value) {
    if (node.textContent !== value) node.textContent = value;
  }

  function render(snap) {
    ticks += 1;
    document.body.dataset.ticks = String(ticks);
    const p = snap.process;
    const names = Object.keys(snap.models);
    const rps = names.reduce((sum, n) => sum + (snap.models[n].requests_per_s || 0), 0);
    text($("p-rps"), fmt(rps));
    text($("p-cpu"), fmt(p.cpu_cores, 2));
    text($("p-rss"), bytes(p.rss_bytes));
    text($("p-inflight"), fmt(p.in_flight, 0));
    text($("p-consoles"), fmt(p.console_streams, 0));
    text($("p-window"), fmt(snap.window_s, 0));
    const tr = p.rss_trend;
    text($("p-trend"), tr ? "trend: " + (tr.bytes_per_s >= 0 ? "+" : "") + fmt((tr.bytes_per_s * 60) / (1 << 20), 2) +
      " MiB/min over " + fmt(tr.seconds, 0) + " s (" + fmt(tr.growth_pct, 2) + "% mid→now)" : "trend: after " + fmt(p.rss_trend_after_s, 0) + " s of samples");
    const unrouted = Object.entries(p.unrouted_errors || {});
    text($("p-unrouted"), unrouted.length ? "refused before routing: " + unrouted.map(([c, n]) => c + " " + n).join(", ") : "\u00a0");
    spark($("s-rps"), push("rps", rps));
    spark($("s-cpu"), push("cpu", p.cpu_cores));
    spark($("s-rss"), push("rss", p.rss_bytes));
    for (const name of names) modelCard(name, snap.models[name]).update(snap.models[name]);
  }

  const cards = {};
  function modelCard(name, m) {
    if (cards[name]) return cards[name];
    const card = el("div", { class: "card", "data-model": name });
    const h = el("h2", {}, name);
    h.append(el("span", { class: "task" }, m.task));
    const badge = h.appendChild(el("span", { class: "badge" }, "…"));
    card.append(h);
    const kv = card.appendChild(el("div", { class: "kv" }));
    const fields = {};
    const addField = (key, label) => {
      const d = kv.appendChild(el("div"));
      fields[key] = d.appendChild(el("b", { "data-k": key }, "—"));
      d.append(el("span", {}, label));
    };
    addField("rps", "requests/s");
    addField("total", "requests (total)");
    addField("queue", m.task === "generate" ? "waiting sequences" : "queue depth");
    addField("tps", m.task === "generate" ? "tokens/s generated" : m.task === "embed" ? "tokens/s" : "items/s");
    if (m.task === "generate") addField("running", "running sequences");
    if (m.task === "generate") addField("kv", "KV cache used");
    if (m.task === "image-classify") addField("decoding", "decode pool busy");
    if (m.task === "image-classify") addField("pending", "images waiting to decode");
    if (m.preemption) addField("yields", "preemptions/s (total)");
    const errors = card.appendChild(el("div", { class: "errors", "aria-live": "polite" }, ""));
    const charts = card.appendChild(el("div", { class: "charts" }));
    let bars = null, barsTitle = null;
    if (m.task !== "generate") {
      const box = charts.appendChild(el("div"));
      barsTitle = box.appendChild(el("h3", {}, "batch sizes"));
      bars = box.appendChild(el("svg:svg", { class: "bars", viewBox: "0 0 240 90", role: "img", "aria-label": "batch size distribution" }));
      m.batch_sizes.le.forEach((le, i) => {
        const w = 240 / m.batch_sizes.le.length;
        bars.append(el("svg:rect", { class: "bar", x: (i * w + 1).toFixed(1), y: "76", width: (w - 2).toFixed(1), height: "0" }));
        bars.append(el("svg:text", { x: (i * w + w / 2).toFixed(1), y: "87", "text-anchor": "middle" }, le === "inf" ? ">" : le));
      });
    }
    const stageBox = charts.appendChild(el("div"));
    stageBox.append(el("h3", {}, "stage split, P50 ms"));
    const stages = stageBox.appendChild(el("svg:svg", { class: "stages", viewBox: "0 0 240 18", preserveAspectRatio: "none", "aria-hidden": "true" }));
    const legend = stageBox.appendChild(el("div", { class: "legend" }));
    const stageRects = {}, stageTexts = {};
    for (const [key, label] of STAGES) {
      stageRects[key] = stages.appendChild(el("svg:rect", { class: "st-" + key, x: "0", y: "0", width: "0", height: "18" }));
      const item = legend.appendChild(el("span"));
      item.append(el("i", { class: "st-" + key }), label + " ");
      stageTexts[key] = item.appendChild(el("b", { "data-k": "stage-" + key }, "—"));
    }
    card.append(el("h3", {}, "latency by input length (tokens), sliding window"));
    const table = card.appendChild(el("table"));
    const head = table.appendChild(el("tr"));
    for (const c of ["length", "n", "P50 ms", "P99 ms"]) head.append(el("th", {}, c));
    const rows = {};
    for (const label of Object.keys(m.latency.by_length)) {
      const tr = table.appendChild(el("tr"));
      rows[label] = [label, "count", "p50_ms", "p99_ms"].map((_, i) => tr.appendChild(el("td", {}, i === 0 ? label : "—")));
    }
    const sparkSvg = card.appendChild(el("svg:svg", { class: "spark", viewBox: "0 0 120 32", preserveAspectRatio: "none", "aria-hidden": "true" }));
    $("models").append(card);

    function update(s) {
      text(badge, s.ready ? "ready" : "not ready");
      badge.className = "badge " + (s.ready ? "ok" : "bad");
      badge.title = s.why;
      text(fields.rps, fmt(s.requests_per_s));
      text(fields.total, fmt(s.requests_total, 0));
      text(fields.queue, fmt(s.task === "generate" ? s.waiting_sequences : s.queue_depth, 0));
      text(fields.tps, fmt(s.tokens_per_s));
      if (fields.running) text(fields.running, fmt(s.running_sequences, 0));
      if (fields.kv) text(fields.kv, bytes(s.kv_cache_bytes));
      if (fields.decoding) text(fields.decoding, fmt(s.decode_pool.busy, 0) + " / " + fmt(s.decode_pool.workers, 0));
      if (fields.pending) text(fields.pending, fmt(s.decode_pool.pending, 0));
      if (fields.yields) text(fields.yields, fmt(s.preemption.per_s, 1) + " (" + fmt(s.preemption.total, 0) + ")");
      const errs = Object.entries(s.errors);
      errors.classList.toggle("none", !errs.length);
      text(errors, errs.length ? "errors: " + errs.map(([code, e]) => code + " " + fmt(e.total, 0) + " (" + fmt(e.per_s, 2) + "/s)").join(", ") : "no errors");
      if (bars) {
        const windowed = s.batch_sizes.window.reduce((a, b) => a + b, 0) > 0;
        const counts = windowed ? s.batch_sizes.window : s.batch_sizes.total;
        text(barsTitle, windowed ? "batch sizes, last " + fmt(s.window_s || 5, 0) + " s" : "batch sizes, since start");
        const max = Math.max(1, ...counts);
        const rects = bars.querySelectorAll("rect");
        counts.forEach((c, i) => {
          const hgt = (c / max) * 72;
          rects[i].setAttribute("y", (76 - hgt).toFixed(1));
          rects[i].setAttribute("height", hgt.toFixed(1));
        });
      }
      const p50 = s.latency.stages_p50_ms;
      const sum = STAGES.reduce((a, [k]) => a + (p50[k] || 0), 0);
      let x = 0;
      for (const [key] of STAGES) {
        const w = sum > 0 ? ((p50[key] || 0) / sum) * 240 : 0;
        stageRects[key].setAttribute("x", x.toFixed(1));
        stageRects[key].setAttribute("width", w.toFixed(1));
        x += w;
        text(stageTexts[key], fmt(p50[key], 1));
      }
      for (const [label, cells] of Object.entries(rows)) {
        const r = s.latency.by_length[label] || {};
        text(cells[1], fmt(r.count, 0));
        text(cells[2], fmt(r.p50_ms, 1));
        text(cells[3], fmt(r.p99_ms, 1));
      }
      spark(sparkSvg, push("rps:" + name, s.requests_per_s));
    }
    return (cards[name] = { update });
  }

  // ---- model lists for the playground
  const SELECTS = { generate: "chat-model", embed: "embed-model", "image-classify": "image-model", classify: "classify-model" };
  async function loadModels() {
    try {
      const resp = await fetch("/v1/models", { headers: headers() });
      if (!resp.ok) return;
      models = (await resp.json()).data;
    } catch (e) {
      return;
    }
    for (const [task, id] of Object.entries(SELECTS)) {
      const select = $(id);
      const keep = select.value;
      select.replaceChildren(...models.filter((m) => m.task === task).map((m) => el("option", { value: m.id }, m.id)));
      if (!select.options.length) select.append(el("option", { value: "" }, "no " + task + " model served"));
      if (keep) select.value = keep;
    }
    showDigitGrid();
  }

  // ---- chat: OpenAI's streaming chat completions, TTFT and tokens/s of each answer
  const chat = { messages: [], abort: null };
  function chatLine(role, content) {
    const div = $("chat-log").appendChild(el("div", { class: "msg " + role }, content));
    div.scrollIntoView({ block: "nearest" });
    return div;
  }
  $("chat-input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("chat-form").requestSubmit();
  });
  $("chat-clear").addEventListener("click", () => {
    chat.messages = [];
    $("chat-log").replaceChildren();
  });
  $("chat-stop").addEventListener("click", () => chat.abort && chat.abort.abort());
  $("chat-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const content = $("chat-input").value.trim();
    if (!content || chat.abort) return;
    $("chat-input").value = "";
    chat.messages.push({ role: "user", content });
    chatLine("user", content);
    const out = chatLine("assistant", "");
    out.dataset.streaming = "1";
    chat.abort = new AbortController();
    $("chat-send").disabled = true;
    $("chat-stop").disabled = false;
    const t0 = performance.now();
    let first = null, last = null, pieces = 0, usage = null;
    const showStats = () => {
      const tokens = usage ? usage.completion_tokens : pieces;
      const rate = first !== null && last > first && tokens > 1 ? (tokens - 1) / ((last - first) / 1000) : null;
      text($("chat-stats"), "TTFT " + (first === null ? "—" : fmt(first - t0, 0) + " ms") + " · tokens/s " + fmt(rate) + " · " + tokens + " tokens");
    };
    try {
      const resp = await fetch("/v1/chat/completions", {
        method: "POST",
        headers: headers({ "Content-Type": "application/json" }),
        signal: chat.abort.signal,
        body: JSON.stringify({
          model: $("chat-model").value || undefined,
          messages: chat.messages,
          stream: true,
          stream_options: { include_usage: true },
          temperature: Number($("chat-temp").value),
          max_tokens: Number($("chat-max").value),
        }),
      });
      if (!resp.ok) throw new Error(await apiError(resp));
      await readLines(resp, (line) => {
        if (!line.startsWith("data: ") || line === "data: [DONE]") return;
        const chunk = JSON.parse(line.slice(6));
        if (chunk.usage) usage = chunk.usage;
        const piece = chunk.choices && chunk.choices[0] && chunk.choices[0].delta && chunk.choices[0].delta.content;
        if (piece) {
          last = performance.now();
          if (first === null) first = last;
          pieces += 1;
          out.textContent += piece;
          showStats();
        }
      });
    } catch (err) {
      if (!chat.abort.signal.aborted) out.append(el("span", { class: "errors" }, " [" + err.message + "]"));
    }
    chat.messages.push({ role: "assistant", content: out.textContent });
    showStats();
    delete out.dataset.streaming;
    out.dataset.done = "1";
    chat.abort = null;
    $("chat-send").disabled = false;
    $("chat-stop").disabled = true;
  });

  // ---- embeddings: a pair's cosine, a list's similarity matrix
  function cosine(a, b) {
    let dot = 0, na = 0, nb = 0;
    for (let i = 0; i < a.length; i++) { dot += a[i] * b[i]; na += a[i] * a[i]; nb += b[i] * b[i]; }
    return dot / Math.sqrt(na * nb);
  }
  async function embed(texts) {
    const body = await postJSON("/v1/embeddings", { model: $("embed-model").value || undefined, input: texts });
    return body.data.sort((x, y) => x.index - y.index).map((d) => d.embedding);
  }
  $("pair-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    text($("pair-out"), "…");
    try {
      const [a, b] = await embed([$("pair-a").value, $("pair-b").value]);
      text($("pair-out"), "cosine " + cosine(a, b).toFixed(4));
    } catch (err) {
      text($("pair-out"), err.message);
    }
  });
  $("matrix-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const texts = $("matrix-in").value.split("\n").map((t) => t.trim()).filter(Boolean);
    if (!texts.length) return;
    text($("matrix-status"), "…");
    try {
      const vecs = await embed(texts);
      const table = el("table", { class: "heat" });
      const head = table.appendChild(el("tr"));
      head.append(el("th", {}, ""));
      texts.forEach((_, j) => head.append(el("th", { title: texts[j] }, "#" + (j + 1))));
      texts.forEach((t, i) => {
        const tr = table.appendChild(el("tr"));
        tr.append(el("th", { title: t }, "#" + (i + 1) + " " + (t.length > 28 ? t.slice(0, 27) + "…" : t)));
        vecs.forEach((v, j) => {
          const c = cosine(vecs[i], v);
          const td = tr.appendChild(el("td", {}, c.toFixed(2)));
          td.style.background = "rgba(31, 111, 235, " + Math.max(0, c).toFixed(2) * 0.6 + ")";
        });
      });
      $("matrix-out").replaceChildren(table);
      text($("matrix-status"), texts.length + " texts");
    } catch (err) {
      text($("matrix-status"), err.message);
    }
  });

  // ---- images: drop or choose a file, multipart upload, top-5
  function topList(list, items) {
    list.replaceChildren(...items.map((it) => {
      const li = el("li", {}, it.label + " " + (it.probability * 100).toFixed(1) + "%");
      const bar = li.appendChild(el("span", { class: "prob" }));
      bar.style.width = (it.probability * 100).toFixed(1) + "%";
      return li;
    }));
  }
  async function classifyImage(file) {
    const preview = $("image-preview");
    if (preview.src) URL.revokeObjectURL(preview.src);
    preview.src = URL.createObjectURL(file);
    text($("image-status"), "classifying " + file.name + "…");
    const form = new FormData();
    form.append("file", file, file.name || "image");
    if ($("image-model").value) form.append("model", $("image-model").value);
    form.append("top_k", "5");
    try {
      const t0 = performance.now();
      const resp = await fetch("/v1/images/classify", { method: "POST", headers: headers(), body: form });
      if (!resp.ok) throw new Error(await apiError(resp));
      const body = await resp.json();
      topList($("image-top"), body.data[0].labels);
      text($("image-status"), file.name + " · " + fmt(performance.now() - t0, 0) + " ms round trip");
    } catch (err) {
      $("image-top").replaceChildren();
      text($("image-status"), err.message);
    }
  }
  const drop = $("drop");
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    if (e.dataTransfer.files.length) classifyImage(e.dataTransfer.files[0]);
  });
  drop.addEventListener("keydown", (e) => {
    if (e.key === "Enter" || e.key === " ") { e.preventDefault(); $("image-file").click(); }
  });
  $("image-file").addEventListener("change", (e) => e.target.files.length && classifyImage(e.target.files[0]));

  // ---- classify: a feature vector, or an 8×8 digit drawn on a grid (0–16 like the digits data)
  const grid = $("digit");
  const pixels = new Array(64).fill(0);
  let cursor = 0, painting = null;
  const cells = pixels.map((_, i) => grid.appendChild(el("div", { role: "gridcell", "data-i": String(i) })));
  function setPixel(i, v) {
    pixels[i] = v;
    cells[i].style.background = v ? "color-mix(in srgb, var(--fg) " + Math.round((v / 16) * 100) + "%, var(--card))" : "";
    $("features").value = pixels.join(", ");
  }
  function moveCursor(i) {
    cells[cursor].classList.remove("cur");
    cursor = (i + 64) % 64;
    cells[cursor].classList.add("cur");
  }
  grid.addEventListener("pointerdown", (e) => {
    const i = Number(e.target.dataset.i);
    if (Number.isNaN(i)) return;
    painting = pixels[i] ? 0 : 16; // a drag from a painted cell erases
    setPixel(i, painting);
    grid.setPointerCapture(e.pointerId);
  });
  grid.addEventListener("pointermove", (e) => {
    if (painting === null) return;
    const hit = document.elementFromPoint(e.clientX, e.clientY);
    const i = hit && hit.parentNode === grid ? Number(hit.dataset.i) : NaN;
    if (!Number.isNaN(i) && pixels[i] !== painting) setPixel(i, painting);
  });
  grid.addEventListener("pointerup", () => { painting = null; });
  grid.addEventListener("keydown", (e) => {
    const move = { ArrowRight: 1, ArrowLeft: -1, ArrowDown: 8, ArrowUp: -8 }[e.key];
    if (move !== undefined) moveCursor(cursor + move);
    else if (e.key === " " || e.key === "Enter") setPixel(cursor, 16);
    else if (e.key === "Delete" || e.key === "Backspace") setPixel(cursor, 0);
    else return;
    e.preventDefault();
  });
  grid.addEventListener("focus", () => moveCursor(cursor));
  $("digit-clear").addEventListener("click", () => pixels.forEach((_, i) => setPixel(i, 0)));
  function selectedModel(selectId) {
    return models.find((m) => m.id === $(selectId).value) || {};
  }
  function showDigitGrid() {
    $("digit-box").hidden = selectedModel("classify-model").features !== 64;
  }
  $("classify-model").addEventListener("change", showDigitGrid);
  $("classify-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const vec = $("features").value.split(/[\s,]+/).filter(Boolean).map(Number);
    const m = selectedModel("classify-model");
    const classes = m.sizes ? m.sizes[m.sizes.length - 1] : 5;
    text($("classify-status"), "…");
    try {
      const body = await postJSON("/v1/classify", { model: m.id, input: [vec], top_k: Math.min(5, classes) });
      topList($("classify-top"), body.data[0].top_k);
      text($("classify-status"), "predicted " + body.data[0].label);
    } catch (err) {
      $("classify-top").replaceChildren();
      text($("classify-status"), err.message);
    }
  });

  connect();
})();
