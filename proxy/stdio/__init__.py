"""MCP over stdio: the shim that sits in place of a stdio MCP server's command.

The shim starts the server, and sends every JSON-RPC message the client writes through the
chaos proxy as an HTTP exchange addressed to `http://<server>.stdio.invalid/mcp` (a name that can
never resolve). The proxy matches, decides, injects and records it exactly as it does MCP over
HTTP; `StdioRoute` then delivers it to a small loopback HTTP endpoint of the shim, which writes
it to the server's stdin and answers with the line the server writes back. So one scenario
faults a tool whichever transport carries it, the exchanges land in the episode's own trace in
call order with the same keyed-hash decisions, and replay answers them from the recording with
no server at all. Modules: messages (JSON-RPC lines), child (the server process), upstream
(the loopback endpoint), route (the proxy addon), locate (which episode), shim (the relay).
"""
