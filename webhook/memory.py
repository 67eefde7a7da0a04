"""Memory a worker gives back after a large request.

glibc's malloc serves blocks of 128 KiB and more from their own mappings, and returns them on
free, until a large block is freed: it then raises that threshold to the block's size (up to
32 MiB) and keeps later blocks of that size in its heaps, where freed memory mostly stays. A
worker that parsed a few 3 MB reviews in several threads kept ~100-300 MB that way. Setting
the threshold explicitly turns the adjustment off.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
LARGE_BLOCK_BYTES = 128 * 1024


def return_large_blocks() -> bool:
    """Fix malloc's mmap and trim thresholds at 128 KiB; False where malloc is not glibc's."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
        gnu_get_libc_version = libc.gnu_get_libc_version  # glibc only (musl has a stub mallopt)
    except (OSError, AttributeError):
        return False
    del gnu_get_libc_version
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(
        mallopt(M_MMAP_THRESHOLD, LARGE_BLOCK_BYTES)
        and mallopt(M_TRIM_THRESHOLD, LARGE_BLOCK_BYTES)
    )
