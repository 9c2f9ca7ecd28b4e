"""Exceptions raised for user errors."""

from __future__ import annotations


class UsageError(ValueError):
    """A user error (bad file, bad argument) reported by the command line as one line, exit 2."""
