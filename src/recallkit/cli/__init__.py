"""The ``recallkit`` command line: the parser and dispatch (:mod:`~recallkit.cli.app`), its
one-line errors (:mod:`~recallkit.cli.errors`) and one module per sub-command
(:mod:`recallkit.cli.commands`). The application layer: the library never imports it."""

from recallkit.cli.app import entry, main

__all__ = ["entry", "main"]
