"""How statistics are written (kosmos_env.stats.numbers): signs kept, intervals never falsely
collapsed, p-values bounded rather than printed as zero."""

from __future__ import annotations

import math
import re

import pytest

from kosmos_env.stats.numbers import p_text, p_value, plain_interval, signed, signed_estimate, signed_interval


@pytest.mark.parametrize(
    "x, digits, text",
    [
        (-0.0036, 2, "-0.004"),  # the upper end: never "+0.00"
        (0.0036, 2, "+0.004"),
        (-0.00004, 2, "-0.00004"),
        (-1e-9, 2, "-0.00000"),  # past the extra decimals the sign still shows
        (0.0, 2, "+0.00"),
        (-0.0, 2, "+0.00"),  # a zero has no side
        (0.25, 2, "+0.25"),
        (-0.2305, 2, "-0.23"),
        (1.0, 3, "+1.000"),
        (-0.0004, 3, "-0.0004"),
        (None, 2, "n/a"),
        (math.nan, 2, "n/a"),
        (-math.inf, 2, "-inf"),
    ],
)
def test_signed(x, digits, text):
    assert signed(x, digits) == text


def test_every_nonzero_value_keeps_its_sign_and_its_value():
    for k in range(1, 2000):
        for x in (k * 1e-5, -k * 1e-5, k * 7.3e-4, -k * 7.3e-4):
            s = signed(x)
            assert s[0] == ("+" if x > 0 else "-"), (x, s)
            decimals = len(s.split(".")[1])
            assert abs(float(s) - x) <= 0.5 * 10**-decimals + 1e-15, (x, s)


def test_intervals_keep_signs_and_never_read_collapsed_when_they_are_not():
    assert signed_estimate(-0.1, -0.2305, -0.0036) == "-0.10 [-0.23, -0.004]"
    assert signed_interval(-0.2305, -0.0036) == "[-0.23, -0.004]"
    # ends 0.004 apart that round alike get the decimals that show them apart
    assert signed_estimate(-0.3898, -0.3937, -0.3898) == "-0.390 [-0.394, -0.390]"
    assert plain_interval(0.421, 0.4249) == "[0.421, 0.425]"
    # truly equal ends stay equal (the caller says in words that this is no interval)
    assert signed_interval(1.0, 1.0) == "[+1.00, +1.00]"
    assert signed_estimate(1.0, 0.5219, 1.0) == "+1.00 [+0.52, +1.00]"
    assert signed_interval(None, 0.2) == "[n/a, +0.20]"
    for lo in (-0.5, -0.05, -0.004, 0.0012):
        text = signed_interval(lo, lo + 1e-4)
        a, b = re.findall(r"[+-]\d+\.\d+", text)
        assert a != b, text


@pytest.mark.parametrize(
    "p, cell, sentence",
    [
        (0.0, "< 0.0001", "p < 0.0001"),  # a t-test on differences with no spread: exactly 0
        (3e-11, "< 0.0001", "p < 0.0001"),
        (1e-4, "0.0001", "p = 0.0001"),
        (0.0312, "0.0312", "p = 0.0312"),
        (1.0, "1.0000", "p = 1.0000"),
        (None, "n/a", "p n/a"),
    ],
)
def test_p_values_are_bounded_never_zero(p, cell, sentence):
    assert p_value(p) == cell and p_text(p) == sentence
    assert "0.0000" not in p_value(p)


def test_p_value_floor_sets_the_decimals():
    assert p_value(0.0004, floor=0.001) == "< 0.001" and p_value(0.0123, floor=0.001) == "0.012"
    with pytest.raises(ValueError, match="floor"):
        p_value(0.5, floor=0)
