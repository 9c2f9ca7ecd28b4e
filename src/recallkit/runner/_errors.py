"""The runner's exception for bad input (a missing folder, an unreadable file, a bad encoder)."""

from __future__ import annotations

from recallkit.exceptions import RecallkitError


class RunnerError(RecallkitError):
    """Bad input to a runner function; the message names the file or argument at fault.

    The command line prints it as one line with exit status 2, as every ``ValueError``.
    """
