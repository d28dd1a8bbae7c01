"""Tests for sparsify.portable_math: IEEE-exact building blocks, about one ulp against the C library."""
import math
import random
import struct
from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

from sparsify import portable_math as pm


def ulps(a: float, b: float) -> int:
    """Distance in units in the last place between two finite floats."""
    def key(x):
        i = struct.unpack("<q", struct.pack("<d", x))[0]
        return i if i >= 0 else -(i & 0x7FFFFFFFFFFFFFFF)
    return abs(key(a) - key(b))


def worst_ulps(ours, ref, points):
    return max(ulps(ours(*x), ref(*x)) for x in points)


RNG = random.Random(20240611)
EXP_POINTS = [(RNG.uniform(-745.0, 709.0),) for _ in range(4000)] + [(RNG.uniform(-1, 1),) for _ in range(4000)] \
    + [(RNG.uniform(-1e-6, 1e-6),) for _ in range(500)] + [(k * math.log(2),) for k in range(-1000, 1000, 7)]
LOG_POINTS = [(math.exp(RNG.uniform(-700, 700)),) for _ in range(4000)] + [(RNG.uniform(0.5, 2.0),) for _ in range(4000)] \
    + [(1 + RNG.uniform(-1e-9, 1e-9),) for _ in range(500)] + [(RNG.uniform(1e-320, 1e-308),) for _ in range(200)]
TRIG_POINTS = [(RNG.uniform(-10, 10),) for _ in range(4000)] + [(RNG.uniform(0, math.pi / 2),) for _ in range(4000)] \
    + [(RNG.uniform(-1e5, 1e5),) for _ in range(2000)] + [(k * math.pi / 2,) for k in range(-2000, 2000)]
POW_POINTS = [(RNG.uniform(0, 1), RNG.uniform(0, 12)) for _ in range(4000)] \
    + [(RNG.uniform(0, 1), RNG.uniform(0, 1)) for _ in range(4000)] \
    + [(RNG.uniform(0, 100), RNG.uniform(-60, 60)) for _ in range(4000)] \
    + [(RNG.uniform(1e-6, 1), float(RNG.randint(1, 30))) for _ in range(2000)]


@pytest.mark.parametrize("ours,ref,points", [
    (pm.exp, math.exp, EXP_POINTS),
    (pm.log, math.log, LOG_POINTS),
    (pm.cos, math.cos, TRIG_POINTS),
    (pm.sin, math.sin, TRIG_POINTS),
    (pm.power, math.pow, POW_POINTS),
], ids=["exp", "log", "cos", "sin", "power"])
def test_within_one_ulp_of_the_c_library(ours, ref, points):
    assert worst_ulps(ours, ref, points) <= 1


def test_literal_values():
    assert (pm.exp(0.0), pm.exp(1.0), pm.exp(-1.0)) == (1.0, 2.718281828459045, 0.36787944117144233)
    assert (pm.log(1.0), pm.log(2.0), pm.log(10.0)) == (0.0, 0.6931471805599453, 2.302585092994046)
    assert (pm.cos(0.0), pm.cos(math.pi), pm.cos(math.pi / 2)) == (1.0, -1.0, 6.123233995736766e-17)
    assert (pm.sin(0.0), pm.sin(math.pi / 2), pm.sin(-math.pi / 6)) == (0.0, 1.0, -0.49999999999999994)
    assert (pm.power(0.5, 3.0), pm.power(0.25, 0.5), pm.power(2.0, -2.0), pm.power(0.9, 3)) == \
        (0.125, 0.5, 0.25, 0.7290000000000001)
    assert pm.power(0.1, 0.5) == 0.31622776601683794 and pm.power(10.0, 0.3) == 1.9952623149688795


def test_special_values():
    assert pm.exp(-math.inf) == 0.0 and pm.exp(math.inf) == math.inf and math.isnan(pm.exp(math.nan))
    assert pm.exp(-800.0) == 0.0 and pm.exp(-745.0) == 5e-324
    with pytest.raises(OverflowError, match="too large"):
        pm.exp(710.0)
    assert pm.log(math.inf) == math.inf and pm.log(5e-324) == math.log(5e-324)
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match="log needs x > 0"):
            pm.log(bad)
    assert pm.power(0.0, 2.5) == 0.0 and pm.power(1.0, math.nan) == 1.0 and pm.power(math.nan, 0.0) == 1.0
    assert pm.power(-2.0, 3.0) == -8.0 and pm.power(10.0, 400.0) == math.inf and pm.power(0.5, 2000.5) == 0.0
    assert pm.power(math.inf, 0.5) == math.inf and pm.power(math.inf, -0.5) == 0.0
    assert (pm.power(0.5, math.inf), pm.power(2.0, math.inf), pm.power(0.5, -math.inf)) == (0.0, math.inf, math.inf)
    assert pm.integer_power(-math.inf, 3) == -math.inf and pm.integer_power(math.inf, -2) == 0.0
    assert pm.integer_power(0.0, 0) == 1.0 and math.isnan(pm.integer_power(math.nan, 2))
    with pytest.raises(ZeroDivisionError):
        pm.integer_power(0.0, -1)
    with pytest.raises(ValueError, match="negative base needs an integer exponent"):
        pm.power(-2.0, 0.5)
    with pytest.raises(ValueError, match="zero cannot be raised to a negative power"):
        pm.power(0.0, -1.5)
    with pytest.raises(ValueError, match=r"\|x\| must be <= 1.04858e\+06"):
        pm.cos(2.0e6)
    with pytest.raises(ValueError, match="finite argument"):
        pm.sin(math.inf)
    with pytest.raises(TypeError, match="x must be a real number, got 'a'"):
        pm.exp("a")


@settings(max_examples=300, deadline=None)
@given(st.floats(1e-3, 1e3), st.integers(-40, 40))
def test_integer_power_is_the_correctly_rounded_power(x, n):
    exact = Fraction(x) ** n
    assert pm.integer_power(x, n) == float(exact)
    assert pm.power(x, float(n)) == pm.integer_power(x, n)


@settings(max_examples=300, deadline=None)
@given(st.floats(-1e100, 1e100), st.floats(-1e100, 1e100))
def test_two_sum_and_two_product_are_exact(a, b):
    s, e = pm.two_sum(a, b)
    assert s == a + b and Fraction(s) + Fraction(e) == Fraction(a) + Fraction(b)
    p, f = pm.two_product(a, b)
    if p != 0.0 and abs(p) > 1e-290:                  # the error term of a tiny product may underflow
        assert p == a * b and Fraction(p) + Fraction(f) == Fraction(a) * Fraction(b)


def test_uses_no_c_library_function_that_rounds():
    """Only IEEE-exact operations: no math.exp/log/pow/sin/cos, no ``**`` anywhere in the code."""
    import inspect
    import io
    import tokenize

    tokens = list(tokenize.generate_tokens(io.StringIO(inspect.getsource(pm)).readline))
    code = [t for t in tokens if t.type not in (tokenize.COMMENT, tokenize.STRING)]
    assert not [t for t in code if t.type == tokenize.OP and t.string == "**"]
    used = {f"math.{code[i + 2].string}" for i in range(len(code) - 2)
            if code[i].string == "math" and code[i + 1].string == "."}
    assert used <= {"math.floor", "math.frexp", "math.ldexp", "math.isfinite", "math.isnan", "math.isinf", "math.inf",
                    "math.nan", "math.copysign"}, used
