"""The library's errors and warnings, with their parts kept apart from their text.

Every bad argument raises [`ParameterError`][ParameterError] (a [`RecallkitError`][RecallkitError],
a ``ValueError``), worded the way
scikit-learn's parameter validation words it: "The 'ks' parameter of recall_at_k must be
positive integers. Got 0." Every warning the library gives is a
[`RecallkitWarning`][RecallkitWarning] (a ``UserWarning``). Both keep their parts: the function, the
parameter, what it must be, what it got, and the other parameters a message mentions (a fix such as
``query_in_reference=True``). A caller that speaks other words renders the same parts with its own
names: the command line says ``--ks`` and ``--lone-queries error`` where the library says ``ks`` and
``lone_queries='error'`` ([`Text.render`][Text.render]).

This module imports nothing but the standard library, so that the command line's help loads
without numpy or torch.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "LoneQueriesWarning",
    "ParameterError",
    "RecallkitError",
    "RecallkitWarning",
    "RunnerError",
    "Text",
    "did_you_mean",
    "fail",
    "python_name",
    "warn",
]

#: How a mention is named: ``(parameter, value)`` -> text; ``value`` is [`NO_VALUE`][NO_VALUE] when
#: the text names the parameter alone.
Namer = Callable[[str, Any], str]
NO_VALUE = object()


def python_name(parameter: str, value: Any = NO_VALUE) -> str:
    """How a Python caller reads a mention: ``'ks'`` (a parameter, quoted), or
    ``lone_queries='error'`` (a setting).

    >>> print(python_name("ks"), python_name("query_in_reference", True))
    'ks' query_in_reference=True
    """
    return f"'{parameter}'" if value is NO_VALUE else f"{parameter}={value!r}"


class Text:
    """Message text whose ``{key}`` fields mention parameters, kept as parts.

    ``mentions`` maps each field to ``parameter`` (the parameter named alone), to
    ``(parameter, value)`` (a setting: "pass query_in_reference=True"), or to a nested
    ``Text``, a clause that is left out when one of its own mentions has no name for the
    reader (a ``Namer`` that returns ``None``: a command line without that option).
    [`render`][render] fills the fields with a namer; ``str()`` uses the Python names.

    >>> t = Text("pass {fix} to remove it{or_}", fix=("query_in_reference", True),
    ...          or_=Text(", or {off}", off=("check", False)))
    >>> str(t)
    'pass query_in_reference=True to remove it, or check=False'
    >>> t.render(lambda p, v: "--self" if p == "query_in_reference" else None)
    'pass --self to remove it'
    """

    def __init__(self, template: str, **mentions: str | tuple[str, Any] | Text) -> None:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name}
        missing = fields - set(mentions)
        if missing:
            raise KeyError(f"no mention given for the field(s) {sorted(missing)} of {template!r}")
        self.template = template
        self.mentions = dict(mentions)

    def parameters(self) -> list[tuple[str, Any]]:
        """``(parameter, value)`` of each mention, nested clauses included (``value``
        [`NO_VALUE`][NO_VALUE] when the parameter is named alone)."""
        out: list[tuple[str, Any]] = []
        for mention in self.mentions.values():
            if isinstance(mention, Text):
                out += mention.parameters()
            else:
                out.append(mention if isinstance(mention, tuple) else (mention, NO_VALUE))
        return out

    def render(self, namer: Namer = python_name) -> str:
        return self._render(namer, top=True) or ""

    def _render(self, namer: Namer, top: bool) -> str | None:
        names = {}
        for key, mention in self.mentions.items():
            if isinstance(mention, Text):
                names[key] = mention._render(namer, top=False) or ""
                continue
            parameter, value = mention if isinstance(mention, tuple) else (mention, NO_VALUE)
            name = namer(parameter, value)
            if name is None:
                if not top:
                    return None
                name = python_name(parameter, value)
            names[key] = name
        return self.template.format(**names)

    def __str__(self) -> str:
        return self.render()

    def __repr__(self) -> str:
        return f"Text({self.template!r}, **{self.mentions!r})"


def _text(value: str | Text) -> Text:
    return value if isinstance(value, Text) else Text(value.replace("{", "{{").replace("}", "}}"))


class RecallkitError(ValueError):
    """A bad input the library refuses, with its ``Text`` kept in parts (the command line
    renders the parameters it mentions as its own options). A ``ValueError``.

    Parameters
    ----------
    text : str or Text
        The message; a ``Text`` keeps the parameters it mentions apart.
    """

    def __init__(self, text: str | Text) -> None:
        self.text = _text(text)
        super().__init__(str(self.text))

    def render(self, namer: Namer = python_name) -> str:
        """The message, every parameter it mentions named by ``namer``.

        Parameters
        ----------
        namer : callable, default python_name
            ``(parameter, value) -> str``: how a mention reads (the command line gives its
            option names).

        Returns
        -------
        str
        """
        return self.text.render(namer)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.text,))


class ParameterError(RecallkitError):
    """A bad argument: parameter ``name`` of ``func`` must be ``requirement``; it got ``got``.

    The message is ``"The '{name}' parameter of {func} must be {requirement}. Got {got}."``. The
    parts stay available as attributes (``requirement`` as a ``Text`` when it mentions
    other parameters), so that a caller (the command line) can say the same in its own words.

    Parameters
    ----------
    func : str
        The function called.
    name : str
        The parameter at fault.
    requirement : str or Text
        What it must be.
    got : object
        What it got, as shown.

    Examples
    --------
    >>> error = ParameterError("recall_at_k", "ks", "positive integers", "0")
    >>> str(error), error.name, error.got
    ("The 'ks' parameter of recall_at_k must be positive integers. Got 0.", 'ks', '0')
    """

    def __init__(self, func: str, name: str, requirement: str | Text, got: Any) -> None:
        self.func = func
        self.name = name
        self.requirement = _text(requirement)
        self.got = got
        self.text = self.requirement
        ValueError.__init__(self, self.render())

    def render(self, namer: Namer = python_name, subject: str | None = None) -> str:
        """The message, every parameter named by ``namer``.

        Parameters
        ----------
        namer : callable, default python_name
            ``(parameter, value) -> str``: how a mention reads.
        subject : str, optional
            Replaces the opening "The 'name' parameter of func".

        Returns
        -------
        str
        """
        head = subject if subject is not None else f"The '{self.name}' parameter of {self.func}"
        return f"{head} must be {self.requirement.render(namer)}. Got {self.got}."

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.func, self.name, self.requirement, self.got))


class RunnerError(RecallkitError):
    """Bad input to a runner function (a missing folder, an unreadable file, a bad encoder); the
    message names the file or argument at fault.

    The command line prints it as one line with exit status 2, as every ``ValueError``.
    """


def fail(func: str, name: str, requirement: str | Text, got: Any) -> ParameterError:
    """Build the library's standard error for parameter ``name`` of ``func``."""
    return ParameterError(func, name, requirement, got)


class RecallkitWarning(UserWarning):
    """A warning of ``func``, in parts: its ``Text`` (which may mention parameters) and
    the parameter it concerns (``None`` for the data as a whole).

    ``str()`` is ``"func: text"``; [`render`][render] gives the text alone, parameters named by a
    ``Namer``.

    Parameters
    ----------
    func : str
        The function that warns.
    text : str or Text
        What it says.
    parameter : str, optional
        The parameter it concerns (``None``: the data as a whole).

    Examples
    --------
    >>> w = RecallkitWarning("recall_at_k", Text("{ks} asks too much", ks="ks"), "ks")
    >>> str(w), w.render(lambda p, v: "--ks")
    ("recall_at_k: 'ks' asks too much", '--ks asks too much')
    """

    def __init__(self, func: str, text: str | Text, parameter: str | None = None) -> None:
        self.func = func
        self.text = _text(text)
        self.parameter = parameter
        super().__init__(f"{func}: {self.text}")

    def render(self, namer: Namer = python_name) -> str:
        """The text alone, every parameter it mentions named by ``namer``.

        Parameters
        ----------
        namer : callable, default python_name
            ``(parameter, value) -> str``: how a mention reads.

        Returns
        -------
        str
        """
        return self.text.render(namer)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.func, self.text, self.parameter))


class LoneQueriesWarning(RecallkitWarning, RuntimeWarning):
    """Every query is lone (no relevant reference item): every value is undefined (NaN)."""


def warn(warning: RecallkitWarning) -> None:
    """Issue ``warning`` at the caller's first frame outside recallkit (so that the warning
    points at the user's line, however deep in the library it arose)."""
    import os
    import sys
    import warnings

    package = os.path.dirname(os.path.abspath(__file__))
    level, frame = 2, sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    warnings.warn(warning, stacklevel=level)


def did_you_mean(given: object, valid: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"``: the valid spelling nearest to ``given``, or ``""`` when none
    is near (difflib's ratio of at least 0.6, case ignored). The one place every error that lists
    valid names, choices or keywords finds its suggestion.

    Parameters
    ----------
    given : object
        What the caller wrote; anything but a string gets no suggestion.
    valid : iterable of str
        The valid spellings.

    Returns
    -------
    str
        The suggestion, with a leading space, to append to a message; ``""`` when none.

    >>> did_you_mean("recal@1", ["recall@1", "map@r"])
    " (did you mean 'recall@1'?)"
    >>> did_you_mean("xyz", ["recall@1"])
    ''
    """
    import difflib

    if not isinstance(given, str):
        return ""
    names = list(dict.fromkeys(valid))
    lower = {name.lower(): name for name in names}
    found = difflib.get_close_matches(given.lower(), list(lower), n=1, cutoff=0.6)
    return f" (did you mean {lower[found[0]]!r}?)" if found else ""
