// Node's global fetch, POST to Chat Completions: no package needed.
import { writeFileSync } from "node:fs";

const response = await fetch(`${process.env.OPENAI_BASE_URL}/chat/completions`, {
  method: "POST",
  headers: { "content-type": "application/json", authorization: "Bearer demo" },
  body: JSON.stringify({ model: process.env.BENCH_MODEL || "demo-large",
                         messages: [{ role: "user", content: process.env.FAULTPROXY_PROMPT }] }),
});
if (!response.ok) throw new Error(`HTTP ${response.status}`);
const completion = await response.json();
writeFileSync(process.env.FAULTPROXY_OUTPUT, JSON.stringify({ answer: completion.choices[0].message.content }));
