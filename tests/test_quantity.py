"""Kubernetes quantities as millicores and bytes."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nri_plrm.base.quantity import (
    QuantityError,
    cpu_millis,
    format_bytes,
    memory_bytes,
    parse_quantity,
)


@pytest.mark.parametrize(
    ("value", "millis"),
    [
        ("500m", 500),
        ("1", 1000),
        ("1.5", 1500),
        (2, 2000),
        ("0.1", 100),
        ("1001m", 1001),
        ("100u", 1),
        ("2e0", 2000),
        (0.25, 250),
    ],
)
def test_cpu_millis(value: str | int | float, millis: int) -> None:
    assert cpu_millis(value) == millis


@pytest.mark.parametrize(
    ("value", "size"),
    [
        ("4Gi", 4 << 30),
        ("512Mi", 512 << 20),
        ("1k", 1000),
        ("129M", 129_000_000),
        ("1e3", 1000),
        (1024, 1024),
        ("1.5Ki", 1536),
        ("0.5", 1),
        ("2Ti", 2 << 40),
    ],
)
def test_memory_bytes(value: str | int, size: int) -> None:
    assert memory_bytes(value) == size


@pytest.mark.parametrize(
    "value", ["", "abc", "4X", "4gi", "1.2.3", "Gi", True, None, [1], float("inf"), float("nan")]
)
def test_rejects_non_quantities(value: object) -> None:
    with pytest.raises(QuantityError, match="quantity"):
        parse_quantity(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("size", "text"),
    [(4 << 30, "4Gi"), (512 << 20, "512Mi"), (1000, "1000"), (0, "0"), (3 << 10, "3Ki")],
)
def test_format_bytes(size: int, text: str) -> None:
    assert format_bytes(size) == text
    assert memory_bytes(text) == size


@given(st.text(max_size=20))
def test_parse_raises_only_quantity_error(text: str) -> None:
    with contextlib.suppress(QuantityError):
        parse_quantity(text)
