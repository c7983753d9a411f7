// The weather agent on the Vercel AI SDK, built as its docs show and left at its defaults: `openai(model)` (the
// Responses API), `generateText` (not streamed) with one tool and `stopWhen: stepCountIs(5)` so that a tool call
// is followed by the answer, the SDK's own telemetry (`experimental_telemetry`) exported by the OpenTelemetry
// Node SDK over OTLP/HTTP (protobuf). Only the base URL and the model name are set.
//
//   node agent.mjs --model-url URL --otlp URL --plan PLAN.json
//
// PLAN.json: {"system": ..., "model": ..., "questions": [...]} (tests/frameworks/frameworks_support.py).
// One JSON line per run on stdout: {"output": text} or {"raised": error name, "message": ...}.
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

import { createOpenAI } from "@ai-sdk/openai";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { NodeSDK, resources, tracing } from "@opentelemetry/sdk-node";
import { generateText, stepCountIs, tool } from "ai";
import { z } from "zod";

const AGENT = "weather-agent";

const { values: args } = parseArgs({
  options: { "model-url": { type: "string" }, otlp: { type: "string" }, plan: { type: "string" } },
});
for (const name of ["model-url", "otlp", "plan"]) {
  if (!args[name]) throw new Error(`--${name} is required`);
}
const plan = JSON.parse(readFileSync(args.plan, "utf8"));

// Started before the first call: the SDK's spans go to the global tracer provider this registers.
const sdk = new NodeSDK({
  resource: resources.resourceFromAttributes({ "service.name": "vercel-weather" }),
  spanProcessors: [new tracing.BatchSpanProcessor(new OTLPTraceExporter({ url: `${args.otlp}/v1/traces` }))],
});
sdk.start();

// frameworks_support.NoStationError and get_weather, in JavaScript: the error's name is what a trace records.
class NoStationError extends Error {
  constructor(message) {
    super(message);
    this.name = "NoStationError";
  }
}

function getWeather(city) {
  if (city.startsWith("Atlantis")) throw new NoStationError(`no station in ${city}`);
  return `sunny in ${city}`;
}

const openai = createOpenAI({ baseURL: args["model-url"], apiKey: "sk-test" });
const model = openai(plan.model);
const tools = {
  get_weather: tool({
    description: "The current weather in a city.",
    inputSchema: z.object({ city: z.string().describe("The city") }),
    execute: async ({ city }) => getWeather(city),
  }),
};

// One run: its outcome as the line the test reads. A failed run is reported and the others go on, as a service
// answering requests would.
async function run(question) {
  try {
    const result = await generateText({
      model,
      system: plan.system,
      prompt: question,
      tools,
      stopWhen: stepCountIs(5),
      experimental_telemetry: { isEnabled: true, functionId: AGENT },
    });
    return { output: result.text };
  } catch (error) {
    return { raised: error.name, message: String(error.message).split("\n")[0] };
  }
}

// The runs start in the plan's order, each when the one before has ended or has been running for a quarter of a
// second: a run still going then is waiting out the SDK's retry back-off (2 s, then 4 s), which the next runs need
// not wait for, as concurrent requests to a Node service would not. Their start times (whole milliseconds in these
// spans) then keep the plan's order.
const HEAD_START_MS = 250;
try {
  const runs = [];
  for (const question of plan.questions) {
    const outcome = run(question);
    runs.push(outcome);
    let timer;
    await Promise.race([outcome, new Promise((resolve) => { timer = setTimeout(resolve, HEAD_START_MS); })]);
    clearTimeout(timer);
  }
  for (const outcome of await Promise.all(runs)) console.log(JSON.stringify(outcome));
} finally {
  // Flushes the batch processor: the spans of the last runs must reach the daemon before the process exits.
  await sdk.shutdown();
}
