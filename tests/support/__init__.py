"""What the tests share: fixtures, local upstreams and MCP servers, and the agents tests start by path."""
