"""The watchdog: ends agents' process groups when the process that started them goes away.

Run as a script (`python -I -S watchdog.py`, standard library only, so it starts in a few
milliseconds) by runner.agent_guard, in a session of its own so that no signal aimed at the
runner's group reaches it. It reads lines from its stdin, a pipe only the runner holds:

    + PGID    an agent's process group started
    - PGID    it ended (the runner killed it)

When the pipe reaches end of file — the runner exited or was killed, by any signal, kill -9
included — the kernel has closed the runner's end, and the watchdog kills every group still
listed, then exits. This works wherever pipes and process groups do (Linux, macOS, the BSDs).
"""

import os
import signal
import sys


def main() -> int:
    """Follow the runner's list of agent groups until its pipe closes; then end what is left."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the runner, which stops its agents itself
    groups: set[int] = set()
    for line in sys.stdin.buffer:
        op, _, number = line.decode("ascii", "replace").strip().partition(" ")
        if not number.isdigit():
            continue
        if op == "+":
            groups.add(int(number))
        elif op == "-":
            groups.discard(int(number))
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:  # already gone
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
