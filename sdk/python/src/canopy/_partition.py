"""Kafka's murmur2 partitioning, exactly as pkg/topics.Partition and Kafka's Java client place keys."""
from __future__ import annotations

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash of data (org.apache.kafka.common.utils.Utils.murmur2), unsigned 32-bit."""
    n = len(data)
    h = (0x9747B28C ^ n) & _MASK
    end = n - n % 4
    for i in range(0, end, 4):
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = n % 4
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition(key: bytes | str, partitions: int) -> int:
    """The partition of key among partitions: murmur2 of the key's bytes (UTF-8 for a str), its
    sign bit cleared, modulo the count; 0 when partitions is not positive."""
    if partitions <= 0:
        return 0
    b = key.encode("utf-8") if isinstance(key, str) else key
    return (murmur2(b) & 0x7FFFFFFF) % partitions
