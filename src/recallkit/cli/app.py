"""The ``recallkit`` command line: the sub-commands of the modules in
[`recallkit.cli.commands`][recallkit.cli.commands].

Each module in ``recallkit/cli/commands/`` exposes ``register(subparsers)``, which adds its
sub-commands and sets ``func`` (``args -> int`` exit status), ``parameters`` (the library's
parameter names -> the options that supply them) and, optionally, ``check`` (``args -> None``:
the arguments and the optional packages they need, checked before the engine's native libraries
are imported, so that a bad argument or a missing extra is said at once) as the parser defaults.

Every error is one line on stderr, ``recallkit COMMAND: error: ...``, with exit status 2, never
a traceback:

- bad input is a ``ValueError`` (the commands'
  [`recallkit.cli.errors.UsageError`][recallkit.cli.errors.UsageError], the runner's
  ``RunnerError``, the library's own) or an ``OSError`` from the system (a full disk, a read-only
  folder); a library message is said in the command line's words, naming options rather than Python
  parameters ([`recallkit.cli.errors.error_text`][recallkit.cli.errors.error_text]);
- a feature whose optional packages are missing or broken raises
  [`recallkit._loading.MissingExtraError`][recallkit._loading.MissingExtraError] before it writes
  anything: its line names the packages, the extra and the install command;
- argparse's own errors (an unknown option or command, an invalid choice, a bad number) are one
  line too, without the usage, with "did you mean ...?" when an option, a choice or a command
  is close to a known one.

A command records the state of every input file it reads (embeddings, labels, manifests,
annotations, run files, cached embeddings, weights, and the images it encodes by their size and
modification time alone: [`recallkit._inputs.pinned.recording`][recallkit._inputs.pinned.recording])
and, once it has computed and before it prints its report or writes anything, refuses with one line
when one of them changed meanwhile
([`recallkit.cli.commands._args.unchanged_inputs`][recallkit.cli.commands._args.unchanged_inputs]):
exit status 2, nothing written.

An interrupted command (Ctrl-C) prints ``recallkit COMMAND: interrupted`` and exits with status
130, wherever the interrupt lands ([`_CtrlC`][_CtrlC]); outputs are written atomically, so it
leaves no partial file. A command run with ``--quiet`` prints nothing but that error line: its
report, progress, notes and warnings are dropped. ``recallkit`` alone prints the help;
``recallkit --version`` the version.
"""

from __future__ import annotations

import _thread
import argparse
import contextlib
import difflib
import importlib
import io
import os
import re
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn

from recallkit import __version__
from recallkit._loading import MissingExtraError
from recallkit.cli.errors import error_text, warning_text

# (command, module of recallkit.cli.commands that registers it, one-line help), in the order of
# ``recallkit --help``: the image runner first, the benchmark protocols after. The help line is
# the one the module registers (a test keeps them equal); it is written here too so that
# ``recallkit --help`` imports no command module (and so neither torch nor the image pipeline).
COMMANDS = (
    ("evaluate", "evaluate", "recall@K of an encoder on query and gallery images"),
    ("compare", "compare", "compare two or more runs: every metric, intervals, paired tests"),
    (
        "report",
        "report",
        "tables (Markdown, LaTeX, CSV, JSON) and a self-contained HTML report of runs",
    ),
    ("plot", "plot", "draw a metric across the runs of a history file"),
    (
        "demo",
        "demo",
        "the whole path on real images that ship with scikit-learn (no download)",
    ),
    ("cirr", "protocols", "CIRR recall@K, recall_subset@K, avg; test-server submission files"),
    (
        "circo",
        "protocols",
        "CIRCO mAP@K, recall@K and mAP@10 per semantic aspect; test-server submission file",
    ),
    ("fashioniq", "protocols", "FashionIQ recall@10/50 per category and their means (validation)"),
    ("genecis", "protocols", "GeneCIS recall@1/2/3 per task and the average recall@1"),
    ("image-text", "protocols", "image-text retrieval recall@K (COCO 5k, Flickr30k 1k)"),
)
NAMES = tuple(name for name, _, _ in COMMANDS)
# The command modules that run the engine: they import its native libraries (torch, numba, and
# ONNX Runtime where installed, which the int8 filter loads) before the command starts, with
# Ctrl-C held until the imports are done (an interrupt raised inside such an import, in its
# native initialisation, aborts the process or comes out as an ImportError).
ENGINE_MODULES = frozenset({"evaluate", "demo", "protocols"})
NATIVE_IMPORTS = (("torch", True), ("numba", True), ("onnxruntime", False))  # (module, required)
PROG = "recallkit"
# The environment variables a user sets, in ``recallkit --help`` (docs/performance.md#the-first-
# call-in-a-process for the kernels).
ENVIRONMENT = """\
environment:
  NUMBA_CACHE_DIR       where numba keeps the engine's compiled kernels (default: __pycache__
                        beside recallkit/engine's sources, else ~/.cache/numba); a first run
                        with a new one compiles them (seconds; one line says so)
  RECALLKIT_COLD_START  compile: compile or load the kernels at the first call, rather than
                        run calls on torch while that costs less (same results)
  RECALLKIT_CACHE       the embedding cache of evaluate (default ~/.cache/recallkit/embeddings)"""
#: The exit status of a command stopped by Ctrl-C (128 + SIGINT), as a shell reports it.
INTERRUPTED = 130


class CommandLineError(Exception):
    """An argparse error, raised instead of printed: ``prog`` is the (sub-)command's name."""

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(message)
        self.prog = prog
        self.message = message


def did_you_mean(word: str, candidates: Sequence[str]) -> str:
    """``"; did you mean X?"`` for the candidate closest to ``word``, or ``""``.

    Leading dashes are ignored in the comparison (every option has them); a word that begins
    exactly one candidate suggests it too.

    >>> did_you_mean("--imgaes", ["--images", "--query", "--gallery"])
    '; did you mean --images?'
    >>> did_you_mean("euc", ["cosine", "dot", "euclidean"])
    '; did you mean euclidean?'
    >>> did_you_mean("zzz", ["cosine", "dot"])
    ''
    """
    bare = {candidate.lstrip("-"): candidate for candidate in candidates}
    key = word.lstrip("-")
    matches = difflib.get_close_matches(key, list(bare), n=1, cutoff=0.6)
    if not matches and key:
        matches = [c for c in bare if c.startswith(key)]
        if len(matches) != 1:
            matches = []
    return f"; did you mean {bare[matches[0]]}?" if matches else ""


def _choices(values: Any) -> str:
    return ", ".join(str(v) for v in values)


_ARGUMENT = re.compile(r"^argument ([^:]+): (.*)$", re.S)
_BAD_NUMBER = re.compile(r"^invalid (int|float) value: (.*)$", re.S)


def _argparse_text(message: str) -> str:
    """argparse's message on one line: ``--opt: what`` (``argument`` dropped), or the type's own
    message when it already names the option.

    >>> _argparse_text("argument --epochs: --epochs takes a positive integer. Got '0'.")
    "--epochs takes a positive integer. Got '0'."
    >>> _argparse_text("argument --resize: invalid int value: 'big'")
    "--resize takes an integer. Got 'big'."
    """
    match = _ARGUMENT.match(message)
    if match:
        option, rest = match.groups()
        number = _BAD_NUMBER.match(rest)
        if number:
            kind = "an integer" if number.group(1) == "int" else "a number"
            message = f"{option} takes {kind}. Got {number.group(2)}."
        elif rest.startswith(option.split("/")[0]):
            message = rest
        else:
            message = f"{option}: {rest}"
    return " ".join(message.split())


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are raised as [`CommandLineError`][CommandLineError] (not
    printed with the usage), whose invalid choices say which known choice is closest, and which
    takes every option spelt out (no abbreviations: ``--embedding`` is not ``--embeddings``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise CommandLineError(self.prog, _argparse_text(message))

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        choices = action.choices
        if choices is None or value in choices:
            return
        names = [str(c) for c in choices]
        hint = did_you_mean(str(value), names)
        if isinstance(action, argparse._SubParsersAction):
            message = f"unknown command {value!r} (choose from {_choices(names)}){hint}"
            raise argparse.ArgumentError(None, message)
        message = f"invalid choice {value!r} (choose from {_choices(names)}){hint}"
        raise argparse.ArgumentError(action, message)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Return the argument parser.

    With no ``command``, every sub-command is registered in full. With one, only the module of
    that sub-command is imported and registered; the others are listed by name and help line.
    """
    parser = _Parser(
        prog=PROG,
        description="Exact, reproducible recall@K and retrieval metrics.",
        epilog=ENVIRONMENT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}", help="print the version"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    wanted = {module for name, module, _ in COMMANDS if command is None or name == command}
    registered: set[str] = set()
    for name, module, help_line in COMMANDS:
        if module in wanted and module not in registered:
            importlib.import_module(f"recallkit.cli.commands.{module}").register(subparsers)
            registered.add(module)
        if module not in wanted:
            subparsers.add_parser(name, help=help_line)
    return parser


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[command]


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return [s for a in parser._actions for s in a.option_strings if s.startswith("--")]


def _unrecognized(extras: Sequence[str], parser: argparse.ArgumentParser) -> str:
    """``unrecognized arguments: ...`` with a suggestion for each option close to a known one."""
    options = [w.split("=", 1)[0] for w in extras if w.startswith("-") and len(w) > 1]
    hints = []
    for option in options:
        hint = did_you_mean(option, _options(parser))
        if hint:
            hints.append(f"{option}: {hint[2:]}" if len(options) > 1 else hint[2:])
    text = f"unrecognized arguments: {' '.join(extras)}"
    return text + (f" ({'; '.join(hints)})" if hints else "")


def _first_word(argv: Sequence[str]) -> str | None:
    """The first word of ``argv`` that is not an option: the sub-command, if one was given."""
    for word in argv:
        if not word.startswith("-"):
            return word
    return None


def _usage_error(prog: str, message: str) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def _top_level(argv: Sequence[str], word: str | None) -> int:
    """``--help``, ``--version``, an unknown option or command: no command module is needed."""
    parser = build_parser("")
    if word is not None:
        message = f"unknown command {word!r} (choose from {_choices(NAMES)})"
        return _usage_error(PROG, message + did_you_mean(word, NAMES))
    known = {"-h", "--help", "--version"}
    unknown = [w for w in argv if w.startswith("-") and w.split("=", 1)[0] not in known]
    if unknown:
        return _usage_error(PROG, _unrecognized(unknown, parser))
    try:
        parser.parse_args(argv)
    except CommandLineError as error:
        return _usage_error(error.prog, error.message)
    except SystemExit as exit_:  # --help, --version
        return int(exit_.code or 0)
    return 0  # pragma: no cover - a sub-command is required, so parsing always stops above


def _parameters(args: argparse.Namespace) -> dict[str, str]:
    """The command's parameter names -> options, each value resolved for these arguments."""
    table: Mapping[str, str | Callable[[argparse.Namespace], str]] = (
        getattr(args, "parameters", None) or {}
    )
    return {name: value(args) if callable(value) else value for name, value in table.items()}


def _unknown_options(argv: Sequence[str], parser: argparse.ArgumentParser) -> list[str]:
    """The words of ``argv`` that look like long options ``parser`` does not know (options are
    spelt out in full; words after ``--`` are values)."""
    known = set(_options(parser))
    unknown = []
    for word in argv:
        if word == "--":
            break
        name = word.split("=", 1)[0]
        if name.startswith("--") and name not in known:
            unknown.append(word)
    return unknown


def _run(argv: list[str], command: str, interrupted: list[int]) -> int:
    parser = build_parser(command)
    try:
        args, extras = parser.parse_known_args(argv)
    except CommandLineError as error:
        # A misspelt option is the likelier cause of, say, a required option found missing.
        unknown = _unknown_options(argv, _subparser(parser, command))
        if unknown:
            return _usage_error(
                f"{PROG} {command}", _unrecognized(unknown, _subparser(parser, command))
            )
        return _usage_error(error.prog, error.message)
    except SystemExit as exit_:  # COMMAND --help
        return int(exit_.code or 0)
    if extras:
        return _usage_error(f"{PROG} {command}", _unrecognized(extras, _subparser(parser, command)))
    from recallkit._inputs.pinned import recording

    try:
        with (
            _reader_may_leave(),
            _warnings_on_one_line(command, _parameters(args)),
            _silenced(getattr(args, "quiet", False)),
            recording(),  # the input files read, for recallkit.cli.commands._args.unchanged_inputs
        ):
            check = getattr(args, "check", None)
            if check is not None:  # arguments and extras: a bad one is said before the imports
                check(args)
            if dict((name, module) for name, module, _ in COMMANDS)[command] in ENGINE_MODULES:
                _native_imports()
            return int(args.func(args) or 0)
    # UsageError, RunnerError, library errors, the system, a feature whose extra is missing
    except (ValueError, OSError, MissingExtraError) as error:
        if interrupted:  # Ctrl-C's doing: said as the interrupt (_CtrlC.handling)
            raise
        line = error_text(error, _parameters(args))
        print(f"{PROG} {command}: error: {line}", file=sys.stderr)
        return 2
    except (MemoryError, RuntimeError) as error:
        # Running out of memory (numpy's MemoryError, torch's OutOfMemoryError) is the input's
        # size meeting the machine, not a fault of the program; any other RuntimeError is.
        if not isinstance(error, MemoryError) and type(error).__name__ != "OutOfMemoryError":
            raise
        reason = error_text(error) if str(error).strip() else "the allocation failed."
        print(f"{PROG} {command}: error: Not enough memory: {reason}", file=sys.stderr)
        return 2


def _native_imports() -> None:
    """The engine's native libraries ([`NATIVE_IMPORTS`][NATIVE_IMPORTS]), with Ctrl-C held until
    they are loaded."""
    from recallkit.runfiles._atomic import interrupts_deferred

    with interrupts_deferred():
        for module, required in NATIVE_IMPORTS:
            try:
                importlib.import_module(module)
            except (ImportError, OSError, RuntimeError):  # absent, or a broken binary
                if required:
                    raise


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 success, 2 user error, 130 interrupted)."""
    return _command_line(argv, after=signal.default_int_handler)


def _command_line(argv: Sequence[str] | None, after: Any) -> int:
    ctrl_c = _CtrlC(after)
    with ctrl_c.command():
        return _main(list(sys.argv[1:] if argv is None else argv), ctrl_c)


def _main(argv: list[str], ctrl_c: _CtrlC) -> int:
    word = _first_word(argv)
    command = word if word in NAMES else None
    try:
        with ctrl_c.handling():
            if not argv:
                build_parser("").print_help()
                return 0
            if command is None:
                return _top_level(argv, word)
            return _run(argv, command, ctrl_c.seen)
    except KeyboardInterrupt:
        with _second_ctrl_c_ignored():  # a second Ctrl-C must not turn this into a traceback
            print(f"{PROG}{' ' + command if command else ''}: interrupted", file=sys.stderr)
        return INTERRUPTED


def entry() -> None:
    """The ``recallkit`` command (and ``python -m recallkit``): [`main`][main], then exit.

    After an interrupt the process leaves at once (``os._exit``), once its one line is printed
    and its output flushed: the interpreter's shutdown would wait for (or tear down) the
    engine's worker and BLAS threads, where a second Ctrl-C or a native pool's destructor could
    still print a traceback or abort. The command's files were written atomically, so there is
    nothing left to clean up. A Ctrl-C after the command is done (while the interpreter shuts
    down) changes nothing: the exit status stays the command's.
    """
    try:
        code = _command_line(None, after=signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # where the command left SIGINT alone
    except KeyboardInterrupt:  # in the instant between the command's end and the line above
        print(f"{PROG}: interrupted", file=sys.stderr)
        code = INTERRUPTED
    if code == INTERRUPTED:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
    sys.exit(code)


class _CtrlC:
    """Ctrl-C during one command: said in one line, whatever it breaks on its way.

    - The first Ctrl-C interrupts the command (KeyboardInterrupt); the ones after it, while the
      command winds down (workers finishing their tile, temporary files removed, the interrupt
      said), are ignored, so that the interrupt is said in one line and nothing is left half
      done. Once the command is over, SIGINT gets the handler ``after``: Python's own for
      [`main`][main], ignored for the ``recallkit`` process, which is about to exit.
    - Any error that leaves the command after the interrupt is the interrupt's doing (an
      ImportError from a native library whose initialisation it broke, say): it leaves as a
      KeyboardInterrupt.
    - An interrupt that lands where Python cannot raise it (a weakref callback or a destructor,
      where Python prints it as "Exception ignored" and goes on) is raised again a moment
      later, from the command's own code. Any other error Python would print that way once the
      command was interrupted (an object the interrupt left half built, freed later) is not
      printed.

    All of this in the main thread, and only over Python's own SIGINT handler: a caller's
    handler stays, and a process that ignores SIGINT keeps ignoring it.
    """

    #: How long after an interrupt lost in a callback it is raised again (seconds).
    AGAIN_AFTER = 0.01

    def __init__(self, after: Any) -> None:
        self.seen: list[int] = []  # the interrupts that reached the command
        self._after = after
        self._installed = False
        self._handling = False

    def _first(self, signum: int, frame: Any) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.seen.append(signum)
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def handling(self) -> Iterator[None]:
        """Ctrl-C as above while the block runs."""
        if (
            threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        ):
            yield
            return
        signal.signal(signal.SIGINT, self._first)
        self._installed = self._handling = True
        try:
            yield
        except Exception:
            if self.seen:
                raise KeyboardInterrupt from None
            raise
        finally:
            self._handling = False
            signal.signal(signal.SIGINT, signal.SIG_IGN if self.seen else self._after)

    @contextlib.contextmanager
    def command(self) -> Iterator[None]:
        """Around the whole command, until its frames are freed: Python's report of errors it
        cannot raise ([`sys.unraisablehook`][sys.unraisablehook]) as above, then SIGINT's handler
        ``after``."""
        previous = sys.unraisablehook

        def hook(info: Any) -> None:
            if not self.seen:
                previous(info)
            elif isinstance(info.exc_value, KeyboardInterrupt) and self._handling:
                self._again()

        sys.unraisablehook = hook
        try:
            yield
        finally:
            sys.unraisablehook = previous
            if self._installed:
                signal.signal(signal.SIGINT, self._after)

    def _again(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        signal.signal(signal.SIGINT, self._first)

        def soon() -> None:
            time.sleep(self.AGAIN_AFTER)
            if self._handling:
                _thread.interrupt_main()

        threading.Thread(target=soon, name="recallkit-ctrl-c", daemon=True).start()


@contextlib.contextmanager
def _second_ctrl_c_ignored() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class _ToleratingStdout:
    """stdout that carries on when its reader goes away (``recallkit ... | head -3``).

    The first write or flush that meets a closed pipe points the real stdout at the null device
    (so that nothing fails later, when Python flushes it on exit); what follows is dropped, and
    the command finishes its work (its ``--json`` and other files are still written).
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.broken = False

    def _guard(self, call: Callable[[], Any], default: Any) -> Any:
        if self.broken:
            return default
        try:
            return call()
        except BrokenPipeError:
            self.broken = True
            with contextlib.suppress(OSError, ValueError, AttributeError):
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, self._stream.fileno())
                os.close(null)
            return default

    def write(self, text: str) -> int:
        return self._guard(lambda: self._stream.write(text), len(text))

    def flush(self) -> None:
        self._guard(self._stream.flush, None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def _reader_may_leave() -> Iterator[None]:
    """Run with a stdout that tolerates a reader that stopped reading (see above)."""
    with contextlib.redirect_stdout(_ToleratingStdout(sys.stdout)):
        yield


@contextlib.contextmanager
def _warnings_on_one_line(command: str, parameters: Mapping[str, str]) -> Iterator[None]:
    """Show each Python warning as one line, ``recallkit COMMAND: warning: ...``, when raised.

    The text is said in the command line's words
    ([`recallkit.cli.errors.warning_text`][recallkit.cli.errors.warning_text]).
    """
    with warnings.catch_warnings():

        def show(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
            text = warning_text(message, parameters)
            print(f"{PROG} {command}: warning: {text}", file=sys.stderr)

        warnings.showwarning = show
        yield


@contextlib.contextmanager
def _silenced(quiet: bool) -> Iterator[None]:
    """With ``quiet``, drop what is printed inside (stdout, stderr and Python warnings).

    An error raised inside leaves the block before ``main`` prints it, so it still shows.
    """
    if not quiet:
        yield
        return
    with (
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        yield


if __name__ == "__main__":
    sys.exit(main())
