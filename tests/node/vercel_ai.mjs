// The Vercel AI SDK's default OpenAI provider (`openai("courier")`, the Responses API)
// against Courier. Usage: node vercel_ai.mjs <generate|stream|continue>; prints one JSON
// object. COURIER_BASE_URL (with /v1) and COURIER_API_KEY come from the environment.
import { createOpenAI } from "@ai-sdk/openai";
import { generateObject, generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";

const openai = createOpenAI({
  baseURL: process.env.COURIER_BASE_URL,
  apiKey: process.env.COURIER_API_KEY,
});
const model = openai("courier");
const mode = process.argv[2];

async function main() {
  if (mode === "generate") {
    const result = await generateText({ model, prompt: "hi", maxRetries: 0 });
    return {
      text: result.text,
      finishReason: result.finishReason,
      usage: result.usage,
      responseId: result.response.id,
    };
  }
  if (mode === "stream") {
    const result = streamText({ model, prompt: "stream please", maxRetries: 0 });
    const deltas = [];
    for await (const delta of result.textStream) deltas.push(delta);
    return {
      deltas,
      text: await result.text,
      finishReason: await result.finishReason,
      usage: await result.usage,
      responseId: (await result.response).id,
    };
  }
  if (mode === "continue") {
    const first = await generateText({ model, prompt: "remember the word tangerine", maxRetries: 0 });
    const second = await generateText({
      model,
      prompt: "which word?",
      maxRetries: 0,
      providerOptions: { openai: { previousResponseId: first.response.id } },
    });
    return { first: first.text, second: second.text, firstId: first.response.id };
  }
  if (mode === "tools") {
    const result = await generateText({
      model,
      prompt: "weather in Oslo?",
      maxRetries: 0,
      stopWhen: stepCountIs(3),
      tools: {
        get_weather: tool({
          description: "The weather in a city.",
          inputSchema: z.object({ city: z.string() }),
          execute: async ({ city }) => `sunny in ${city}`,
        }),
      },
    });
    return {
      text: result.text,
      steps: result.steps.length,
      calls: result.steps.flatMap((s) => s.toolCalls.map((c) => [c.toolName, c.input])),
    };
  }
  if (mode === "object") {
    const result = await generateObject({
      model,
      prompt: "a forecast",
      maxRetries: 0,
      schema: z.object({ city: z.string(), sunny: z.boolean() }),
    });
    return { object: result.object };
  }
  throw new Error(`unknown mode ${mode}`);
}

main().then(
  (out) => process.stdout.write(JSON.stringify(out) + "\n"),
  (err) => {
    process.stderr.write(String(err && err.stack ? err.stack : err) + "\n");
    process.exit(1);
  },
);
