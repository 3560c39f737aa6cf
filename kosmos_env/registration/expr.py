"""The tiny grammar of registered metric expressions, parsed without ``eval``.

A metric expression is a function name with optional arguments, nothing else::

    expr    := NAME [ "(" [ args ] ")" ]
    args    := arg { "," arg } [ "," ]
    arg     := NAME "=" literal | literal          (positional arguments first)
    literal := STRING | NUMBER | true | false | null | True | False | None | "[" [ literal {"," literal} ] "]"

e.g. ``spearman``, ``mmrv(weight="reference", ties="greater")``,
``success_rate(policy="scripted:skill=1.0")``, ``rank_order(["a", "b", "c"])``. Strings are
double- or single-quoted with backslash escapes for the quote, the backslash, ``\\n`` and
``\\t``. Nothing is ever executed: the text becomes a :class:`Call` of plain Python values, and
which names and arguments are allowed is decided by :mod:`kosmos_env.registration.metrics`.

:func:`format_call` writes the canonical text of a call (keyword arguments sorted, strings
JSON-quoted) so the same definition always hashes the same.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

MAX_EXPR_CHARS = 2000

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?")
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t"}
_WORDS = {"true": True, "True": True, "false": False, "False": False, "null": None, "None": None}


class ExprError(ValueError):
    """A metric expression does not follow the grammar (the message says where)."""


@dataclass(frozen=True)
class Call:
    """A parsed expression: ``name(*args, **kwargs)`` with literal values only."""

    name: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class _Tok:
    kind: str  # name, string, number, punct, end
    value: Any
    pos: int


def _tokens(text: str) -> list[_Tok]:
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "()[],=":
            out.append(_Tok("punct", c, i))
            i += 1
        elif c in "'\"":
            j, buf = i + 1, []
            while True:
                if j >= n:
                    raise ExprError(f"unterminated string starting at character {i} of {text!r}")
                ch = text[j]
                if ch == c:
                    break
                if ch == "\\":
                    if j + 1 >= n or text[j + 1] not in _ESCAPES:
                        raise ExprError(f"unknown escape at character {j} of {text!r}; allowed: \\\\ \\' \\\" \\n \\t")
                    buf.append(_ESCAPES[text[j + 1]])
                    j += 2
                    continue
                buf.append(ch)
                j += 1
            out.append(_Tok("string", "".join(buf), i))
            i = j + 1
        elif (m := _NUMBER.match(text, i)) and (c.isdigit() or c in "+-."):
            s = m.group()
            value: Any = float(s) if any(x in s for x in ".eE") else int(s)
            if isinstance(value, float) and not math.isfinite(value):
                raise ExprError(f"number {s!r} at character {i} is not finite")
            out.append(_Tok("number", value, i))
            i = m.end()
        elif m := _NAME.match(text, i):
            out.append(_Tok("name", m.group(), i))
            i = m.end()
        else:
            raise ExprError(f"unexpected character {c!r} at position {i} of {text!r}")
    out.append(_Tok("end", None, n))
    return out


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def take(self) -> _Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def fail(self, tok: _Tok, wanted: str) -> ExprError:
        got = "the end" if tok.kind == "end" else repr(tok.value)
        return ExprError(f"expected {wanted} at character {tok.pos} of {self.text!r}, got {got}")

    def expect(self, punct: str) -> None:
        tok = self.take()
        if tok.kind != "punct" or tok.value != punct:
            raise self.fail(tok, repr(punct))

    def call(self) -> Call:
        tok = self.take()
        if tok.kind != "name" or tok.value in _WORDS:
            raise self.fail(tok, "a metric name")
        args: list = []
        kwargs: dict = {}
        if self.peek().kind == "punct" and self.peek().value == "(":
            self.take()
            while not (self.peek().kind == "punct" and self.peek().value == ")"):
                head = self.peek()
                nxt = self.toks[self.i + 1]
                if head.kind == "name" and head.value not in _WORDS and nxt.kind == "punct" and nxt.value == "=":
                    self.i += 2
                    if head.value in kwargs:
                        raise ExprError(f"argument {head.value!r} given twice in {self.text!r}")
                    kwargs[head.value] = self.literal()
                else:
                    if kwargs:
                        raise ExprError(
                            f"positional argument after a keyword argument at character {head.pos} of {self.text!r}"
                        )
                    args.append(self.literal())
                sep = self.peek()
                if sep.kind == "punct" and sep.value == ",":
                    self.take()
                elif not (sep.kind == "punct" and sep.value == ")"):
                    raise self.fail(sep, "',' or ')'")
            self.expect(")")
        end = self.take()
        if end.kind != "end":
            raise self.fail(end, "the end of the expression")
        return Call(tok.value, tuple(args), kwargs)

    def literal(self) -> Any:
        tok = self.take()
        if tok.kind in ("string", "number"):
            return tok.value
        if tok.kind == "name" and tok.value in _WORDS:
            return _WORDS[tok.value]
        if tok.kind == "punct" and tok.value == "[":
            items = []
            while not (self.peek().kind == "punct" and self.peek().value == "]"):
                if self.peek().kind == "punct" and self.peek().value == "[":
                    raise ExprError(f"nested lists are not allowed (character {self.peek().pos} of {self.text!r})")
                items.append(self.literal())
                sep = self.peek()
                if sep.kind == "punct" and sep.value == ",":
                    self.take()
                elif not (sep.kind == "punct" and sep.value == "]"):
                    raise self.fail(sep, "',' or ']'")
            self.expect("]")
            return items
        raise self.fail(tok, "a literal (string, number, true/false/null or a list)")


def parse_expr(text: str) -> Call:
    """Parse ``text`` into a :class:`Call`; ExprError (a ValueError) names what is wrong."""
    if not isinstance(text, str):
        raise ExprError(f"a metric expression must be a string, got {type(text).__name__}")
    if not text.strip():
        raise ExprError("a metric expression is empty")
    if len(text) > MAX_EXPR_CHARS:
        raise ExprError(f"a metric expression is longer than {MAX_EXPR_CHARS} characters")
    return _Parser(text).call()


def format_literal(value: Any) -> str:
    """The canonical text of a literal (JSON for strings, numbers, booleans, null, lists)."""
    if isinstance(value, list):
        return "[" + ", ".join(format_literal(v) for v in value) + "]"
    if isinstance(value, float) and not math.isfinite(value):
        raise ExprError(f"{value} is not a finite number")
    return json.dumps(value, ensure_ascii=True)


def format_call(call: Call) -> str:
    """``name(pos, ..., key=value, ...)`` with keyword arguments sorted; ``name`` alone when bare."""
    parts = [format_literal(v) for v in call.args]
    parts += [f"{k}={format_literal(v)}" for k, v in sorted(call.kwargs.items())]
    return f"{call.name}({', '.join(parts)})"
