#!/bin/sh
# A plain curl POST to Chat Completions (proxy from HTTPS_PROXY/HTTP_PROXY, CA from CURL_CA_BUNDLE).
set -e
body=$(curl -sS --fail -X POST "$OPENAI_BASE_URL/chat/completions" -H "content-type: application/json" \
  -H "authorization: Bearer demo" -d "{\"model\": \"${BENCH_MODEL:-demo-large}\", \"messages\": [{\"role\": \"user\", \"content\": \"$FAULTPROXY_PROMPT\"}]}")
printf '{"answer": %s}' "$(printf '%s' "$body" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["choices"][0]["message"]["content"]))')" > "$FAULTPROXY_OUTPUT"
