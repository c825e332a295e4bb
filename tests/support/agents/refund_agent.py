"""An agent that refunds order 1001 with `requests` through the proxy, as people write them.

$REFUND_MODE:
  naive     one POST with timeout=5; on any error, one retry without an idempotency key
  same_key  the same, but both sends carry one idempotency key (a careful agent)
  claim     one POST; whatever happens, it answers that the refund is done
  traced    as naive, but each send carries a fresh correlation_id in its body
  telemetry as naive, after reporting its start to $TELEMETRY_URL as frameworks do (a failure
            there is ignored: it has nothing to do with the refund)
It answers {"answer": "refunded"} on FAULTPROXY_OUTPUT unless the refund visibly failed.
"""

import json
import os
import sys
import uuid

import requests

URL = os.environ["PAY_URL"] + "/refunds"
BODY = {"order": "1001", "amount_cents": 1250}


def answer(text: str) -> None:
    with open(os.environ["FAULTPROXY_OUTPUT"], "w") as file:
        json.dump({"answer": text}, file)


def main() -> int:
    mode = os.environ.get("REFUND_MODE", "naive")
    headers = {"Idempotency-Key": "refund-1001"} if mode == "same_key" else {}
    attempts = 1 if mode == "claim" else 2
    if mode == "telemetry":
        try:
            requests.post(os.environ["TELEMETRY_URL"], json={"event": "agent_start"}, timeout=5)
        except requests.RequestException as error:
            print(f"telemetry: {error}", file=sys.stderr)
    for attempt in range(attempts):
        try:
            body = {**BODY, "correlation_id": str(uuid.uuid4())} if mode == "traced" else BODY
            response = requests.post(URL, json=body, headers=headers, timeout=5)
            if response.status_code < 300 or mode == "claim":
                break
        except requests.RequestException as error:
            print(f"attempt {attempt + 1} failed: {error}", file=sys.stderr)
            if mode == "claim":
                break
    else:
        return 1
    answer("refunded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
