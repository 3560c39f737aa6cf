"""The metric-expression grammar: what parses, what is refused, and the canonical text."""

from __future__ import annotations

import pytest

from kosmos_env.registration.expr import Call, ExprError, format_call, parse_expr


def test_bare_name_and_keywords():
    assert parse_expr("spearman") == Call("spearman", (), {})
    c = parse_expr("mmrv(weight=\"reference\", ties='greater')")
    assert c.name == "mmrv" and c.kwargs == {"weight": "reference", "ties": "greater"} and c.args == ()


def test_literals_positional_list_numbers_words():
    c = parse_expr('rank_order(["a:k=1", "b"], 2, -0.5, 1e-3, true, False, null, None)')
    assert c.args == (["a:k=1", "b"], 2, -0.5, 0.001, True, False, None, None)
    assert isinstance(c.args[1], int) and isinstance(c.args[2], float)
    assert parse_expr('f(x="a\\"b\\\\c\\n")').kwargs == {"x": 'a"b\\c\n'}
    assert parse_expr("f(x=[],)").kwargs == {"x": []}  # trailing comma allowed


@pytest.mark.parametrize(
    "text, needle",
    [
        ("__import__('os').system('x')", "unexpected character"),  # attribute access is not grammar
        ("f(1)(2)", "expected the end"),  # no chained calls
        ("f(x=g(1))", "literal"),  # no nested calls
        ("f(x=1*2)", "unexpected character"),  # no operators
        ("f(x=1+2)", "expected ','"),
        ('f("a", b=1, "c")', "positional argument after"),
        ("f(x=1, x=2)", "given twice"),
        ("f(x=[[1]])", "nested lists"),
        ("f(x='abc)", "unterminated"),
        ("f(x=abc)", "literal"),  # bare names are not values
        ("f(x=1", "','"),
        ("", "empty"),
        ("true", "metric name"),
        ("f(x='\\q')", "escape"),
    ],
)
def test_refused(text, needle):
    with pytest.raises(ExprError, match=needle.replace("(", r"\(").replace("[", r"\[")):
        parse_expr(text)


def test_refuses_non_string_and_huge():
    with pytest.raises(ExprError):
        parse_expr(3)  # type: ignore[arg-type]
    with pytest.raises(ExprError, match="longer"):
        parse_expr("f(x=" + "1" * 3000 + ")")


def test_format_call_is_canonical_and_round_trips():
    c = parse_expr("mmrv( ties = 'greater' , weight='reference')")
    text = format_call(c)
    assert text == 'mmrv(ties="greater", weight="reference")'
    assert format_call(parse_expr(text)) == text
    assert format_call(Call("rank_order", (["a", "b"],), {"task": None})) == 'rank_order(["a", "b"], task=null)'
