"""What every bench client shares: the prompt, the model, and how to answer faultproxy."""

import json
import os

PROMPT = os.environ.get("FAULTPROXY_PROMPT", "Say hello.")
MODEL = os.environ.get("BENCH_MODEL", "demo-large")
BASE_URL = os.environ["OPENAI_BASE_URL"]


def answer(text: str) -> None:
    with open(os.environ["FAULTPROXY_OUTPUT"], "w") as file:
        json.dump({"answer": text}, file)
