"""Errors the command line reports as one line with exit code 2."""


class UsageError(Exception):
    """Bad input, found before Ray starts; reported as one line, exit code 2."""
