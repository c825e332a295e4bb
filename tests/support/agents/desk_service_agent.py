"""A help-desk agent that is an HTTP service (`faultproxy run --chat http://...` or `--chat
openai:http://...`): it listens on $PORT and closes tickets on $DESK_URL with aiohttp through the
proxy (trust_env). It asks before closing, and closes only on a yes.

POST /chat {"session", "message"} -> {"reply"}: it keeps each session's conversation itself.
POST /v1/chat/completions {"messages"} -> a Chat Completions answer: it reads the conversation
so far from `messages` and keeps nothing.
It writes its pid to $DESK_PID_FILE, so a test can see that it was stopped.
"""

import os
import re

from aiohttp import ClientSession, web

DESK = os.environ["DESK_URL"]
sessions: dict[str, list[dict]] = {}


async def answer(history: list[dict]) -> str:
    """The agent's turn after `history` (the user's last turn last)."""
    first = history[0]["content"]
    ticket = (re.search(r"T-\d+", first) or re.search(r".*", "T-0")).group(0)
    said = [m["content"] for m in history if m["role"] == "assistant"]
    async with ClientSession(trust_env=True) as http:
        if not said:
            async with http.get(f"{DESK}/tickets/{ticket}") as response:
                subject = (await response.json())["subject"]
            return f"Ticket {ticket} is about {subject!r}. Shall I close it?"
        if said[-1].endswith("Shall I close it?"):
            if history[-1]["content"].lower().startswith("yes"):
                async with http.post(f"{DESK}/tickets/{ticket}/close", json={"reason": "resolved"}) as response:
                    response.raise_for_status()
                return f"Ticket {ticket} is closed. Anything else?"
            return f"Ticket {ticket} stays open. Anything else?"
    return "Goodbye."


async def chat(request: web.Request) -> web.Response:
    body = await request.json()
    history = sessions.setdefault(body["session"], [])
    history.append({"role": "user", "content": body["message"]})
    reply = await answer(history)
    history.append({"role": "assistant", "content": reply})
    return web.json_response({"reply": reply})


async def completions(request: web.Request) -> web.Response:
    body = await request.json()
    reply = await answer(body["messages"])
    return web.json_response({"id": "chatcmpl-desk", "object": "chat.completion", "model": body.get("model"),
                              "choices": [{"index": 0, "finish_reason": "stop",
                                           "message": {"role": "assistant", "content": reply}}]})


def main() -> None:
    with open(os.environ["DESK_PID_FILE"], "w") as file:
        file.write(str(os.getpid()))
    app = web.Application()
    app.router.add_post("/chat", chat)
    app.router.add_post("/v1/chat/completions", completions)
    web.run_app(app, host="127.0.0.1", port=int(os.environ["PORT"]), print=None)


if __name__ == "__main__":
    main()
