// k6 load test of a thinkgate server: open-loop arrivals over a strategy mix.
//
//   k6 run -e BASE_URL=http://127.0.0.1:8000 -e RATE=8 -e DURATION=2m loadtests/k6/thinkgate.js
//   k6 run -e STRATEGIES=auto -e DEADLINE_MS=2000 -e TOKENS=1000 loadtests/k6/thinkgate.js
//
// Open loop (constant-arrival-rate): latency under load is measured honestly, without the
// coordinated omission of closed-loop clients. What it sends and what it holds the server
// to come from the environment (-e NAME=value):
//   BASE_URL, MODEL, API_KEY      where, which model, a bearer key if the server wants one
//   RATE, DURATION, MAX_VUS       arrivals per second, for how long, the most in flight
//   STRATEGIES                    a comma list drawn uniformly per request (default
//                                 plain,elastic,self-consistency); budgets go to the
//                                 strategies that honour them:
//   THINKING, SOLUTION            per-sample budgets (elastic, budget-guidance); THINKING
//                                 defaults to 256, since the server refuses elastic
//                                 without a thinking budget
//   SAMPLES                       samples or paths (sampling and search strategies)
//   TOKENS, DEADLINE_MS           the request's own ceiling and deadline (every strategy)
//   MAX_TOKENS                    the body's max_tokens (unset: the server's default)
//   P95_MS, CHECK_RATE            thresholds: p95 of the request time, share of checks
//                                 passed; a run that misses either exits non-zero (99)
// Checks: status 200, an answer, usage within TOKENS, the last byte within DEADLINE_MS x 1.1.
// Every request also adds one point to `request_ms` tagged with its outcome (ok, tokens):
// `python -m loadtests.sweep --tool k6` reads them (k6 --out json) into the same goodput
// table as the locust sweep. k6's HTTP client reads a response whole, so time to first
// token is the locust sweep's (it streams).
import http from "k6/http";
import { check } from "k6";
import { Trend } from "k6/metrics";

const BASE = __ENV.BASE_URL || "http://127.0.0.1:8000";
const MODEL = __ENV.MODEL || "testbed-base";
const STRATEGIES = (__ENV.STRATEGIES || "plain,elastic,self-consistency")
  .split(",")
  .map((s) => s.trim())
  .filter((s) => s.length > 0);
const int = (name) => (__ENV[name] ? Number(__ENV[name]) : null);
// elastic is refused without a thinking budget, and it is in the default mix.
const THINKING = __ENV.THINKING ? Number(__ENV.THINKING) : 256;
const SOLUTION = int("SOLUTION");
const SAMPLES = int("SAMPLES");
const TOKENS = int("TOKENS");
const DEADLINE_MS = int("DEADLINE_MS");
const MAX_TOKENS = int("MAX_TOKENS");

const PER_SAMPLE = ["elastic", "budget-guidance"];
const MANY = [
  "self-consistency", "best-of-n", "best-of-majority", "pets", "deepconf", "budget-guidance",
  "beam-search", "particle-filtering", "dvts", "step-rejection",
];

const requestMs = new Trend("request_ms", true);
const reasoningTokens = new Trend("reasoning_tokens");
const answerTokens = new Trend("answer_tokens");

export const options = {
  scenarios: {
    mix: {
      executor: "constant-arrival-rate",
      rate: Number(__ENV.RATE || 8),
      timeUnit: "1s",
      duration: __ENV.DURATION || "1m",
      preAllocatedVUs: Math.min(32, Number(__ENV.MAX_VUS || 256)),
      maxVUs: Number(__ENV.MAX_VUS || 256),
    },
  },
  thresholds: {
    checks: [`rate>=${Number(__ENV.CHECK_RATE || 0.99)}`],
    http_req_duration: [`p(95)<${Number(__ENV.P95_MS || 10000)}`],
  },
  summaryTrendStats: ["avg", "med", "p(90)", "p(95)", "p(99)", "max"],
};

function question() {
  const ops = 1 + Math.floor(Math.random() * 12);
  let expr = String(Math.floor(Math.random() * 10));
  for (let i = 0; i < ops; i++) {
    expr += (Math.random() < 0.5 ? "+" : "-") + String(Math.floor(Math.random() * 10));
  }
  return `Compute ${expr} mod 10.`;
}

function budgetHeaders(strategy) {
  const h = { "X-Strategy": strategy };
  if (PER_SAMPLE.includes(strategy) && THINKING !== null) h["X-Budget-Thinking"] = String(THINKING);
  if (PER_SAMPLE.includes(strategy) && SOLUTION !== null) h["X-Budget-Solution"] = String(SOLUTION);
  if (MANY.includes(strategy) && SAMPLES !== null) h["X-Budget-Samples"] = String(SAMPLES);
  if (TOKENS !== null) h["X-Budget-Tokens"] = String(TOKENS);
  if (DEADLINE_MS !== null) h["X-Budget-Deadline-Ms"] = String(DEADLINE_MS);
  return h;
}

export default function () {
  const strategy = STRATEGIES[Math.floor(Math.random() * STRATEGIES.length)];
  const body = {
    model: MODEL,
    messages: [{ role: "user", content: question() }],
    temperature: strategy === "plain" ? 0 : 1,
  };
  if (MAX_TOKENS !== null) body.max_tokens = MAX_TOKENS;
  const headers = Object.assign({ "Content-Type": "application/json" }, budgetHeaders(strategy));
  if (__ENV.API_KEY) headers.Authorization = `Bearer ${__ENV.API_KEY}`;
  const res = http.post(`${BASE}/v1/chat/completions`, JSON.stringify(body), {
    headers,
    tags: { strategy },
    timeout: "300s",
  });
  const usage = res.status === 200 ? res.json("usage") : null;
  const completion = usage ? usage.completion_tokens : 0;
  const reasoning = usage ? (usage.completion_tokens_details || {}).reasoning_tokens || 0 : 0;
  const ok = check(res, {
    "status 200": (r) => r.status === 200,
    "has answer": (r) => r.status === 200 && typeof r.json("choices.0.message.content") === "string",
    "within the token ceiling": () => TOKENS === null || completion <= TOKENS,
    "by the deadline": (r) => DEADLINE_MS === null || r.timings.duration <= DEADLINE_MS * 1.1,
  });
  requestMs.add(res.timings.duration, {
    strategy,
    ok: ok ? "1" : "0",
    completion_tokens: String(completion),
    reasoning_tokens: String(reasoning),
  });
  if (ok) {
    reasoningTokens.add(reasoning, { strategy });
    answerTokens.add(completion - reasoning, { strategy });
  }
}
