"""litellm's completion() against an OpenAI-compatible endpoint."""

import litellm
from common import BASE_URL, MODEL, PROMPT, answer

response = litellm.completion(model=f"openai/{MODEL}", api_base=BASE_URL, messages=[{"role": "user", "content": PROMPT}])
answer(response.choices[0].message.content)
