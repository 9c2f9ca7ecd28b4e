"""User errors of the command line, and the one line each is printed as.

A command's bad input is a ``ValueError``: the commands' own [`UsageError`][UsageError], the
runner's ``RunnerError`` or a library error. The library's errors and warnings keep their parts
([`recallkit.exceptions`][recallkit.exceptions]): the parameter at fault, and the other parameters a
message mentions ("pass query_in_reference=True"). [`error_text`][error_text] and
[`warning_text`][warning_text] say them in the words of the command line, from those parts, never by
reading the message's text:

- the parameter at fault becomes the option that supplied it: each command maps the library's
  parameter names to its options (``parameters``, e.g. ``{"images": "--images"}``); a parameter
  that no option supplies is named in plain words ("the query labels");
- a setting a message suggests (``allow_partial=True``, ``lone_queries='error'``) becomes the
  option that does the same (``--allow-partial``, ``--lone-queries error``; [`SETTINGS`][SETTINGS]
  and the command's options), and a clause that suggests a setting the command line has no
  option for is left out;
- the text is one line, without terminal escapes, ending with one full stop. Messages of other
  libraries that advise their own Python keywords (torch refusing a file) are said in words
  ([`REWRITES`][REWRITES]).

This module imports nothing heavy: ``recallkit --help`` loads it without torch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from recallkit.exceptions import (
    NO_VALUE,
    Namer,
    ParameterError,
    RecallkitError,
    RecallkitWarning,
)


class UsageError(ValueError):
    """A user error (bad file, bad argument) reported by the command line as one line, exit 2."""


#: Settings of library parameters -> what the command line says instead; ``None``: the
#: command line has no option for it (a clause that suggests it is left out).
SETTINGS: Mapping[tuple[str, Any], str | None] = {
    ("allow_partial", True): "--allow-partial",
    ("check_counts", False): "--no-count-check",
    ("skip_bad", True): "--skip-bad",
    ("skip_missing", True): "--skip-bad",
    ("check_images", False): None,
    ("query_in_reference", True): "the query set as its own gallery (--images, or --labels)",
    ("query_in_reference", False): None,
}

#: Messages of other libraries that advise Python keywords, said for the command line.
REWRITES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        # torch.load(weights_only=True) refusing a file: its advice names torch.load's keywords.
        re.compile(
            r"Weights only load failed\..*?WeightsUnpickler error:\s*(.*?)\.?\s*"
            r"(?:Please use `torch\.serialization.*?)?\s*Check the documentation of torch\.load"
            r".*?torch\.load\.html\.?",
            re.S,
        ),
        (
            r"only tensors, dicts and lists are read from a torch file, and this one holds "
            r"something else (\1)"
        ),
    ),
)

_ESCAPES = re.compile(r"\x1b\[[0-9;]*m")


def plain_words(name: str) -> str:
    """A parameter name as words: ``"query_labels"`` -> ``"the query labels"``.

    >>> plain_words("caption_image")
    'the caption image'
    """
    return "the " + name.replace("_", " ")


def subject(name: str, parameters: Mapping[str, str], *, capital: bool = False) -> str:
    """How the command line names library parameter ``name``: its option, else plain words.

    >>> subject("images", {"images": "--images"}), subject("query_labels", {}, capital=True)
    ('--images', 'The query labels')
    """
    words = parameters[name] if name in parameters else plain_words(name)
    return words[0].upper() + words[1:] if capital else words


def namer(parameters: Mapping[str, str] | None = None) -> Namer:
    """How the command line names the parameters a library message mentions: a parameter by
    its option (else in plain words), a setting by [`SETTINGS`][SETTINGS] or as the option with its
    value (``--lone-queries error``; ``--flag`` for a flag set to True); ``None`` for a setting
    the command line cannot make.

    >>> name = namer({"lone_queries": "--lone-queries", "ks": "--ks"})
    >>> name("ks", NO_VALUE), name("lone_queries", "error"), name("allow_partial", True)
    ('--ks', '--lone-queries error', '--allow-partial')
    >>> name("check_images", False) is None, name("query_labels", NO_VALUE)
    (True, 'the query labels')
    """
    parameters = parameters or {}

    def name(parameter: str, value: Any) -> str | None:
        if value is NO_VALUE:
            return subject(parameter, parameters)
        if (parameter, value) in SETTINGS:
            return SETTINGS[(parameter, value)]
        flag = parameters.get(parameter)
        if flag is None or not flag.startswith("--"):
            return None
        if isinstance(value, bool):
            return flag if value else None
        return f"{flag} {value}"

    return name


def one_line(text: str, *, full_stop: bool = True) -> str:
    """``text`` on one line, without terminal escapes, other libraries' keyword advice said in
    words ([`REWRITES`][REWRITES]); with ``full_stop`` (errors) ending with exactly one full stop.

    >>> one_line("shapes do not match\\n  at row 3")
    'shapes do not match at row 3.'
    """
    text = _ESCAPES.sub("", text)
    for pattern, words in REWRITES:
        text = pattern.sub(words, text)
    text = re.sub(r"\s*\n\s*", " ", text.strip())
    return _one_sentence_end(text) if full_stop else text


def _one_sentence_end(text: str) -> str:
    """End ``text`` with exactly one full stop (or its own ``?``/``!``/``...``)."""
    if text.endswith("..."):
        return text
    text = re.sub(r"([.?!])\.+$", r"\1", text)
    return text if text.endswith((".", "?", "!")) else text + "."


def os_error_text(error: OSError) -> str:
    """One line for an ``OSError``: the system's reason and the file it concerns.

    >>> import errno
    >>> os_error_text(OSError(errno.ENOSPC, "No space left on device", "out.json"))
    "No space left on device: 'out.json'."
    """
    reason = error.strerror or str(error) or type(error).__name__
    if error.filename is not None:
        return f"{reason}: {str(error.filename)!r}."
    return f"{reason}."


def error_text(error: BaseException, parameters: Mapping[str, str] | None = None) -> str:
    """The one line the command line prints for ``error`` (a ``ValueError`` or ``OSError``).

    A library error is said anew from its parts ([`recallkit.exceptions`][recallkit.exceptions]):
    the parameter at fault by its option (or, without one, in words), the settings it mentions as
    options.

    >>> error_text(UsageError("--ks takes positive integers. Got '0'."))
    "--ks takes positive integers. Got '0'."
    >>> error_text(ParameterError("f", "texts", "non-empty", "0 rows"), {"texts": "--texts"})
    '--texts must be non-empty. Got 0 rows.'
    """
    parameters = parameters or {}
    if isinstance(error, ParameterError):
        who = subject(error.name, parameters, capital=True)
        text = error.render(namer(parameters), subject=who)
    elif isinstance(error, RecallkitError):
        text = error.render(namer(parameters))
    elif isinstance(error, OSError):
        text = os_error_text(error)
    else:
        text = str(error) or type(error).__name__
    return one_line(text)


def warning_text(message: Any, parameters: Mapping[str, str] | None = None) -> str:
    """The text of a warning on the command line: a library warning from its parts (the
    function name that opens it in Python dropped), any other warning as it is, on one line.

    >>> warning_text(RecallkitWarning("recall_at_k", "recall@10 asks for more", "ks"))
    'recall@10 asks for more'
    """
    if isinstance(message, RecallkitWarning):
        return one_line(message.render(namer(parameters)), full_stop=False)
    return one_line(str(message), full_stop=False)
