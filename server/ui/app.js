// thinkgate's live view: one request, streamed, drawn as it runs. It reads what every SSE
// client of /v1/chat/completions gets: `: thinkgate.progress {json}` comment lines (the
// samples growing and finishing, each search step's candidates with their PRM rewards,
// what was kept, pruned or resampled), then the answer's chunks and the `thinkgate`
// object (votes, per-sample answers and rewards, usage). The events: docs/live-view.md.
// No build step and no dependencies: a module the gateway serves as a static file.

const $ = (id) => document.getElementById(id);

// Timings a test or a benchmark reads (window.thinkgateView): when the page first drew its
// form, and per progress event the milliseconds from its arrival to the next paint.
const view = { firstRender: null, eventToPaint: [], events: 0, done: false, error: null };
window.thinkgateView = view;

let config = null;
let running = null; // the AbortController of the request in flight

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api_key").value.trim();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

function show(id, on = true) {
  $(id).hidden = !on;
}

function showError(message, param) {
  view.error = message;
  $("error").textContent = param ? `${message}\n(param: ${param})` : message;
  show("error");
}

async function loadConfig() {
  const resp = await fetch("/ui/config.json", { headers: headers() });
  if (!resp.ok) {
    const body = await resp.json().catch(() => null);
    throw new Error(body?.error?.message || `${resp.status} ${resp.statusText}`);
  }
  return resp.json();
}

async function init() {
  try {
    config = await loadConfig();
  } catch (e) {
    showError(`${e.message}: enter the server's API key, then press Run`);
    config = null;
  }
  if (config) {
    const select = $("strategy");
    select.replaceChildren(
      ...config.strategies.map((name) => new Option(name, name, false, name === config.default_strategy)),
    );
    $("budget").replaceChildren(
      $("budget").firstElementChild,
      ...config.budget_fields.map(({ name, header }) => {
        const label = document.createElement("label");
        label.textContent = name;
        label.title = `${header}, or "budget": {"${name}": N}`;
        const input = document.createElement("input");
        input.type = "number";
        input.id = `budget-${name}`;
        input.dataset.field = name;
        input.placeholder = "default";
        label.append(input);
        return label;
      }),
    );
    $("server").textContent = `${config.model} · context ${config.max_model_len} tokens`;
  }
  view.firstRender = performance.now();
  document.body.dataset.ready = "1";
}

function reset() {
  for (const id of ["error", "samples", "search", "live", "votes", "answer", "raw"]) show(id, false);
  for (const id of ["bars", "steps", "classes"]) $(id).replaceChildren();
  for (const id of ["reasoning", "content", "usage", "info", "status"]) $(id).textContent = "";
  Object.assign(view, { eventToPaint: [], events: 0, done: false, error: null });
}

// --- samples -------------------------------------------------------------------------

const bars = new Map(); // sample index -> {row, fill, label, tokens}
let longest = 1;

function bar(index) {
  let b = bars.get(index);
  if (!b) {
    const row = document.createElement("div");
    row.className = "bar";
    row.dataset.index = index;
    const name = document.createElement("span");
    name.textContent = `#${index}`;
    const track = document.createElement("div");
    track.className = "track";
    const fill = document.createElement("div");
    fill.className = "fill";
    track.append(fill);
    const label = document.createElement("span");
    row.append(name, track, label);
    b = { row, fill, label, tokens: 0 };
    bars.set(index, b);
    const after = [...bars.keys()].filter((i) => i > index).sort((x, y) => x - y)[0];
    $("bars").insertBefore(row, after === undefined ? null : bars.get(after).row);
    show("samples");
  }
  return b;
}

function grow(b, tokens) {
  b.tokens = Math.max(b.tokens, tokens);
  if (b.tokens > longest) {
    longest = b.tokens;
    for (const other of bars.values()) other.fill.style.width = `${(100 * other.tokens) / longest}%`;
  }
  b.fill.style.width = `${(100 * b.tokens) / longest}%`;
}

function onSample(s) {
  const b = bar(s.index);
  grow(b, s.tokens);
  b.row.classList.add("done");
  const parts = [`${s.tokens} tok`, s.finish_reason];
  if (s.answer !== undefined) parts.push(`→ ${s.answer ?? "–"}`);
  if (s.confidence !== undefined) parts.push(`conf ${s.confidence.toFixed(2)}`);
  if (s.votes === false) b.row.classList.add("dropped");
  b.label.textContent = parts.join(" · ");
}

// --- search --------------------------------------------------------------------------

function onStep(ev) {
  const row = document.createElement("div");
  row.className = "step";
  row.dataset.step = ev.step;
  const name = document.createElement("b");
  name.textContent = `step ${ev.step}`;
  row.append(name);
  for (const c of ev.tree) {
    const box = document.createElement("span");
    box.className = "cand";
    if (c.kept === 0) box.classList.add("pruned");
    if (c.finished) box.classList.add("finished");
    const reward = document.createElement("span");
    reward.className = "r";
    reward.textContent = c.reward === null ? "–" : c.reward.toFixed(3);
    const meta = document.createElement("span");
    const kept = c.kept === 0 ? "pruned" : c.kept > 1 ? `×${c.kept}` : "kept";
    meta.textContent = ` ${kept}${c.finished ? " · done" : ""} · from ${c.parent}`;
    const text = document.createElement("span");
    text.className = "t";
    text.textContent = c.text;
    box.title = c.text;
    box.append(reward, meta, text);
    row.append(box);
  }
  $("steps").append(row);
  show("search");
}

// --- the stream ----------------------------------------------------------------------

const started = { at: 0 };

function status(text) {
  const ms = Math.round(performance.now() - started.at);
  $("status").textContent = `${(ms / 1000).toFixed(2)} s · ${text}`;
}

function onProgress(ev) {
  const arrived = performance.now();
  view.events += 1;
  if (ev.status === "admitted") status(`admitted (${ev.strategy})`);
  if (ev.growing) {
    const first = ev.first || 0;
    ev.growing.forEach((tokens, i) => grow(bar(first + i), tokens));
    status(`drawing ${ev.samples} samples`);
  }
  if (ev.sample) {
    onSample(ev.sample);
    status(`${ev.samples_done} of ${ev.samples} samples done`);
  }
  if (ev.leader_share !== undefined) status(`leader share ${(100 * ev.leader_share).toFixed(0)}%`);
  if (ev.posterior !== undefined) {
    // A vote drawn in stages (self-consistency's stop rule, auto's votes).
    const state = ev.settled ? "settled: stopped" : "not settled: another stage";
    status(`${ev.samples} samples drawn, vote ${state} (${(100 * ev.posterior).toFixed(0)}% sure)`);
  }
  if (ev.tree) {
    onStep(ev);
    status(`step ${ev.step}: ${ev.live} live, ${ev.complete} complete, best ${ev.best_score ?? "–"}`);
  }
  if (ev.phase && !ev.sample && ev.posterior === undefined) status(`${ev.phase}: ${ev.samples} samples`);
  requestAnimationFrame(() => view.eventToPaint.push(performance.now() - arrived));
}

function onInfo(info) {
  $("info").textContent = JSON.stringify(info, null, 2);
  show("raw");
  const answers = info.sample_answers || [];
  const rewards = info.sample_rewards || [];
  (info.sample_tokens || []).forEach((tokens, i) => {
    const b = bar(i);
    grow(b, tokens);
    b.row.classList.add("done");
    const parts = [`${tokens} tok`, `→ ${answers[i] ?? "–"}`];
    if (rewards[i] !== undefined && rewards[i] !== null) parts.push(`reward ${rewards[i].toFixed(3)}`);
    b.label.textContent = parts.join(" · ");
  });
  if (Array.isArray(info.classes) && info.classes.length) {
    const table = $("classes");
    const head = document.createElement("tr");
    for (const h of ["answer", "votes", "share", "score"]) {
      const th = document.createElement("th");
      th.textContent = h;
      head.append(th);
    }
    table.replaceChildren(head);
    for (const c of info.classes) {
      const tr = document.createElement("tr");
      if (c.selected) tr.className = "selected";
      const share = c.frequency ?? (c.count && info.samples ? c.count / info.samples : null);
      const score = c.mean_reward ?? c.weight ?? null;
      for (const v of [
        c.answer ?? "–",
        c.count,
        share === null ? "" : `${(100 * share).toFixed(0)}%`,
        score === null || score === undefined ? "" : Number(score).toFixed(3),
      ]) {
        const td = document.createElement("td");
        td.textContent = v;
        tr.append(td);
      }
      table.append(tr);
    }
    show("votes");
    for (const c of info.classes.filter((x) => x.selected)) {
      answers.forEach((a, i) => a === c.answer && bars.get(i)?.row.classList.add("chosen"));
    }
  }
}

function onChunk(chunk) {
  for (const choice of chunk.choices || []) {
    const d = choice.delta || {};
    const prefix = choice.index > 0 && (d.content || d.reasoning_content) ? `\n[${choice.index}] ` : "";
    if (d.reasoning_content) {
      $("reasoning").textContent += prefix + d.reasoning_content;
      show("live");
    }
    if (d.content) {
      $("content").textContent += prefix + d.content;
      show("answer");
    }
  }
  if (chunk.thinkgate) onInfo(chunk.thinkgate);
  if (chunk.usage) {
    const u = chunk.usage;
    const reasoning = u.completion_tokens_details?.reasoning_tokens ?? 0;
    const secs = ((performance.now() - started.at) / 1000).toFixed(2);
    $("usage").textContent =
      `usage: ${u.prompt_tokens} prompt, ${u.completion_tokens} completion ` +
      `(${reasoning} thinking) · ${secs} s`;
    show("answer");
  }
}

async function run(event) {
  event.preventDefault();
  if (!config) {
    try {
      config = await loadConfig();
    } catch (e) {
      showError(e.message);
      return;
    }
  }
  reset();
  bars.clear();
  longest = 1;
  const budget = {};
  for (const input of $("budget").querySelectorAll("input")) {
    if (input.value !== "") budget[input.dataset.field] = Number(input.value);
  }
  const body = {
    model: config.model,
    messages: [{ role: "user", content: $("question").value }],
    stream: true,
    stream_options: { include_usage: true },
    strategy: $("strategy").value,
  };
  if (Object.keys(budget).length) body.budget = budget;
  for (const name of ["max_tokens", "temperature", "seed"]) {
    if ($(name).value !== "") body[name] = Number($(name).value);
  }
  running = new AbortController();
  $("run").disabled = true;
  $("stop").disabled = false;
  started.at = performance.now();
  status("sent");
  try {
    const resp = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: headers(),
      body: JSON.stringify(body),
      signal: running.signal,
    });
    if (!resp.ok) {
      const err = await resp.json().catch(() => null);
      showError(err?.error?.message || `${resp.status} ${resp.statusText}`, err?.error?.param);
      status(`${resp.status}`);
      return;
    }
    const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let nl;
      while ((nl = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, nl).replace(/\r$/, "");
        buffer = buffer.slice(nl + 1);
        if (line.startsWith(": thinkgate.progress ")) {
          onProgress(JSON.parse(line.slice(": thinkgate.progress ".length)));
        } else if (line.startsWith("data: ") && line !== "data: [DONE]") {
          const chunk = JSON.parse(line.slice(6));
          if (chunk.error) showError(chunk.error.message, chunk.error.param);
          else onChunk(chunk);
        }
      }
    }
    status(view.error ? "ended with an error" : "done");
  } catch (e) {
    if (e.name === "AbortError") status("stopped (the server aborts every sample)");
    else showError(e.message);
  } finally {
    view.done = true;
    running = null;
    $("run").disabled = false;
    $("stop").disabled = true;
  }
}

$("ask").addEventListener("submit", run);
$("stop").addEventListener("click", () => running?.abort());
init();
