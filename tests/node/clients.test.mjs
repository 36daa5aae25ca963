// Courier driven by the official openai Node SDK, against a live server and the simulator.
// Started by tests/test_clients_node.py, which passes COURIER_BASE_URL, COURIER_API_KEY and
// SIM_BASE_URL. Each test scripts the simulator through its /_sim/* controls, so the answer
// the SDK must accept is known exactly.
import assert from "node:assert/strict";
import { beforeEach, test } from "node:test";
import OpenAI from "openai";

const BASE = process.env.COURIER_BASE_URL;
const SIM = process.env.SIM_BASE_URL;
if (!BASE || !SIM) throw new Error("COURIER_BASE_URL and SIM_BASE_URL must be set");

const client = new OpenAI({
  baseURL: `${BASE}/v1`,
  apiKey: process.env.COURIER_API_KEY,
  maxRetries: 0,
});

const WEATHER = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the weather for a city.",
    parameters: {
      type: "object",
      properties: { city: { type: "string" } },
      required: ["city"],
      additionalProperties: false,
    },
  },
};

async function sim(path, body) {
  const response = await fetch(`${SIM}${path}`, {
    method: body === undefined ? "GET" : "POST",
    headers: { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  assert.equal(response.status, 200, await response.clone().text());
  return response.json();
}

async function assertScriptDone() {
  const status = await sim("/_sim/script");
  assert.deepEqual(status, { remaining: 0, failures: [] });
}

beforeEach(async () => {
  await sim("/_sim/reset", {});
});

test("chat non-stream", async () => {
  await sim("/_sim/script", [{ reply: { text: "Hello from Node." } }]);
  const completion = await client.chat.completions.create({
    model: "courier",
    messages: [{ role: "user", content: "hi" }],
  });
  assert.equal(completion.object, "chat.completion");
  assert.equal(completion.choices[0].message.content, "Hello from Node.");
  assert.equal(completion.choices[0].finish_reason, "stop");
  assert.ok(completion.usage.prompt_tokens > 0);
  await assertScriptDone();
});

test("chat stream", async () => {
  await sim("/_sim/script", [{ reply: { text: "Streaming from Node works." } }]);
  // The helper accumulates like the SDK's users do: a repeated role would corrupt it.
  const stream = client.chat.completions.stream({
    model: "courier",
    messages: [{ role: "user", content: "hi" }],
    stream_options: { include_usage: true },
  });
  let chunks = 0;
  for await (const _chunk of stream) chunks += 1;
  const final = await stream.finalChatCompletion();
  assert.ok(chunks > 1);
  assert.equal(final.choices[0].message.role, "assistant");
  assert.equal(final.choices[0].message.content, "Streaming from Node works.");
  assert.equal(final.choices[0].finish_reason, "stop");
  assert.ok(final.usage && final.usage.total_tokens > 0);
  await assertScriptDone();
});

test("client tool round trip streamed", async () => {
  await sim("/_sim/script", [
    { reply: { tool_calls: [{ name: "get_weather", id: "call_n1", arguments: { city: "Lima" } }] } },
    { expect: { last_tool_result_contains: "fog" }, reply: { text: "Foggy in Lima." } },
  ]);
  const user = { role: "user", content: "Weather in Lima?" };
  const first = client.chat.completions.stream({ model: "courier", messages: [user], tools: [WEATHER] });
  for await (const _chunk of first);
  const asked = await first.finalChatCompletion();
  const choice = asked.choices[0];
  assert.equal(choice.finish_reason, "tool_calls");
  assert.equal(choice.message.tool_calls.length, 1);
  const call = choice.message.tool_calls[0];
  assert.equal(call.id, "call_n1");
  assert.equal(call.type, "function");
  assert.equal(call.function.name, "get_weather");
  assert.deepEqual(JSON.parse(call.function.arguments), { city: "Lima" });

  const messages = [
    user,
    { role: "assistant", content: choice.message.content ?? null, tool_calls: choice.message.tool_calls },
    { role: "tool", tool_call_id: call.id, content: "fog" },
  ];
  const second = client.chat.completions.stream({ model: "courier", messages, tools: [WEATHER] });
  for await (const _chunk of second);
  const answer = await second.finalChatCompletion();
  assert.equal(answer.choices[0].finish_reason, "stop");
  assert.equal(answer.choices[0].message.content, "Foggy in Lima.");
  await assertScriptDone();
});

test("greeting with a lone system message", async () => {
  await sim("/_sim/script", [
    { expect: { system_contains: "Greet the user." }, reply: { text: "Hi there!" } },
  ]);
  const stream = await client.chat.completions.create({
    model: "courier",
    stream: true,
    stream_options: { include_usage: true },
    messages: [{ role: "system", content: "Greet the user." }],
  });
  let text = "";
  let finish = null;
  for await (const chunk of stream) {
    for (const choice of chunk.choices) {
      text += choice.delta.content ?? "";
      finish = choice.finish_reason ?? finish;
    }
  }
  assert.equal(text, "Hi there!");
  assert.equal(finish, "stop");
  await assertScriptDone();
});
