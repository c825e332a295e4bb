"""An agent for process-lifetime tests: it starts a child, writes both pids to
$SLEEPER_MARKERS/<episode>.pids, and waits while the file $SLEEPER_HOLD exists (up to 10 min);
then it answers and exits. Neither process reacts to its runner's death by itself."""

import json
import os
import subprocess
import sys
import time

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
markers = os.environ["SLEEPER_MARKERS"]
scratch = os.path.join(markers, os.environ["FAULTPROXY_EPISODE"] + ".tmp")
with open(scratch, "w") as file:
    json.dump([os.getpid(), child.pid], file)
os.replace(scratch, os.path.join(markers, os.environ["FAULTPROXY_EPISODE"] + ".pids"))  # whole or absent
deadline = time.monotonic() + 600
while os.path.exists(os.environ["SLEEPER_HOLD"]) and time.monotonic() < deadline:
    time.sleep(0.1)
child.kill()
with open(os.environ["FAULTPROXY_OUTPUT"], "w") as file:
    json.dump({"answer": "done"}, file)
