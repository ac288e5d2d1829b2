"""Go's ``strconv.ParseBool`` and ``strconv.Atoi``: how the kubelet reads its option strings.

A Python ``bool`` (``int``) stands for an already-parsed value (TOML has real booleans and
integers) and passes through.
"""

from __future__ import annotations

import re

TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_DECIMAL = re.compile(r"[+-]?[0-9]+")


def parse_bool(value: object) -> bool:
    """``strconv.ParseBool``; raises ValueError with Go's message."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        if value in TRUE:
            return True
        if value in FALSE:
            return False
    raise ValueError(f'strconv.ParseBool: parsing "{value}": invalid syntax')


def atoi(value: object) -> int:
    """``strconv.Atoi`` (decimal only); raises ValueError with Go's message."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        return int(value)
    raise ValueError(f'strconv.Atoi: parsing "{value}": invalid syntax')


def number_as_option(name: str, value: object, options_field: str) -> str | None:
    """Why a number (TOML ``1``) is refused as the boolean option ``name``: the kubelet's config
    loader refuses a JSON number in ``options_field``, a map of strings. None for other values
    (the string ``"1"`` is :func:`parse_bool`'s to judge)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    return (
        f'bad value for option "{name}": {value} is a number: write a string ("true", "false" '
        f'or "{value}") or a boolean; the kubelet refuses a number in {options_field}, a map '
        "of strings"
    )
