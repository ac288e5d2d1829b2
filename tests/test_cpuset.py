"""CPUSet: the kubelet list format, strict parsing and set algebra."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nri_plrm.base.cpuset import EMPTY, MAX_CPU_ID, CPUSet, CPUSetError

cpu_ids = st.frozensets(st.integers(min_value=0, max_value=2047), max_size=200)


@pytest.mark.parametrize(
    ("cpus", "text"),
    [
        ((), ""),
        ((5,), "5"),
        ((0, 1, 2, 5, 7, 8), "0-2,5,7-8"),
        ((2, 3), "2-3"),
        ((1, 3, 5), "1,3,5"),
        (range(64), "0-63"),
        ((100, 101, 200), "100-101,200"),
    ],
)
def test_string_form_matches_kubelet(cpus: tuple[int, ...], text: str) -> None:
    assert str(CPUSet(cpus)) == text
    assert CPUSet.parse(text) == CPUSet(cpus)


def test_parse_accepts_single_element_range_and_blanks() -> None:
    assert CPUSet.parse("3-3") == CPUSet([3])
    assert CPUSet.parse(" 0-1 , 4 ") == CPUSet([0, 1, 4])
    assert CPUSet.parse("0-3\n") == CPUSet(range(4))


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("3-1", "invalid range '3-1'"),
        ("a", "'a' is not a non-negative integer cpu id"),
        ("1,,2", "empty item between commas"),
        ("-1", "is not a non-negative integer"),
        ("1-", "is not a non-negative integer"),
        ("1-2-3", "is not a non-negative integer"),
        ("٣", "is not a non-negative integer"),
        (str(MAX_CPU_ID), "exceeds the maximum"),
    ],
)
def test_parse_rejects_bad_input_naming_it(text: str, fragment: str) -> None:
    with pytest.raises(CPUSetError, match="cpuset") as err:
        CPUSet.parse(text)
    assert fragment in str(err.value)


def test_constructor_rejects_negative_and_non_integer_ids() -> None:
    with pytest.raises(CPUSetError):
        CPUSet([-1])
    with pytest.raises(CPUSetError):
        CPUSet([True])
    with pytest.raises(CPUSetError):
        CPUSet.from_mask(-1)
    with pytest.raises(CPUSetError):
        CPUSet.from_range(3, 2)


def test_constructor_bounds_ids_like_the_parser() -> None:
    assert CPUSet([MAX_CPU_ID - 1]).mask == 1 << (MAX_CPU_ID - 1)
    with pytest.raises(CPUSetError, match=f"cpu id {MAX_CPU_ID}: exceeds the maximum"):
        CPUSet([MAX_CPU_ID])
    with pytest.raises(CPUSetError, match="exceeds the maximum"):
        CPUSet([0, 10**12])


def test_algebra() -> None:
    a, b = CPUSet.parse("0-5"), CPUSet.parse("4-9")
    assert a | b == CPUSet.parse("0-9")
    assert a & b == CPUSet.parse("4-5")
    assert a - b == CPUSet.parse("0-3")
    assert a.union(b, CPUSet([20])) == CPUSet.parse("0-9,20")
    assert CPUSet.parse("1-2") <= a and not a <= b
    assert a >= CPUSet([0]) and a.is_subset_of(CPUSet.parse("0-10"))
    assert CPUSet([1]).is_disjoint(CPUSet([2]))
    assert a.first() == 0 and b.first() == 4
    assert a.take_lowest(2) == CPUSet([0, 1]) and a.take_lowest(100) == a
    assert CPUSet.from_range(2, 4) == CPUSet([2, 3, 4])
    assert 3 in a and 7 not in a and "3" not in a and -1 not in a
    assert not EMPTY and EMPTY.is_empty() and len(EMPTY) == 0
    with pytest.raises(CPUSetError):
        EMPTY.first()


def test_hash_and_repr() -> None:
    assert len({CPUSet([1, 2]), CPUSet.parse("1-2")}) == 1
    assert repr(CPUSet([0, 2])) == "CPUSet('0,2')"


@given(cpu_ids)
def test_round_trip_through_text(cpus: frozenset[int]) -> None:
    cs = CPUSet(cpus)
    assert CPUSet.parse(str(cs)) == cs
    assert cs.sorted() == sorted(cpus)
    assert len(cs) == cs.size() == len(cpus)


@given(cpu_ids, cpu_ids)
def test_algebra_agrees_with_python_sets(a: frozenset[int], b: frozenset[int]) -> None:
    x, y = CPUSet(a), CPUSet(b)
    assert set(x | y) == a | b
    assert set(x & y) == a & b
    assert set(x - y) == a - b
    assert (x <= y) == (a <= b)
    assert x.is_disjoint(y) == a.isdisjoint(b)


@given(st.text(max_size=30))
def test_parse_never_raises_anything_but_cpuset_error(text: str) -> None:
    with contextlib.suppress(CPUSetError):
        CPUSet.parse(text)


def _ranges(ids: set[int]) -> str:
    runs: list[list[int]] = []
    for cpu in sorted(ids):
        if runs and runs[-1][1] == cpu - 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


@given(st.sets(st.integers(min_value=0, max_value=300)))
def test_the_list_format_is_the_same_on_every_call_and_every_construction(ids: set[int]) -> None:
    built = CPUSet(ids)
    assert str(built) == _ranges(ids)
    assert str(built) == _ranges(ids)
    assert str(CPUSet.from_mask(built.mask)) == _ranges(ids)
    assert str(CPUSet.parse(_ranges(ids))) == _ranges(ids)
    assert str(built | CPUSet([301])) == _ranges(ids | {301})
