"""Kubernetes resource quantities (``500m``, ``2``, ``4Gi``, ``1e3``, ``128974848``) as integers.

CPU quantities become millicores (rounded up, as the kubelet's ``MilliValue``); memory and
hugepage quantities become bytes (rounded up, as ``Value``).
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_EXPONENT = re.compile(r"^[eE][+-]?[0-9]+$")
_PATTERN = re.compile(r"^([+-]?[0-9]+(?:\.[0-9]*)?|[+-]?\.[0-9]+)((?:[eE][+-]?[0-9]+)|[a-zA-Z]*)$")


MAX_EXPONENT = 30
"""Largest decimal exponent accepted (``1e30``): far beyond any real quantity, and it keeps a
hostile ``1e999999999`` from turning into a billion-digit integer."""


class QuantityError(ValueError):
    """A quantity string that is not in the Kubernetes format."""


def parse_quantity(value: str | int | float) -> Decimal:
    """Parse a quantity into an exact Decimal in base units."""
    if isinstance(value, bool):
        raise QuantityError(f"quantity {value!r}: expected a string or a number")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if not math.isfinite(value):  # YAML's .inf and .nan are floats
            raise QuantityError(f"quantity {value!r}: not a finite number")
        return Decimal(repr(value))
    if not isinstance(value, str):
        raise QuantityError(f"quantity {value!r}: expected a string or a number")
    match = _PATTERN.match(value.strip())
    if not match:
        raise QuantityError(f"quantity {value!r}: not a Kubernetes quantity (e.g. 500m, 2, 4Gi)")
    number, suffix = match.groups()
    try:
        base = Decimal(number)
    except InvalidOperation as exc:
        raise QuantityError(f"quantity {value!r}: not a number") from exc
    if suffix not in _SUFFIXES and _EXPONENT.match(suffix):
        exponent = int(suffix[1:])
        if abs(exponent) > MAX_EXPONENT:
            raise QuantityError(
                f"quantity {value!r}: exponent {exponent} out of range "
                f"(-{MAX_EXPONENT}..{MAX_EXPONENT})"
            )
        return base * (Decimal(10) ** exponent)
    if suffix not in _SUFFIXES:
        raise QuantityError(
            f"quantity {value!r}: unknown suffix {suffix!r} (allowed: m, k, M, G, Ki, Mi, Gi, ...)"
        )
    return base * _SUFFIXES[suffix]


def _ceil(d: Decimal) -> int:
    return int(d.to_integral_value(rounding=ROUND_CEILING))


def cpu_millis(value: str | int | float) -> int:
    """A CPU quantity in millicores (``"1.5"`` -> 1500, ``"250m"`` -> 250)."""
    return _ceil(parse_quantity(value) * 1000)


def memory_bytes(value: str | int | float) -> int:
    """A memory or hugepage quantity in bytes (``"4Gi"`` -> 4294967296)."""
    return _ceil(parse_quantity(value))


def is_page_size(text: str) -> bool:
    """True for a memory page size: a power of two of at least 4Ki bytes."""
    try:
        size = memory_bytes(text)
    except QuantityError:
        return False
    return size >= 4096 and size & (size - 1) == 0


def format_bytes(n: int) -> str:
    """Bytes as the largest exact binary quantity (``4294967296`` -> ``4Gi``)."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = int(_SUFFIXES[suffix])
        if n and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def format_bytes_human(n: int) -> str:
    """Bytes for a reader, in the largest binary unit they reach, to one decimal when inexact
    (``9087168512`` -> ``8.5Gi``; exact values as :func:`format_bytes`: ``4Gi``, ``512Mi``)."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = int(_SUFFIXES[suffix])
        if abs(n) >= unit:
            if n % unit == 0:
                return f"{n // unit}{suffix}"
            return f"{n / unit:.1f}{suffix}"
    return str(n)
