"""A plain httpx POST to Chat Completions (proxy and CA from the environment)."""

import httpx
from common import BASE_URL, MODEL, PROMPT, answer

response = httpx.post(f"{BASE_URL}/chat/completions", json={"model": MODEL, "messages": [{"role": "user", "content": PROMPT}]},
                      headers={"authorization": "Bearer demo"}, timeout=30)
response.raise_for_status()
answer(response.json()["choices"][0]["message"]["content"])
