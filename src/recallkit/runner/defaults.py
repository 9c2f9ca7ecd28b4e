"""The runner's defaults, in a module that imports nothing heavy (the command line's help shows
them without loading numpy or torch)."""

from __future__ import annotations

import os
from pathlib import Path

#: torchvision's ImageNet normalisation, the default of ``--mean`` and ``--std``.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: The dtypes an encoder may run in (``--dtype``).
DTYPE_NAMES = ("float32", "float16", "bfloat16")
#: The resamples and seed of every interval and test of ``recallkit compare`` and ``report``, and
#: the most they take (the intervals' own sampling error is far below the four decimals they
#: are printed with long before).
DEFAULT_RESAMPLES = 10_000
DEFAULT_SEED = 0
MAX_RESAMPLES = 100_000_000


def default_cache_dir() -> Path:
    """``$RECALLKIT_CACHE``, else ``$XDG_CACHE_HOME/recallkit/embeddings`` (``~/.cache``)."""
    if os.environ.get("RECALLKIT_CACHE"):
        return Path(os.environ["RECALLKIT_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "recallkit" / "embeddings"
