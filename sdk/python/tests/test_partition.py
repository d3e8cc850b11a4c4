"""murmur2 partitioning: the package's must be pkg/topics.Partition's for every key."""
from __future__ import annotations

import canopy


def test_partition_is_go_s(vectors: list[tuple[bytes, int, int]]) -> None:
    assert len(vectors) >= 10_000
    wrong = [(k, n, p, canopy.partition(k, n)) for k, n, p in vectors if canopy.partition(k, n) != p]
    assert not wrong, f"{len(wrong)} keys placed unlike Go, e.g. (key, partitions, Go's, ours) {wrong[:3]}"


def test_str_keys_are_utf8() -> None:
    assert canopy.partition("run-日本", 64) == canopy.partition("run-日本".encode(), 64)
    assert canopy.partition("anything", 0) == 0
