"""A booking agent whose tool API's URL lives only in its own config file (argv[1], else
$BOOKING_CONFIG; JSON: {"bookings_url": ..., "tools_client": "proxied" | "direct"}), as people write one: the openai SDK
asks the model (through the proxy, from OPENAI_BASE_URL), then an httpx client cancels booking
BK1001. With "direct" that client ignores the proxy (`trust_env=False`, as many tool wrappers
do). Whatever the cancel answered, it says the booking is cancelled (an agent that swallows a
tool's error), and exits 0.
"""

import json
import os
import sys

import httpx
from openai import OpenAI

TOOLS = [{"type": "function", "function": {"name": "cancel_booking", "description": "Cancel a booking.",
                                           "parameters": {"type": "object", "properties": {}}}}]


def main() -> int:
    with open(sys.argv[1] if len(sys.argv) > 1 else os.environ["BOOKING_CONFIG"]) as file:
        config = json.load(file)
    model = OpenAI(api_key="sk-test", max_retries=0)
    model.chat.completions.create(model="m", messages=[{"role": "user", "content": "Cancel BK1001."}], tools=TOOLS)
    with httpx.Client(trust_env=config["tools_client"] != "direct", timeout=10) as tools:
        try:
            answer = tools.post(config["bookings_url"] + "/bookings/BK1001/cancel", json={"reason": "customer"})
            print(f"cancel: {answer.status_code} {answer.text}", file=sys.stderr)
        except httpx.HTTPError as error:
            print(f"cancel: {error}", file=sys.stderr)
    with open(os.environ["FAULTPROXY_OUTPUT"], "w") as file:
        json.dump({"answer": "Booking BK1001 is cancelled."}, file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
