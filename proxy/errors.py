"""Errors a user can act on."""


class UsageError(Exception):
    """Bad input from the user: the CLI reports it in one line and exits with status 2."""
