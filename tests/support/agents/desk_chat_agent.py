"""A help-desk agent that talks over stdin and stdout (`faultproxy run --chat stdio`): each line
it reads is a user turn, each line it prints its own. It closes a ticket on $DESK_URL with
`requests` through the proxy.

$DESK_MODE:
  careful  looks the ticket up, asks before closing it (a JSON turn), closes it only on a yes
  twice    as careful, but asks a second time after the first yes, and closes on the second
  eager    as careful, but takes any answer not starting with "no" for a yes
  hasty    closes the ticket first, then tells the user (plain text turns)
  mute     reads the user's first turn and never answers
  nudge    as careful, but asks "Are you still there?" when the user is silent for NUDGE_S after its question
"""

import json
import os
import queue
import re
import sys
import threading
import time

import requests

DESK = os.environ["DESK_URL"]
NUDGE_S = 2.0  # a scripted user answers in milliseconds: this long is silence, even on a loaded machine


def say(text: str, as_json: bool = False) -> None:
    print(json.dumps({"role": "assistant", "content": text}) if as_json else text, flush=True)


def ticket_of(text: str) -> str:
    found = re.search(r"T-\d+", text)
    return found.group(0) if found else "T-0"


def close(ticket: str) -> None:
    requests.post(f"{DESK}/tickets/{ticket}/close", json={"reason": "resolved"}, timeout=10).raise_for_status()


def agrees(mode: str, answer: str) -> bool:
    answer = answer.strip().lower()
    return not answer.startswith("no") if mode == "eager" else answer.startswith(("yes", "sure"))


def read_stdin(heard: "queue.Queue[str | None]") -> None:
    """Each user turn into `heard`, then None when stdin closes (so the main loop can wait with a timeout)."""
    for line in sys.stdin:
        heard.put(line)
    heard.put(None)


def main() -> int:
    mode = os.environ.get("DESK_MODE", "careful")
    ticket, asked, asks = None, False, 2 if mode == "twice" else 1
    heard: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=read_stdin, args=(heard,), daemon=True).start()
    while True:
        try:
            line = heard.get(timeout=NUDGE_S if mode == "nudge" and asked else None)
        except queue.Empty:
            say("Are you still there?")
            continue
        if line is None:
            break
        if mode == "mute":
            time.sleep(3600)
        if ticket is None:
            ticket = ticket_of(line)
            if mode == "hasty":
                close(ticket)
                say(f"Closed ticket {ticket}. Anything else?")
            else:
                subject = requests.get(f"{DESK}/tickets/{ticket}", timeout=10).json()["subject"]
                say(f"Ticket {ticket} is about {subject!r}. Shall I close it? It cannot be reopened.", as_json=True)
                asked = True
        elif asked and agrees(mode, line) and asks > 1:
            asks -= 1
            say(f"Closing {ticket} for good now. Shall I go ahead?", as_json=True)
        elif asked and agrees(mode, line):
            close(ticket)
            asked = False
            say(f"Done: ticket {ticket} is closed. Anything else?", as_json=True)
        elif asked:
            asked = False
            say(f"All right, ticket {ticket} stays open. Anything else?", as_json=True)
        else:
            say("Goodbye.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
