"""MCP over stdio: the shim that sits in place of a stdio MCP server's command.

The shim starts the server. Outside an episode it relays the session itself; in one, it hands
the session's pipes to the episode's proxy (lane), which relays them (session) and passes each
message through the fault injector as the HTTP exchange it stands for, `POST
http://<server>.stdio.invalid/mcp` (passage): the proxy matches, decides, injects and records it
exactly as it does MCP over HTTP, with no extra hop per message. So one scenario faults a tool
whichever transport carries it, the exchanges land in the episode's own trace in call order with
the same keyed-hash decisions, and replay answers them from the recording with no server at all.
Modules: messages (JSON-RPC lines), child (the server process), pipes (streams over them),
upstream (the server's side of a session), passage (through the injector), session (the relay),
lane and handover (the proxy's and the shim's ends of the hand-over), route (names), locate
(which episode), shim (the process).
"""
