// A Node agent on the npm `openai` SDK with its defaults: the base URL from $OPENAI_BASE_URL,
// two retries. It asks once and answers with what the model said.
import { writeFileSync } from "node:fs";
import OpenAI from "openai";

const client = new OpenAI({ apiKey: "test-key" });
const completion = await client.chat.completions.create({
  model: "m", messages: [{ role: "user", content: process.env.FAULTPROXY_PROMPT }],
});
writeFileSync(process.env.FAULTPROXY_OUTPUT, JSON.stringify({ answer: completion.choices[0].message.content }));
