"""Allocator settings for a server that samples from threads (issue 20).

The server's agent threads (`AGENT_THREADS`) each run their users' turns on the shared
model, one at a time, and memory freed by one turn was kept per thread:

- glibc gives every thread that meets contention an arena of its own (up to 8 per core),
  and freed memory stays in the arena it came from; it also raises its mmap threshold
  each time a large block is freed (up to 32 MB), after which tensor-sized blocks come
  from those arenas and fragment them. Measured in bench/team.py's load (20 users over
  TCP, 8 asking at once): 16 arenas holding up to 490 MB of free chunks.
- MKL (torch's BLAS on x86) caches the buffers of its matrix products per thread ("fast
  memory manager") and frees them only when the thread ends, which the pool's never do.
  Measured: eight threads each running proposals in turn left RSS 95 MB higher than one
  thread did (992 -> 1087 MB); without the cache, 4 MB higher (981 -> 985 MB), at the
  same decode speed on this machine (1.31-1.38 s a 20-token call either way).

So, once at start, before torch loads (MKL reads its variable when it first runs) and
before any agent thread exists: two arenas, the mmap threshold fixed at 1 MB (`mallopt`
changes the live allocator; `MALLOC_ARENA_MAX` is read only when a process starts), and
MKL's cache off unless the environment already chose. At glibc's default 128 KB every
per-layer K/V tensor a decode step grows (~230 KB) was a fresh mmap: one call took
~1.9-2.3 s instead of ~1.3-1.6 s. In bench/team.py's load phase (one run each):
two arenas and a 128 KB threshold, peak 1196 MB; MKL's cache off too, 1110 MB; with the
threshold at 1 MB instead, 1149 MB. Elsewhere than glibc the `mallopt` part does
nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameters (malloc.h)
M_ARENA_MAX = -8
ARENAS = 2  # one for the event loop and connections, one shared by the agent threads
MMAP_THRESHOLD = 1 << 20  # fixed, so that glibc does not raise it (up to 32 MB)


def tune_allocators() -> bool:
    """MKL's per-thread cache off; glibc's arenas capped and its mmap threshold fixed.
    Returns False where glibc could not be told."""
    os.environ.setdefault("MKL_DISABLE_FAST_MM", "1")
    with contextlib.suppress(OSError, AttributeError, TypeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(
            libc.mallopt(M_ARENA_MAX, ARENAS) and libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        )
    return False
