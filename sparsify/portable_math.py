"""Elementary functions with the same bits on every machine.

``math.exp``, ``math.log``, ``math.cos`` and ``**`` call the platform's libm,
whose last bit differs between C libraries, CPUs and SIMD levels. The
functions here use only operations IEEE 754 rounds exactly (``+ - * /`` on
Python floats, ``math.frexp``/``math.ldexp`` scaling and ``math.floor``), in a
fixed order, so a value that decides a mask (a schedule's sparsity) has the
same bits on x86-64 and ARM, with or without SIMD. CPython evaluates every
float operation on its own (no fused multiply-add, no extended precision).

They are accurate to about one ulp (the tests compare them with ``math`` over
many points): logarithms and powers carry double-double intermediates
(Dekker's exact products, Knuth's exact sums); integer powers multiply in
double-double in a fixed binary order.

Example:
    >>> exp(1.0), log(2.0), cos(0.0)
    (2.718281828459045, 0.6931471805599453, 1.0)
    >>> power(0.5, 3), power(0.25, 0.5)
    (0.125, 0.5)
"""
from __future__ import annotations

import math

__all__ = ["exp", "log", "power", "integer_power", "cos", "sin", "two_sum", "two_product", "TRIG_MAX_ARGUMENT"]

#: Largest ``|x|`` :func:`cos` and :func:`sin` accept (their argument reduction is exact below it).
TRIG_MAX_ARGUMENT = 1048576.0            # 2**20

_SPLITTER = 134217729.0                  # 2**27 + 1 (Veltkamp split of a double into two 26-bit halves)
_SPLIT_LIMIT = math.ldexp(1.0, 995)     # above this the split would overflow

# ln 2 in two parts: _LN2_HI has 32 significant bits, so k * _LN2_HI is exact for |k| < 2**21.
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_INV_LN2 = 1.44269504088896338700e+00
_SQRT_HALF = 0.7071067811865476

# pi/2 in four parts (fdlibm): the first two have 33 significant bits, so k * part is exact for |k| < 2**20.
_PIO2_1 = 1.57079632673412561417e+00
_PIO2_2 = 6.07710050630396597660e-11
_PIO2_3 = 2.02226624871116645580e-21
_PIO2_3T = 8.47842766036889956997e-32
_TWO_OVER_PI = 6.36619772367581382433e-01

_INTEGER_EXPONENT_LIMIT = math.ldexp(1.0, 63)
_EXP_OVERFLOW = 709.782712893384         # exp(x) > max float above this
_EXP_UNDERFLOW = -745.1332191019412      # exp(x) rounds to 0 below this


def _reciprocal_factorials(n: int) -> tuple[float, ...]:
    out, f = [], 1
    for i in range(n + 1):
        f *= max(i, 1)
        out.append(1.0 / f)               # one correctly rounded division of exact integers
    return tuple(out)


_INV_FACT = _reciprocal_factorials(22)
# 2 / (2k + 1) for k = 1..12: the series 2 atanh(s) = 2 s + s * z * sum_k 2 z**(k-1) / (2k + 1), z = s * s
_ATANH_COEFFS = tuple(2.0 / (2 * k + 1) for k in range(1, 13))


def two_sum(a: float, b: float) -> tuple[float, float]:
    """``(s, e)`` with ``s = fl(a + b)`` and ``s + e == a + b`` exactly (Knuth).

    Example:
        >>> two_sum(1.0, 2.0 ** -60)
        (1.0, 8.673617379884035e-19)
    """
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _fast_two_sum(a: float, b: float) -> tuple[float, float]:
    """Like :func:`two_sum` when ``|a| >= |b|`` (Dekker)."""
    s = a + b
    return s, b - (s - a)


def _split(a: float) -> tuple[float, float]:
    c = _SPLITTER * a
    hi = c - (c - a)
    return hi, a - hi


def two_product(a: float, b: float) -> tuple[float, float]:
    """``(p, e)`` with ``p = fl(a * b)`` and ``p + e == a * b`` exactly (Dekker, no FMA needed).

    Exact while ``|a|, |b| < 2**995`` and the product does not underflow.

    Example:
        >>> two_product(0.1, 0.1)
        (0.010000000000000002, -8.326672684688674e-19)
    """
    p = a * b
    if not (abs(a) < _SPLIT_LIMIT and abs(b) < _SPLIT_LIMIT):
        return p, 0.0
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _dd_mul(ah: float, al: float, bh: float, bl: float) -> tuple[float, float]:
    p, e = two_product(ah, bh)
    if not math.isfinite(p):
        return p, 0.0
    e += ah * bl + al * bh
    return _fast_two_sum(p, e)


def _check_float(name: str, x: float) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        try:
            return float(x)               # NumPy scalars
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be a real number, got {x!r} ({type(x).__name__})") from None
    return float(x)


def integer_power(x: float, n: int) -> float:
    """``x ** n`` for an integer ``n`` by double-double multiplication in a fixed order.

    Binary powering on a double-double, rounded once at the end: about half
    an ulp for any ``n`` whose result neither overflows nor underflows.

    Example:
        >>> integer_power(0.9, 3), integer_power(2.0, -2), integer_power(-3.0, 3)
        (0.7290000000000001, 0.25, -27.0)
    """
    x = _check_float("x", x)
    if isinstance(n, bool) or not isinstance(n, int):
        if isinstance(n, float) and n.is_integer():
            n = int(n)
        else:
            raise TypeError(f"n must be an integer, got {n!r}")
    if n == 0 or x == 1.0:
        return 1.0
    if math.isnan(x):
        return x
    if x == 0.0 and n < 0:
        raise ZeroDivisionError(f"0.0 cannot be raised to the negative power {n}")
    if math.isinf(x):
        magnitude = math.inf if n > 0 else 0.0
        return -magnitude if x < 0 and n % 2 else magnitude
    rh, rl = 1.0, 0.0
    bh, bl = x, 0.0
    m = abs(n)
    while m:
        if m & 1:
            rh, rl = _dd_mul(rh, rl, bh, bl)
        m >>= 1
        if m:
            bh, bl = _dd_mul(bh, bl, bh, bl)
    if n > 0:
        return rh + rl
    if not math.isfinite(rh) or rh == 0.0:
        return 1.0 / rh if rh != 0.0 else (math.inf if math.copysign(1.0, rh) > 0 else -math.inf)
    # 1 / (rh + rl), corrected once: q + (1 - q (rh + rl)) / rh
    q = 1.0 / rh
    p, p_err = two_product(q, rh)
    return q + (((1.0 - p) - p_err) - q * rl) / rh


def _log_double_double(x: float) -> tuple[float, float]:
    """``log(x)`` as a double-double for a finite ``x > 0`` (relative error about 2**-60)."""
    m, e = math.frexp(x)                  # x = m * 2**e, 0.5 <= m < 1
    if m < _SQRT_HALF:
        m *= 2.0
        e -= 1                            # sqrt(1/2) <= m < sqrt(2)
    # log(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.1716
    num = m - 1.0                         # exact (Sterbenz)
    den_h, den_l = two_sum(m, 1.0)
    s_h = num / den_h
    p, p_err = two_product(s_h, den_h)
    s_l = (((num - p) - p_err) - s_h * den_l) / den_h
    z = s_h * s_h
    poly = _ATANH_COEFFS[-1]
    for c in reversed(_ATANH_COEFFS[:-1]):
        poly = c + z * poly
    hi, lo = _fast_two_sum(2.0 * s_h, 2.0 * s_l + s_h * z * poly)
    if e:
        eh = e * _LN2_HI                  # exact
        hi, err = two_sum(eh, hi)
        hi, lo = _fast_two_sum(hi, err + (lo + e * _LN2_LO))
    return hi, lo


def _exp_double_double(h: float, l: float) -> float:
    """``exp(h + l)`` for ``|l| <= ulp(h)``; inf above the overflow threshold, 0 below underflow."""
    if h > _EXP_OVERFLOW:
        return math.inf
    if h < _EXP_UNDERFLOW:
        return 0.0
    k = int(math.floor(h * _INV_LN2 + 0.5))
    # r = h + l - k ln2, carried as a double-double: h - k*_LN2_HI is exact (Sterbenz)
    r_h, r_l = two_sum(h - k * _LN2_HI, l - k * _LN2_LO) if k else (h, l)
    # exp(r) = 1 + r + r**2 * (1/2! + r/3! + ... + r**14/16!), |r| <= 0.35
    q = _INV_FACT[16]
    for i in range(15, 1, -1):
        q = _INV_FACT[i] + r_h * q
    tail = r_l + r_h * r_h * q
    s, s_err = _fast_two_sum(r_h, tail)
    one, one_err = _fast_two_sum(1.0, s)
    value = one + (one_err + s_err)
    try:
        return math.ldexp(value, k)        # exact scaling (one IEEE rounding for a subnormal result)
    except OverflowError:
        return math.inf


def exp(x: float) -> float:
    """``e ** x``; raises ``OverflowError`` like ``math.exp`` when the result is too large.

    Example:
        >>> exp(0.0), exp(-1.0)
        (1.0, 0.36787944117144233)
    """
    x = _check_float("x", x)
    if math.isnan(x):
        return x
    if x == math.inf:
        return math.inf
    if x == -math.inf:
        return 0.0
    out = _exp_double_double(x, 0.0)
    if out == math.inf:
        raise OverflowError(f"exp({x!r}) is too large for a float")
    return out


def log(x: float) -> float:
    """Natural logarithm; ``ValueError`` for ``x <= 0`` like ``math.log``.

    Example:
        >>> log(1.0), log(math.e ** 2)
        (0.0, 2.0)
    """
    x = _check_float("x", x)
    if math.isnan(x) or x == math.inf:
        return x
    if x <= 0.0:
        raise ValueError(f"log needs x > 0, got {x!r}")
    hi, lo = _log_double_double(x)
    return hi + lo


def power(x: float, y: float) -> float:
    """``x ** y`` for ``x >= 0`` (any real ``y``) or any ``x`` with an integer ``y``; inf on overflow.

    An integer ``y`` (``3`` or ``3.0``) multiplies (:func:`integer_power`);
    otherwise ``exp(y * log(x))`` with the logarithm and the product in
    double-double, so large ``|y * log(x)|`` keep full accuracy.

    Raises:
        ValueError: ``x < 0`` with a non-integer ``y``, or ``x == 0`` with ``y < 0``.

    Example:
        >>> power(0.1, 0.5), power(0.9, 3.0), power(0.5, -2)
        (0.31622776601683794, 0.7290000000000001, 4.0)
    """
    x = _check_float("x", x)
    y = _check_float("y", y)
    if math.isnan(x) or math.isnan(y):
        return math.nan if not (y == 0.0 or x == 1.0) else 1.0
    if y == 0.0 or x == 1.0:
        return 1.0
    if math.isfinite(y) and y.is_integer() and abs(y) < _INTEGER_EXPONENT_LIMIT:
        if x == 0.0 and y < 0:
            raise ValueError(f"power(0.0, {y!r}): zero cannot be raised to a negative power")
        return integer_power(x, int(y))
    if x < 0.0:
        raise ValueError(f"power({x!r}, {y!r}): a negative base needs an integer exponent")
    if x == 0.0:
        if y < 0:
            raise ValueError(f"power(0.0, {y!r}): zero cannot be raised to a negative power")
        return 0.0
    if math.isinf(x):
        return math.inf if y > 0 else 0.0
    if math.isinf(y):
        return 0.0 if (x < 1.0) == (y > 0) else math.inf
    lh, ll = _log_double_double(x)
    th = y * lh
    if th > _EXP_OVERFLOW + 1.0:
        return math.inf
    if th < _EXP_UNDERFLOW - 1.0:
        return 0.0
    th, tl = two_product(y, lh)
    th, tl = _fast_two_sum(th, tl + y * ll)
    return _exp_double_double(th, tl)


def _reduce_half_pi(x: float) -> tuple[int, float, float]:
    """``x = k * pi/2 + (r_hi + r_lo)`` with ``|r| <= pi/4`` (Cody-Waite in four exact parts)."""
    k = int(math.floor(x * _TWO_OVER_PI + 0.5))
    if k == 0:
        return 0, x, 0.0
    a = x - k * _PIO2_1                   # exact: k * _PIO2_1 is exact and close to x
    r, e = two_sum(a, -(k * _PIO2_2))     # k * _PIO2_2 is exact
    c, c_err = two_product(float(k), _PIO2_3)
    r, e2 = two_sum(r, -c)
    r, tail = _fast_two_sum(r, ((e + e2) - c_err) - k * _PIO2_3T)
    return k, r, tail


def _cos_kernel(r: float, r_lo: float) -> float:
    """cos(r + r_lo) for |r| <= pi/4."""
    z, z_err = two_product(r, r)
    q = _INV_FACT[20]
    for i in range(18, 2, -2):
        q = (_INV_FACT[i] if i % 4 == 0 else -_INV_FACT[i]) + z * q
    # cos r = 1 - z/2 + z**2 * q, q = 1/4! - z/6! + z**2/8! - ...
    hz = 0.5 * z
    w = 1.0 - hz
    corr = (((1.0 - w) - hz) - 0.5 * z_err) - r * r_lo
    return w + (corr + z * z * q)


def _sin_kernel(r: float, r_lo: float) -> float:
    """sin(r + r_lo) for |r| <= pi/4."""
    z = r * r
    q = _INV_FACT[21]
    for i in range(19, 1, -2):
        q = (_INV_FACT[i] if i % 4 == 1 else -_INV_FACT[i]) + z * q
    # sin r = r + r * z * (-1/3! + z/5! - ...); cos(r) ~ 1 - z/2 weighs r_lo
    return r + (r_lo * (1.0 - 0.5 * z) + r * z * q)


def _trig(x: float, shift: int) -> float:
    x = _check_float("x", x)
    if not math.isfinite(x):
        if math.isnan(x):
            return x
        raise ValueError(f"trigonometric functions need a finite argument, got {x!r}")
    if abs(x) > TRIG_MAX_ARGUMENT:
        raise ValueError(f"|x| must be <= {TRIG_MAX_ARGUMENT:g} for an exact argument reduction, got {x!r}")
    k, r, r_lo = _reduce_half_pi(x)
    quadrant = (k + shift) & 3
    if quadrant == 0:
        return _cos_kernel(r, r_lo)
    if quadrant == 1:
        return -_sin_kernel(r, r_lo)
    if quadrant == 2:
        return -_cos_kernel(r, r_lo)
    return _sin_kernel(r, r_lo)


def cos(x: float) -> float:
    """Cosine for ``|x| <= TRIG_MAX_ARGUMENT`` (``ValueError`` beyond, and for inf).

    Example:
        >>> cos(0.0), cos(math.pi / 3)
        (1.0, 0.5000000000000001)
    """
    return _trig(x, 0)


def sin(x: float) -> float:
    """Sine for ``|x| <= TRIG_MAX_ARGUMENT`` (``ValueError`` beyond, and for inf).

    Example:
        >>> sin(0.0), sin(math.pi / 6)
        (0.0, 0.49999999999999994)
    """
    return _trig(x, 3)
