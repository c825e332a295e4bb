// A Node agent that refunds with the global fetch, as people write them: one POST to $REFUND_URL,
// and an honest answer on $FAULTPROXY_OUTPUT. Nothing in it knows about proxies.
import { writeFileSync } from "node:fs";

const response = await fetch(process.env.REFUND_URL, {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ order: "1001", amount_cents: 1250 }),
});
writeFileSync(process.env.FAULTPROXY_OUTPUT, JSON.stringify({ answer: response.ok ? "refunded" : "failed" }));
