"""A tiny agent for runner tests: it does what its task's prompt says.

Prompts: "ok" (two reads and a refund through the proxy, then an answer), "env" (write the
environment it was given as its answer), "crash" (kill itself with SIGKILL), "hang" (sleep),
"fail" (exit 3), "chatty" (many requests), "slow" (sleep a little, then "ok").
With $PROBE_MARKERS set, it first creates the file $PROBE_MARKERS/<its pid>: tests wait for that.
"""

import json
import os
import signal
import sys
import time

import httpx

prompt = os.environ.get("FAULTPROXY_PROMPT", "ok").lower()
upstream = os.environ["PROBE_UPSTREAM"]
output_path = os.environ.get("FAULTPROXY_OUTPUT")


def answer(value) -> None:
    if output_path:
        with open(output_path, "w") as file:
            json.dump({"answer": value, "confidence": 0.9}, file)


def main() -> int:
    if os.environ.get("PROBE_MARKERS"):
        open(os.path.join(os.environ["PROBE_MARKERS"], str(os.getpid())), "w").close()
    if "crash" in prompt:
        os.kill(os.getpid(), signal.SIGKILL)
    if "hang" in prompt:
        time.sleep(600)
    if "fail" in prompt:
        return 3
    if "env" in prompt:
        names = [n for n in os.environ if n.startswith(("FAULTPROXY_", "HTTP", "http", "NO_PROXY", "no_proxy",
                                                       "SSL_CERT", "REQUESTS_CA", "CURL_CA", "NODE_", "AWS_CA",
                                                       "HTTPLIB2_CA", "GRPC_DEFAULT", "GIT_SSL", "DENO_CERT"))]
        answer({n: os.environ[n] for n in names} | {"argv": sys.argv[1:]})
        return 0
    if "slow" in prompt:
        time.sleep(0.3)
    with httpx.Client(timeout=10) as client:  # proxy and CA from the environment
        requests = 50 if "chatty" in prompt else 2
        for i in range(requests):
            client.get(f"{upstream}/items/{i % 3}")
        refund = client.post(f"{upstream}/items/1/refund", json={"reason": prompt})
    answer(f"refunded: {refund.status_code}")
    return 0


sys.exit(main())
