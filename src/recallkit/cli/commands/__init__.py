"""Sub-commands of the ``recallkit`` command line; each module exposes ``register(subparsers)``."""
