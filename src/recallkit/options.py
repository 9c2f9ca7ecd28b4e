"""The options every ranking entry point shares: each declared once, here.

An option is one field of [`Options`][Options]: its name, default, choices or check, help text and
command-line flag are written in that field and nowhere else. From this one declaration come

* the keywords of every public entry point ([`accepts`][accepts] adds them to a function's
  signature and docstring, builds one checked [`Options`][Options] and passes it down unchanged to
  the engine);
* the checks, with errors that name the function called and the option;
* the command line's flags ([`add_flags`][add_flags], [`from_flags`][from_flags]): ``--metric``,
  ``--chunk-size``, ``--memory-budget``, ``--device``, ``--precision``, ``--lone-queries``.

An entry point passes the options to [`recallkit.engine.prepare`][recallkit.engine.prepare], which
keeps them on the prepared space; the engine reads each option in one place. The engine's options
never change a value: they choose how the engine runs. Two options of the label form choose what a
value averages ([`recallkit._averaging`][recallkit._averaging]): ``lone_queries``
(what a query without a relevant item counts as) and ``average`` (queries or classes); both are
recorded in the definitions of a result when they are not the default.

This module imports neither numpy nor torch (torch is imported when a device is checked), so
the command line builds its flags without loading them.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from recallkit.exceptions import did_you_mean, fail

SIMILARITIES = ("cosine", "dot", "euclidean")
PRECISIONS = ("auto", "float32", "bfloat16", "float16", "int8")
#: What a metric does with a lone query (no relevant item): ``"skip"`` leaves it out of the
#: means (counted in ``num_excluded``; every value NaN with a warning when all queries are
#: lone), ``"zero"`` counts it as 0, ``"error"`` raises ``ValueError`` if any query is lone.
LONE_QUERIES = ("skip", "zero", "error")
#: How a metric's value averages its per-query values: ``"query"`` (every counted query weighs
#: the same) or ``"class"`` (each class's value first, then every class weighs the same:
#: PML's ``avg_of_avgs``).
AVERAGES = ("query", "class")
#: Which entry points take an option: ``"engine"`` every ranking entry point (it chooses how
#: the engine runs, never a value), ``"label"`` the label form only (relevance by label): the
#: options that change values, each recorded in a result's definitions when not at its default.
SCOPES = ("engine", "label")
#: The memory budget of a query chunk on the CPU, and the least one on a GPU, when the
#: ``memory_budget`` option is not given.
DEFAULT_MEMORY_BUDGET = 256 * 2**20
#: The units of a number of bytes, case ignored, as GNU coreutils (``dd``, ``sort -S``) read
#: them: ``KB``, ``MB``, ``GB``, ``TB`` powers of 1000 (as SI and disk makers write them);
#: ``KiB``, ``MiB``, ``GiB``, ``TiB`` (IEC) and ``K``, ``M``, ``G``, ``T`` alone powers of 1024.
_UNITS = {
    "": 1,
    "b": 1,
    **{f"{p}b": 1000**n for n, p in enumerate("kmgt", 1)},
    **{f"{p}{b}": 1024**n for n, p in enumerate("kmgt", 1) for b in ("", "ib")},
}
_BYTES = re.compile(r"(\d+)(\.\d+)?\s*([a-z]*)")
BYTES_HELP = (
    "a positive whole number of bytes, or a string with a unit such as '512MiB' or '8GB' "
    "(KB, MB, GB, TB: powers of 1000; KiB, MiB, GiB, TiB, and K, M, G, T alone: powers of "
    "1024)"
)


def parse_bytes(text: str) -> int | None:
    """A number of bytes written as digits with an optional unit, case ignored: ``"1000000"``,
    ``"512MiB"``, ``"8GiB"`` and ``"8g"`` (binary: powers of 1024), ``"512 MB"`` and ``"1TB"``
    (decimal: powers of 1000, as SI and disk makers write them), ``"1.5GiB"`` (a fraction with
    a unit, rounded down to whole bytes), as GNU coreutils read them; ``None`` when ``text`` is
    not one or is below one byte. The one parser of the ``memory_budget`` option, its flag
    ``--memory-budget`` and ``RECALLKIT_GPU_MEMORY``.

    >>> parse_bytes("512MiB"), parse_bytes("1.5 GiB"), parse_bytes("1KB"), parse_bytes("1 TB")
    (536870912, 1610612736, 1000, 1000000000000)
    >>> parse_bytes("0"), parse_bytes("lots"), parse_bytes("1.5"), parse_bytes("2 KIB")
    (None, None, None, 2048)
    """
    match = _BYTES.fullmatch(text.strip().lower())
    if match is None or match.group(3) not in _UNITS:
        return None
    whole, fraction, unit = match.groups()
    scale = _UNITS[unit]
    if fraction and scale == 1:  # a byte count is whole: "1.5" is refused, not floored
        return None
    numerator = int(whole + (fraction or "")[1:])
    value = numerator * scale // 10 ** len((fraction or ".")[1:])
    return value if value >= 1 else None


def _positive_or_none(value: Any, func: str, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise fail(func, name, "a positive integer", repr(value))
    return int(value)


def _byte_count(value: Any, func: str, name: str) -> int | None:
    """``None``, or a positive number of bytes: an integer, a float with a whole value
    (``2.5e9``; a fraction such as ``1.5`` is refused: it is no byte count, and ``1.5`` read as
    one byte hid the mistake) or a string [`parse_bytes`][parse_bytes] reads."""
    if value is None:
        return None
    if isinstance(value, str):
        parsed = parse_bytes(value)
        if parsed is not None:
            return parsed
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if value >= 1:
            return int(value)
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        if math.isfinite(value) and float(value).is_integer() and value >= 1:
            return int(value)
    raise fail(func, name, BYTES_HELP, repr(value))


def _device(value: Any, func: str, name: str) -> Any:
    return None if value is None else check_device(value, func)


def check_device(device: Any, func: str) -> Any:
    """``device`` as a ``torch.device`` that holds data and is available here."""
    import torch

    if isinstance(device, bool) or not isinstance(device, str | torch.device | int):
        raise fail(func, "device", "a device name such as 'cpu' or 'cuda'", repr(device))
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise fail(func, "device", "a device name such as 'cpu' or 'cuda'", repr(device)) from None
    if dev.type == "meta":
        raise fail(func, "device", "a device that holds data ('cpu', 'cuda')", repr(device))
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise fail(func, "device", "an available device (no CUDA GPU is visible)", repr(device))
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            got = f"{device!r} ({torch.cuda.device_count()} CUDA devices)"
            raise fail(func, "device", "an available device", got)
        return dev
    if dev.type != "cpu":
        try:
            torch.empty(1, device=dev)
        except (RuntimeError, AssertionError, TypeError, ValueError):
            raise fail(func, "device", "an available device", repr(device)) from None
    return dev


def _option(
    default: Any,
    help: str,
    *,
    choices: tuple[str, ...] | None = None,
    check: Callable[[Any, str, str], Any] | None = None,
    metavar: str | None = None,
    scope: str = "engine",
    doc_type: str | None = None,
    parse: Callable[[str], Callable[[str], Any]] | None = None,
) -> Any:
    return field(
        default=default,
        metadata={
            "help": help,
            "choices": choices,
            "check": check,
            "metavar": metavar,
            "scope": scope,
            "doc_type": doc_type,
            "parse": parse,
        },
    )


@dataclass(frozen=True)
class Options:
    """How the engine ranks, and what a label-form value averages. Every option is checked
    when the options are built ([`of`][of]); an entry point builds them once and passes them
    down unchanged. Every entry point also takes each option as a keyword.

    Parameters
    ----------
    {fields}

    Examples
    --------
    >>> Options.of("f", metric="dot", precision="float32", memory_budget="1GiB")
    Options(metric='dot', chunk_size=None, memory_budget=1073741824, device=None, \
precision='float32', lone_queries='skip', average='query')
    >>> Options.of("f", precision="fp8")
    Traceback (most recent call last):
    ...
    recallkit.exceptions.ParameterError: The 'precision' parameter of f must be one of \
('auto', 'float32', 'bfloat16', 'float16', 'int8'). Got 'fp8'.
    """

    metric: str = _option(
        "cosine",
        "the similarity: 'cosine' (default), 'dot' (inner product) or 'euclidean' (ordered as "
        "-|q - r|²)",
        choices=SIMILARITIES,
    )
    chunk_size: int | None = _option(
        None,
        "query rows per chunk (default: sized from the memory budget); ranks do not depend on it",
        check=_positive_or_none,
        metavar="ROWS",
        doc_type="int, optional",
        parse=lambda flag: _positive_flag(flag),
    )
    memory_budget: int | None = _option(
        None,
        "the working memory a query chunk may take, in bytes or with a unit ('512MiB', '8GiB': "
        "powers of 1024; '500MB', '8GB': powers of 1000), from which chunks are sized "
        "(default: 256 MiB on the CPU; on a GPU the RECALLKIT_GPU_MEMORY environment variable, "
        "else a quarter of the free memory, at least 256 MiB); ranks do not depend on it",
        check=_byte_count,
        metavar="BYTES",
        doc_type="int or str, optional",
        parse=lambda flag: _bytes_flag(flag),
    )
    device: Any = _option(  # noqa: RUF009 (a dataclass field with metadata)
        None,
        "where the work runs (default: the query's device): 'cpu', 'cuda' or 'cuda:1'",
        check=_device,
        metavar="DEVICE",
        doc_type="str, int or torch.device, optional",
    )
    precision: str = _option(
        "auto",
        "the filter GEMM's type: 'auto' (default: float32 on CUDA; on the CPU the fastest of "
        "the precisions whose kernels pass their start-up check, timed on the first tiles, or "
        "pass by pass over the first calls of a smaller call's shape), "
        "'float32', 'bfloat16', 'float16' (CUDA) or 'int8'; a lower precision is a wider filter "
        "whose window is scored again exactly, so the results are identical in every precision",
        choices=PRECISIONS,
    )
    lone_queries: str = _option(
        "skip",
        "what a query without a relevant item does: 'skip' (default: left out of the means, "
        "counted in num_excluded), 'zero' (counts as 0) or 'error' (raises)",
        choices=LONE_QUERIES,
        scope="label",
    )
    average: str = _option(
        "query",
        "what a metric's value averages: 'query' (default: every query weighs the same) or "
        "'class' (each class's value first, then every class weighs the same: PML's "
        "avg_of_avgs)",
        choices=AVERAGES,
        scope="label",
    )

    @classmethod
    def of(cls, func: str, options: Options | None = None, **keywords: Any) -> Options:
        """Options from keywords over ``options``, each checked.

        Parameters
        ----------
        func : str
            The function whose options these are: errors name it and the option.
        options : Options, optional
            The options to start from (default: the defaults).
        **keywords
            Options by name.

        Returns
        -------
        Options
            ``base`` with the keywords applied, every option checked.

        Raises
        ------
        ValueError
            An unknown keyword, or an option's bad value.
        """
        if options is not None and not isinstance(options, Options):
            raise fail(func, "options", "an Options or None", type(options).__name__)
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(keywords) - names)
        if unknown:
            raise fail(
                func,
                unknown[0],
                f"one of the options {tuple(sorted(names))}",
                "an unknown keyword" + did_you_mean(unknown[0], names),
            )
        base = options if options is not None else cls()
        return replace(base, **keywords).checked(func)

    @classmethod
    def from_definitions(cls, record: Any, func: str = "Options.from_definitions") -> Options:
        """The options a run's values were computed under, read back from its definitions
        record (``recallkit.runfiles.definitions``): the
        similarity as ``metric``, and every option that changes a value (scope ``"label"``) from
        its field, at its default when the record leaves it out (a record names
        ``average`` only when it is not ``"query"``). The options that choose how the engine
        runs never change a value and stay at their defaults. The one place a run's options
        are read back: intervals, comparisons, per-class values and the run-file reader
        summarise a run's per-query values under these options, as evaluating it did.

        Parameters
        ----------
        record : dict or None
            A definitions record (``None``, a run without one: the defaults).
        func : str, default 'Options.from_definitions'
            Named in the errors, with the field.

        Returns
        -------
        Options
            The options the run was computed under: the defaults, with the record's fields.

        Raises
        ------
        ValueError
            A field that is not one of its option's choices.

        Examples
        --------
        >>> Options.from_definitions({"similarity": "dot", "lone_queries": "zero"})
        Options(metric='dot', chunk_size=None, memory_budget=None, device=None, \
precision='auto', lone_queries='zero', average='query')
        """
        if record is None:
            return cls()
        if not isinstance(record, dict):
            raise fail(func, "definitions", "a definitions record (an object)", repr(record))
        given: dict[str, Any] = {}
        if "similarity" in record:
            given["metric"] = record["similarity"]
        for option in OPTIONS:
            if option.scope == "label" and option.name in record:
                given[option.name] = record[option.name]
        return cls.of(func, **given)

    def checked(self, func: str) -> Options:
        """These options, each checked.

        Parameters
        ----------
        func : str
            Named in the errors, with the option.

        Returns
        -------
        Options
            These options, each value checked and normalised (``device`` as a
            ``torch.device``).
        """
        changes = {}
        for option in OPTIONS:
            value = getattr(self, option.name)
            changes[option.name] = option.checked(value, func)
        return replace(self, **changes)


@dataclass(frozen=True)
class Option:
    """One option as [`Options`][Options] declares it."""

    name: str
    default: Any
    help: str
    choices: tuple[str, ...] | None
    check: Callable[[Any, str, str], Any] | None
    metavar: str | None
    scope: str
    doc_type: str | None = None
    #: The command-line parser of the option's flag, built for the flag's name (``None``: the
    #: flag's text as it is, or one of ``choices``).
    parse: Callable[[str], Callable[[str], Any]] | None = None

    @property
    def flag(self) -> str:
        """The command-line flag: ``--lone-queries`` for ``lone_queries``."""
        return "--" + self.name.replace("_", "-")

    def checked(self, value: Any, func: str) -> Any:
        if self.choices is not None:
            if not isinstance(value, str) or value not in self.choices:
                got = repr(value) + did_you_mean(value, self.choices)
                raise fail(func, self.name, f"one of {self.choices}", got)
            return value
        return self.check(value, func, self.name) if self.check is not None else value


OPTIONS: tuple[Option, ...] = tuple(
    Option(f.name, f.default, **f.metadata) for f in fields(Options)
)
BY_NAME = {option.name: option for option in OPTIONS}


def changed_values(options: Options) -> dict[str, Any]:
    """The value-changing options (scope ``"label"``) that are not at their default, but
    ``lone_queries``, which every definitions record holds: what a definitions record adds.

    >>> changed_values(Options(average="class")), changed_values(Options())
    ({'average': 'class'}, {})
    """
    return {
        o.name: getattr(options, o.name)
        for o in OPTIONS
        if o.scope == "label" and o.name != "lone_queries" and getattr(options, o.name) != o.default
    }


def names(scope: str = "label") -> tuple[str, ...]:
    """The options an entry point of ``scope`` takes: every option for the label form, those
    of scope ``"engine"`` for the others."""
    return tuple(o.name for o in OPTIONS if scope == "label" or o.scope == "engine")


def docs(
    scope: str = "label",
    only: Sequence[str] | None = None,
    start: bool = True,
    defaults: dict[str, Any] | None = None,
) -> str:
    """The options' entries of a docstring's ``Parameters`` section (numpydoc), then
    ``options``: the same text for every entry point, but ``defaults``, an entry point's own
    defaults of some options (its signature's), which its entries name instead.

    >>> print(docs(only=["chunk_size"]))
    chunk_size : int, optional
        Query rows per chunk (default: sized from the memory budget); ranks do not depend on
        it.
    options : Options, optional
        The options to start from ([`recallkit.Options`][recallkit.options.Options]); the
        keywords above override its fields.
    """
    import textwrap

    chosen = only if only is not None else names(scope)
    lines = []
    for name in chosen:
        option = BY_NAME[name]
        default = (defaults or {}).get(name, option.default)
        if option.choices is not None:
            kind = "{" + ", ".join(repr(c) for c in option.choices) + "}"
            kind += f", default {default!r}"
        else:
            kind = option.doc_type or "optional"
        lines.append(f"{name} : {kind}")
        text = _help(option, default)
        text = text[:1].upper() + text[1:] + "."
        lines += textwrap.wrap(text, 88, initial_indent="    ", subsequent_indent="    ")
    if not start:
        return "\n".join(lines)
    lines.append("options : Options, optional")
    lines += textwrap.wrap(
        "The options to start from ([`recallkit.Options`][recallkit.options.Options]); the "
        "keywords above override its fields.",
        88,
        initial_indent="    ",
        subsequent_indent="    ",
    )
    return "\n".join(lines)


def _help(option: Option, default: Any) -> str:
    """``option``'s help with its ``'value' (default)`` mark on ``default`` (an entry point's
    own default)."""
    text = option.help
    if default != option.default and f"{option.default!r} (default)" in text:
        text = text.replace(f"{option.default!r} (default)", repr(option.default))
        text = text.replace(repr(default), f"{default!r} (default)", 1)
    return text


def accepts(
    func: str | None = None,
    *,
    scope: str = "label",
    defaults: dict[str, Any] | None = None,
    only: Sequence[str] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give an entry point the options' keywords, declared once.

    The decorated function takes a keyword-only ``options: Options``; its public signature takes
    each option of ``scope`` (or ``only`` those) as a keyword with its default (``defaults``
    overrides some) and ``options=`` (an [`Options`][Options] to start from). The wrapper builds one
    checked [`Options`][Options] (errors name ``func``, default the function's name) and passes it
    down. Its docstring's ``{options}`` marker becomes the options' help.
    """

    def wrap(target: Callable[..., Any]) -> Callable[..., Any]:
        taken = tuple(only) if only is not None else names(scope)
        fixed = dict(defaults or {})
        name = func or target.__name__
        signature = inspect.signature(target)
        if "options" not in signature.parameters:
            raise TypeError(f"{target.__qualname__} must take a keyword-only 'options'")

        accepted = set(signature.parameters) - {"options"}
        open_ended = any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values()
        )

        @functools.wraps(target)
        def call(*args: Any, options: Options | None = None, **keywords: Any) -> Any:
            given = {k: keywords.pop(k) for k in taken if k in keywords}
            unknown = sorted(k for k in keywords if k not in accepted)
            if unknown and not open_ended:
                known = sorted(accepted - {"self"} | set(taken))
                raise fail(
                    name,
                    unknown[0],
                    f"one of the keywords {tuple(known)}",
                    "an unknown keyword" + did_you_mean(unknown[0], known),
                )
            start = options
            if start is None and fixed:  # the entry's own defaults (an explicit Options wins)
                start = replace(Options(), **fixed)
            return target(*args, options=Options.of(name, start, **given), **keywords)

        params = [p for p in signature.parameters.values() if p.name != "options"]
        tail = [p for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
        params = [p for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD]
        for option in taken:
            default = fixed.get(option, BY_NAME[option].default)
            params.append(
                inspect.Parameter(option, inspect.Parameter.KEYWORD_ONLY, default=default)
            )
        params.append(inspect.Parameter("options", inspect.Parameter.KEYWORD_ONLY, default=None))
        call.__signature__ = signature.replace(parameters=params + tail)  # type: ignore[attr-defined]
        call.__doc__ = fill_docs(call.__doc__, scope, taken, fixed)
        # The public function is the wrapper, with its own signature and docstring: documentation
        # tools that unwrap would show the inner ``options`` parameter and the bare marker.
        del call.__wrapped__
        return call

    return wrap


def fill_docs(
    doc: str | None,
    scope: str = "label",
    only: Sequence[str] | None = None,
    defaults: dict[str, Any] | None = None,
) -> str | None:
    """``doc`` with its ``{options}`` marker replaced by the options' help ([`docs`][docs]; an
    entry point's own ``defaults`` named), indented as the marker is."""
    if not doc or "{options}" not in doc:
        return doc
    head = doc[: doc.index("{options}")]
    indent = head[head.rfind("\n") + 1 :]
    text = docs(scope, only, defaults=defaults)
    return doc.replace("{options}", text.replace("\n", "\n" + indent))


def check_flag(value: Any, func: str, name: str) -> bool:
    """``value`` if it is a bool (``numpy.bool_`` too), else ``ValueError`` naming it."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    raise fail(func, name, "True or False", repr(value))


# ----------------------------------------------------------------------------------------------
# The command line's flags, from the same declarations.


def _bytes_flag(flag: str) -> Callable[[str], int]:
    import argparse

    def parse(text: str) -> int:
        value = parse_bytes(text)
        if value is None:
            raise argparse.ArgumentTypeError(
                f"{flag} takes a whole number of bytes, or one with a unit (512MiB, 8GiB: powers "
                f"of 1024; 500MB, 8GB: powers of 1000). Got {text!r}."
            )
        return value

    return parse


def _positive_flag(flag: str) -> Callable[[str], int]:
    import argparse

    def parse(text: str) -> int:
        word = text.strip()
        if not (word.isdigit() and word.isascii()) or int(word) <= 0:
            raise argparse.ArgumentTypeError(f"{flag} takes a positive integer. Got {text!r}.")
        return int(word)

    return parse


def add_flags(
    group: Any,
    scope: str = "label",
    only: Sequence[str] | None = None,
    helps: dict[str, str] | None = None,
) -> None:
    """Add a flag for each option of ``scope`` to an argparse parser or group (``None`` when
    not given: the library's default applies). ``helps`` replaces the help of some flags (a
    command whose default differs says so)."""
    helps = helps or {}
    for name in only if only is not None else names(scope):
        option = BY_NAME[name]
        extra: dict[str, Any] = {}
        if option.choices is not None:
            extra["choices"] = option.choices
            extra["metavar"] = "{" + ",".join(option.choices) + "}"
        else:
            extra["metavar"] = option.metavar
            if option.parse is not None:  # the flag's type, as the option declares it
                extra["type"] = option.parse(option.flag)
        text = helps.get(name)
        if text is None:
            text = _flag_help(option.help)
        group.add_argument(option.flag, dest=option.name, default=None, help=text, **extra)


def _flag_help(text: str) -> str:
    """Help text with Python quoting dropped (``'cosine'`` -> ``cosine``)."""
    return text.replace("'", "")


def from_flags(args: Any, scope: str = "label", only: Sequence[str] | None = None) -> dict:
    """The options given on the command line (those left out are not in the dict)."""
    out = {}
    for name in only if only is not None else names(scope):
        value = getattr(args, name, None)
        if value is not None:
            out[name] = value
    return out


def flag_names(scope: str = "label") -> dict[str, str]:
    """Option name -> its flag, for naming parameters in command-line messages."""
    return {name: BY_NAME[name].flag for name in names(scope)}


_fields_at = Options.__doc__.index("{fields}")
_indent = Options.__doc__[Options.__doc__.rfind("\n", 0, _fields_at) + 1 : _fields_at]
Options.__doc__ = Options.__doc__.replace(
    "{fields}", docs(start=False).replace("\n", "\n" + _indent)
)
