// k6 load test of a thinkgate server: open-loop arrivals over a strategy mix.
//   k6 run -e BASE_URL=http://127.0.0.1:8000 -e RATE=8 -e DURATION=2m loadtests/k6/thinkgate.js
// Open loop (constant-arrival-rate): latency under load is measured honestly, without
// the coordinated omission of closed-loop clients. Checks fail on any non-200 or empty
// answer; thresholds encode the SLO (edit to taste).
// Metric names follow the locust records (loadtests/locustfile.py, loadtests/report.py):
// e2e_ms, reasoning_tokens, answer_tokens, tagged by strategy. k6's core HTTP client
// reads a response whole, so time to first token (ttft_ms) and to first answer token
// (ttfo_ms) need a streaming reader: run the streamed scenario with the xk6-sse
// extension, or use the locust sweep (python -m loadtests.sweep), which measures both.
import http from "k6/http";
import { check } from "k6";
import { Trend } from "k6/metrics";

const BASE = __ENV.BASE_URL || "http://127.0.0.1:8000";
const MODEL = __ENV.MODEL || "testbed-base";
const e2e = new Trend("e2e_ms", true);
const reasoningTokens = new Trend("reasoning_tokens");
const answerTokens = new Trend("answer_tokens");

export const options = {
  scenarios: {
    mix: {
      executor: "constant-arrival-rate",
      rate: Number(__ENV.RATE || 8),
      timeUnit: "1s",
      duration: __ENV.DURATION || "1m",
      preAllocatedVUs: 32,
      maxVUs: 256,
    },
  },
  thresholds: {
    checks: ["rate>0.99"],
    "http_req_duration{strategy:plain}": ["p(99)<10000"],
  },
};

function question() {
  const ops = 1 + Math.floor(Math.random() * 12);
  let expr = String(Math.floor(Math.random() * 10));
  for (let i = 0; i < ops; i++) {
    expr += (Math.random() < 0.5 ? "+" : "-") + String(Math.floor(Math.random() * 10));
  }
  return `Compute ${expr} mod 10.`;
}

const SCENARIOS = [
  { strategy: "plain", headers: {}, body: { temperature: 0, max_tokens: 256 } },
  {
    strategy: "elastic",
    headers: { "X-Strategy": "elastic", "X-Budget-Thinking": "32", "X-Budget-Solution": "16" },
    body: { temperature: 1 },
  },
  {
    strategy: "self-consistency",
    headers: { "X-Strategy": "self-consistency", "X-Budget-Samples": "4" },
    body: { temperature: 1 },
  },
];

export default function () {
  const s = SCENARIOS[Math.floor(Math.random() * SCENARIOS.length)];
  const body = Object.assign(
    { model: MODEL, messages: [{ role: "user", content: question() }] },
    s.body,
  );
  const res = http.post(`${BASE}/v1/chat/completions`, JSON.stringify(body), {
    headers: Object.assign({ "Content-Type": "application/json" }, s.headers),
    tags: { strategy: s.strategy },
    timeout: "300s",
  });
  const ok = check(res, {
    "status 200": (r) => r.status === 200,
    "has answer": (r) => r.status === 200 && r.json("choices.0.message.content") !== null,
  });
  e2e.add(res.timings.duration, { strategy: s.strategy });
  if (ok) {
    const usage = res.json("usage");
    const reasoning = (usage.completion_tokens_details || {}).reasoning_tokens || 0;
    reasoningTokens.add(reasoning, { strategy: s.strategy });
    answerTokens.add(usage.completion_tokens - reasoning, { strategy: s.strategy });
  }
}
