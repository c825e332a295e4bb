"""The `faultproxy` command: thin commands over the library."""
