"""The process's allocator: large buffers go straight back to the system when freed, so a burst's memory returns.

glibc serves a large allocation (a history answer, an outbox's frames) from `mmap` and unmaps it on `free`,
but after the first such free it raises that threshold (up to 32 MiB) and serves later ones from the heap,
where freed space stays with the process. Measured on a real gateway: ten non-reading clients asking for
10 MB histories took RSS from 63 to 166 MB, and it stayed at 127 MB after they were cut; with the threshold
fixed at 256 KiB it went 47 → 124 → 48 MB. Small objects are Python's own (pymalloc), which frees its
arenas when empty.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number (malloc.h)
MMAP_THRESHOLD_BYTES = 256 << 10


def return_large_buffers() -> bool:
    """Fix glibc's mmap threshold (which also turns off its growth). False where the C library is not glibc."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    if not ok:
        log.debug("mallopt(M_MMAP_THRESHOLD) refused: memory after a burst may stay with the process")
    return ok
