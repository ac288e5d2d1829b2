"""CPUSet: an immutable set of CPU ids with the kernel/kubelet list format (``0-2,5,7-8``).

Stored as an integer bitmask, so union, intersection, difference and size are single
big-integer operations; this keeps the allocation engine fast on 1,024-CPU machines.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

MAX_CPU_ID = 1 << 16
"""CPU ids from a list or a string must be below this (the kernel's NR_CPUS is at most 8,192)."""


class CPUSetError(ValueError):
    """A cpuset string or CPU id that breaks the list-format rules."""


class CPUSet:
    """Immutable, hashable set of non-negative CPU ids."""

    __slots__ = ("_mask", "_text")

    _mask: int
    _text: str | None

    def __init__(self, cpus: Iterable[int] = ()) -> None:
        mask = 0
        for cpu in cpus:
            if not isinstance(cpu, int) or isinstance(cpu, bool) or cpu < 0:
                raise CPUSetError(f"cpu id {cpu!r}: must be a non-negative integer")
            if cpu >= MAX_CPU_ID:
                raise CPUSetError(f"cpu id {cpu}: exceeds the maximum {MAX_CPU_ID - 1}")
            mask |= 1 << cpu
        self._mask = mask
        self._text = None

    @classmethod
    def from_mask(cls, mask: int) -> CPUSet:
        """Build a set from a bitmask (bit n set means CPU n is in the set)."""
        if mask < 0:
            raise CPUSetError(f"cpu mask {mask}: must be non-negative")
        obj = cls.__new__(cls)
        obj._mask = mask
        obj._text = None
        return obj

    @classmethod
    def from_range(cls, first: int, last: int) -> CPUSet:
        """The CPUs ``first..last`` inclusive."""
        if first < 0 or last < first:
            raise CPUSetError(f"cpu range {first}-{last}: invalid range")
        return cls.from_mask(((1 << (last - first + 1)) - 1) << first)

    @classmethod
    def parse(cls, text: str) -> CPUSet:
        """Parse the list format: ``""``, ``"3"``, ``"0-2,5,7-8"`` (blanks around items allowed).

        Raises CPUSetError naming the offending item and the rule it breaks.
        """
        text = text.strip()
        if not text:
            return EMPTY
        mask = 0
        for raw in text.split(","):
            item = raw.strip()
            if not item:
                raise CPUSetError(f"cpuset {text!r}: empty item between commas")
            first_s, sep, last_s = item.partition("-")
            first = _parse_id(text, first_s)
            last = _parse_id(text, last_s) if sep else first
            if last < first:
                raise CPUSetError(f"cpuset {text!r}: invalid range {item!r} (end before start)")
            mask |= ((1 << (last - first + 1)) - 1) << first
        return cls.from_mask(mask)

    @property
    def mask(self) -> int:
        """The bitmask (bit n set means CPU n is in the set)."""
        return self._mask

    def __len__(self) -> int:
        return self._mask.bit_count()

    def size(self) -> int:
        """Number of CPUs in the set."""
        return self._mask.bit_count()

    def is_empty(self) -> bool:
        """True when the set holds no CPU."""
        return self._mask == 0

    def __bool__(self) -> bool:
        return self._mask != 0

    def __iter__(self) -> Iterator[int]:
        mask = self._mask
        while mask:
            low = mask & -mask
            yield low.bit_length() - 1
            mask ^= low

    def sorted(self) -> list[int]:
        """The CPU ids in ascending order."""
        return list(self)

    def __contains__(self, cpu: object) -> bool:
        return isinstance(cpu, int) and cpu >= 0 and bool(self._mask >> cpu & 1)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CPUSet) and other._mask == self._mask

    def __hash__(self) -> int:
        return hash(self._mask)

    def __or__(self, other: CPUSet) -> CPUSet:
        return CPUSet.from_mask(self._mask | other._mask)

    def __and__(self, other: CPUSet) -> CPUSet:
        return CPUSet.from_mask(self._mask & other._mask)

    def __sub__(self, other: CPUSet) -> CPUSet:
        return CPUSet.from_mask(self._mask & ~other._mask)

    def __le__(self, other: CPUSet) -> bool:
        return self._mask & ~other._mask == 0

    def __ge__(self, other: CPUSet) -> bool:
        return other._mask & ~self._mask == 0

    def union(self, *others: CPUSet) -> CPUSet:
        """Union with every set given."""
        mask = self._mask
        for other in others:
            mask |= other._mask
        return CPUSet.from_mask(mask)

    def intersection(self, other: CPUSet) -> CPUSet:
        """CPUs in both sets."""
        return self & other

    def difference(self, other: CPUSet) -> CPUSet:
        """CPUs of this set that are not in ``other``."""
        return self - other

    def is_subset_of(self, other: CPUSet) -> bool:
        """True when every CPU of this set is in ``other``."""
        return self <= other

    def is_disjoint(self, other: CPUSet) -> bool:
        """True when the sets share no CPU."""
        return self._mask & other._mask == 0

    def first(self) -> int:
        """The lowest CPU id; raises CPUSetError on an empty set."""
        if not self._mask:
            raise CPUSetError("empty cpuset has no first cpu")
        return (self._mask & -self._mask).bit_length() - 1

    def take_lowest(self, n: int) -> CPUSet:
        """The ``n`` lowest CPU ids of the set (all of them if there are fewer)."""
        mask = self._mask
        out = 0
        while mask and n > 0:
            low = mask & -mask
            out |= low
            mask ^= low
            n -= 1
        return CPUSet.from_mask(out)

    def __str__(self) -> str:
        text = self._text
        if text is None:
            text = self._text = self._format()
        return text

    def _format(self) -> str:
        parts: list[str] = []
        mask = self._mask
        base = 0
        while mask:
            skip = (mask & -mask).bit_length() - 1
            mask >>= skip
            base += skip
            run = (~mask & (mask + 1)).bit_length() - 1
            last = base + run - 1
            parts.append(str(base) if run == 1 else f"{base}-{last}")
            mask >>= run
            base += run
        return ",".join(parts)

    def __repr__(self) -> str:
        return f"CPUSet({str(self)!r})"


def _parse_id(text: str, item: str) -> int:
    item = item.strip()
    if not item.isdigit() or not item.isascii():
        raise CPUSetError(f"cpuset {text!r}: {item!r} is not a non-negative integer cpu id")
    value = int(item)
    if value >= MAX_CPU_ID:
        raise CPUSetError(f"cpuset {text!r}: cpu id {value} exceeds the maximum {MAX_CPU_ID - 1}")
    return value


EMPTY = CPUSet.from_mask(0)
"""The empty set."""
