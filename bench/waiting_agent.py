"""A benchmark agent that mostly waits on its model: a few chat calls, each slow upstream.

It uses urllib (which also honours HTTP_PROXY with credentials) so that interpreter start-up,
not the waiting, is all the CPU it costs.
"""

import json
import os
import urllib.request

model = os.environ["BENCH_MODEL_URL"]
for _ in range(int(os.environ.get("BENCH_CALLS", "8"))):
    request = urllib.request.Request(f"{model}/v1/chat/completions", data=json.dumps({"model": "bench"}).encode(),
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()
