"""User errors of the command line, and the one line each is printed as.

A command's bad input is a ``ValueError``: the commands' own :class:`UsageError`, the runner's
``RunnerError`` or a library error. The library speaks of Python parameters: "The 'images'
parameter of cirr_recall must be ...", "pass check_counts=False". :func:`error_text` says the
same in the words of the command line:

- a parameter becomes the option that supplied it: each command maps the library's parameter
  names to its options (``parameters``, e.g. ``{"images": "--images"}``); a parameter that no
  option supplies is named in plain words ("the query labels");
- a keyword hint (``allow_partial=True``) becomes the option that does the same
  (``--allow-partial``, :data:`KEYWORD_HINTS`), and a hint the command line has no option for
  is left out (:data:`PHRASES`); so is the keyword advice of other libraries' messages that
  reach the user, such as torch's when it refuses a file (:data:`REWRITES`);
- the text is one line, without terminal escapes, ending with one full stop.

This module imports nothing heavy: ``recallkit --help`` loads it without torch.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from typing import Any


class UsageError(ValueError):
    """A user error (bad file, bad argument) reported by the command line as one line, exit 2."""


#: Keyword hints of library messages -> what the command line says instead.
KEYWORD_HINTS: Mapping[str, str] = {
    "allow_partial=True": "--allow-partial",
    "check_counts=False": "--no-count-check",
    "skip_bad=True": "--skip-bad",
    "skip_missing=True": "--skip-bad",
    "metric='cosine'": "--metric cosine",
    "device='cpu'": "--device cpu",
    "precision='float32'": "--precision float32",
    "precision='bfloat16'": "--precision bfloat16",
    "precision='float16'": "--precision float16",
    "precision='int8'": "--precision int8",
    "query_in_reference=True": "each query is also a gallery item",
}

#: Phrases of library messages said otherwise on the command line: a hint the command line has
#: no option for is left out; the function name opening a warning is dropped.
PHRASES: Mapping[str, str] = {
    ", or check_images=False to skip the check": "",
    "recall_at_k: ks ": "K values ",
    "recall_at_k: all ": "All ",
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
_SUBJECT = re.compile(r"\b([Tt])he '(\w+)' parameter of [\w.]+")
# A parameter named in quotes inside a message: "is 'root' the folder", "among the 'image_ids'".
_QUOTED = re.compile(r"(?:\b(the|is|of) )?'(\w+)'")
_FLAG_WITH_KEYWORD = re.compile(r"(--[\w-]+) \(\w+=[^()]*\)")


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


def translate(
    text: str, parameters: Mapping[str, str] | None = None, *, full_stop: bool = True
) -> str:
    """Library message text in the words of the command line, on one line.

    With ``full_stop`` (errors), the text ends with exactly one full stop; without it
    (warnings), the end is left as it is.

    >>> translate("The 'texts' parameter of image_text_recall must be non-empty. Got 0 rows.",
    ...           {"texts": "--texts"})
    '--texts must be non-empty. Got 0 rows.'
    >>> translate("x.json: 3 images; expected 5 (pass check_counts=False to evaluate partial data)")
    'x.json: 3 images; expected 5 (pass --no-count-check to evaluate partial data).'
    >>> translate("1 image could not be read: a.png. Pass --skip-bad (skip_bad=True) to go on.")
    '1 image could not be read: a.png. Pass --skip-bad to go on.'
    """
    parameters = parameters or {}

    def named(match: re.Match[str]) -> str:
        return subject(match.group(2), parameters, capital=match.group(1) == "T")

    def quoted(match: re.Match[str]) -> str:
        # After "the", "is" or "of", or with an underscore: a parameter, not a quoted file name.
        word, name = match.groups()
        if name not in parameters or (word is None and "_" not in name):
            return match.group(0)
        return f"{word} {parameters[name]}" if word else parameters[name]

    text = _ESCAPES.sub("", text)
    for pattern, words in REWRITES:
        text = pattern.sub(words, text)
    text = _SUBJECT.sub(named, text)
    text = _QUOTED.sub(quoted, text)
    for phrase, words in PHRASES.items():
        text = text.replace(phrase, words)
    text = _FLAG_WITH_KEYWORD.sub(r"\1", text)
    for hint, words in KEYWORD_HINTS.items():
        text = text.replace(hint, words)
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


def _parameter_error(error: BaseException) -> Any:
    """``error`` if it is the library's ``ParameterError`` (its module is loaded if one exists)."""
    checks = sys.modules.get("recallkit._checks")
    if checks is not None and isinstance(error, checks.ParameterError):
        return error
    return None


def error_text(error: BaseException, parameters: Mapping[str, str] | None = None) -> str:
    """The one line the command line prints for ``error`` (a ``ValueError`` or ``OSError``).

    A library ``ParameterError`` is said anew from its parts, naming the option (or, without
    one, the words) for its parameter; any other message goes through :func:`translate`.

    >>> error_text(UsageError("--ks takes positive integers. Got '0'."))
    "--ks takes positive integers. Got '0'."
    """
    parameters = parameters or {}
    bad = _parameter_error(error)
    if bad is not None:
        who = subject(bad.name, parameters, capital=True)
        text = f"{who} must be {bad.requirement}. Got {bad.got}."
    elif isinstance(error, OSError):
        text = os_error_text(error)
    else:
        text = str(error) or type(error).__name__
    return translate(text, parameters)
