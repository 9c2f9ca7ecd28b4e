"""numba's compiled kernels: where they are cached, whether a call would compile them, and the one
line a compile prints.

numba compiles a kernel on its first call and keeps the machine code (``cache=True``) in its
cache folder, per kernel, argument types, CPU and source file: ``__pycache__`` beside the source
where that is writable, else numba's folder in the user's cache (``~/.cache/numba``), or
``$NUMBA_CACHE_DIR/...`` when that variable is set before numba is imported. A process finds
there what an earlier one compiled, so compiling happens once per machine and recallkit version.

Compiling the kernels of a first call takes seconds (about 6 s for recall@K, 12 s more for the
ranked lists of MAP@R or a k-NN, on 2 cores of a Xeon; ``benchmarks/bench_first_call.py``). So:

* the first compile of a recallkit kernel in a process prints one line to stderr, once:
  ``compiling recallkit's kernels, once: about N s; cached in DIR`` ([`announce`][announce], from
  numba's compile event, so it is printed only when a compile actually happens);
* while the kernels a call needs are not compiled, or not loaded in this process (numba's start
  in a process takes 0.3 s there, a second under load), the engine may run the call on the torch
  back end instead ([`recallkit.engine`][recallkit.engine], ``RECALLKIT_COLD_START``): the same
  ranks, bit for bit, with nothing to compile or load. The shared preparation of the rows
  ([`exact`][exact], [`filters`][filters]) uses the torch operations where its kernel is not loaded
  ([`usable`][usable]), until a call of the process has run the numba back end ([`allow`][allow]).

This module imports numba and the standard library only; it sits above every other module of
the engine.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import numba
from numba.core import event

__all__ = [
    "COLD_START_VARIABLE",
    "allow",
    "allowed",
    "announce",
    "cache_folder",
    "cached",
    "cold_start",
    "expect",
    "loaded",
    "usable",
]

COLD_START_VARIABLE = "RECALLKIT_COLD_START"
COLD_STARTS = ("auto", "compile")
PREFIX = "recallkit."

_lock = threading.Lock()
_allowed = False
_announced = False
_expected = 0.0


def cold_start() -> str:
    """What a call does while the kernels it needs are not compiled (``RECALLKIT_COLD_START``):
    ``"auto"`` (the default: the torch back end while that costs less than compiling) or
    ``"compile"`` (compile at once, as numba alone does)."""
    value = os.environ.get(COLD_START_VARIABLE, "").strip().lower() or "auto"
    if value not in COLD_STARTS:
        raise ValueError(
            f"The {COLD_START_VARIABLE} environment variable must be one of {COLD_STARTS}. "
            f"Got {value!r}."
        )
    return value


def allowed() -> bool:
    """Whether a call of this process has run the numba back end ([`allow`][allow]): from then on
    the preparation of the rows uses numba's kernels too, loading or compiling them. Before, it
    uses the torch operations where a kernel is not loaded: the first compile of a process comes
    from the engine's pass, after it said ([`expect`][expect]) what the call will compile."""
    return _allowed


def allow() -> None:
    """The process runs numba from now on (a call chose the numba back end)."""
    global _allowed
    _allowed = True


def loaded(kernel: Any, args: tuple | None = None) -> bool:
    """Whether ``kernel`` (a numba dispatcher) is compiled in this process for the types of
    ``args`` (for any types without ``args``): calling it costs nothing more."""
    try:
        if args is None:
            return bool(kernel.overloads)
        return tuple(kernel.typeof_pyval(a) for a in args) in kernel.overloads
    except Exception:  # not a numba dispatcher (NUMBA_DISABLE_JIT): nothing to compile
        return True


def cached(kernel: Any) -> bool:
    """Whether numba's cache holds ``kernel`` compiled for this CPU and this source (for some
    argument types), or this process compiled it: calling it loads it (milliseconds; the first
    kernel of a process also starts numba's code generation, a third of a second or more).

    It reads numba's cache index the way numba does (``numba.core.caching``); where that is not
    possible (another numba, caching off) it answers ``True``: numba then decides, as it would
    without this check, and a compile still prints its line.
    """
    try:
        if kernel.overloads:
            return True
        cache = kernel._cache
        index = cache._cache_file._load_index()
        if not index:
            return False
        key = cache._index_key(None, kernel.targetctx.codegen())
        return any(tuple(k[1:]) == tuple(key[1:]) for k in index)
    except Exception:
        return True


def usable(kernel: Any, args: tuple) -> bool:
    """Whether the preparation of the rows calls ``kernel`` on ``args``: compiled in this process
    for their types ([`loaded`][loaded]), or a call of the process has run the numba back end
    ([`allowed`][allowed]); else it uses the torch operations (the same values), so that a call that
    runs on torch starts no numba."""
    return _allowed or loaded(kernel, args)


def cache_folder(kernel: Any) -> str:
    """The folder numba keeps ``kernel`` compiled in: for recallkit's, the folder of all of them
    (the engine's sources share one folder)."""
    try:
        return str(kernel._cache.cache_path)
    except Exception:
        return str(numba.config.CACHE_DIR or "numba's cache")


def expect(seconds: float) -> None:
    """The compile time the line of [`announce`][announce] will state, if a compile happens next:
    the measured compile time of the kernels the coming call needs and lacks."""
    global _expected
    _expected = float(seconds)


def announce(kernel: Any) -> bool:
    """Print the line once per process, before numba compiles ``kernel``; ``True`` if printed
    now."""
    global _announced
    with _lock:
        if _announced:
            return False
        _announced = True
    seconds = max(1, round(_expected)) if _expected > 0 else None
    about = f"about {seconds} s" if seconds else "some seconds"
    line = f"compiling recallkit's kernels, once: {about}; cached in {cache_folder(kernel)}\n"
    try:
        sys.stderr.write(line)
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):  # no stderr, or a closed one
        pass
    return True


class _Compiles(event.Listener):
    """numba's compile event: the first compile of a recallkit kernel prints the line."""

    def on_start(self, ev: event.Event) -> None:
        dispatcher = ev.data.get("dispatcher") if isinstance(ev.data, dict) else None
        module = getattr(getattr(dispatcher, "py_func", None), "__module__", "") or ""
        if module.startswith(PREFIX) and not _announced:
            announce(dispatcher)

    def on_end(self, ev: event.Event) -> None:
        pass


event.register("numba:compile", _Compiles())
