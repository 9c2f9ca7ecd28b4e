"""``python -m recallkit``: the same as the ``recallkit`` command."""

import sys

from recallkit.cli import main

if __name__ == "__main__":
    sys.exit(main())
