"""The ``recallkit`` command line: the parser and dispatch ([`app`][recallkit.cli.app]), its
one-line errors ([`errors`][recallkit.cli.errors]) and one module per sub-command
([`recallkit.cli.commands`][recallkit.cli.commands]). The application layer: the library never
imports it."""

from recallkit.cli.app import entry, main

__all__ = ["entry", "main"]
