// The npm openai SDK with its defaults (base URL from OPENAI_BASE_URL, two retries).
import { writeFileSync } from "node:fs";
import OpenAI from "openai";

const client = new OpenAI();
const completion = await client.chat.completions.create({
  model: process.env.BENCH_MODEL || "demo-large", messages: [{ role: "user", content: process.env.FAULTPROXY_PROMPT }],
});
writeFileSync(process.env.FAULTPROXY_OUTPUT, JSON.stringify({ answer: completion.choices[0].message.content }));
