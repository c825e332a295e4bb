"""An agent that, besides its own request, tries to write into episodes that are not its own:
the same episode with a wrong token, and another episode with its own (right) token. Its answer
lists the status of each attempt."""

import json
import os
from urllib.parse import urlsplit

import httpx
import requests

proxy = urlsplit(os.environ["HTTP_PROXY"])
upstream = os.environ["PROBE_UPSTREAM"]
episode, token, address = proxy.username, proxy.password, f"{proxy.hostname}:{proxy.port}"

own = httpx.get(f"{upstream}/items/1", proxy=os.environ["HTTP_PROXY"], timeout=10).status_code
wrong_token = httpx.get(f"{upstream}/items/2", proxy=f"http://{episode}:not-the-token@{address}", timeout=10).status_code
proxies = {"http": f"http://someone-else:{token}@{address}"}
other_episode = requests.get(f"{upstream}/items/3", proxies=proxies, timeout=10).status_code

with open(os.environ["FAULTPROXY_OUTPUT"], "w") as file:
    json.dump({"answer": [own, wrong_token, other_episode], "confidence": 1}, file)
