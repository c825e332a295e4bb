"""The chaos proxy: the mitmproxy addon that matches, decides, injects and records, and the
embedded server that runs it."""
