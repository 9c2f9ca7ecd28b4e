"""``python -m recallkit``: the same as the ``recallkit`` command."""

from recallkit.cli import entry

if __name__ == "__main__":
    entry()
