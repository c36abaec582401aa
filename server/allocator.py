"""glibc malloc settings for a server that samples from threads (issue 20).

The server's agent threads (`AGENT_THREADS`) each run their users' turns on the shared
model, one at a time. glibc gives every thread that meets contention an arena of its own
(up to 8 per core), and freed memory stays in the arena it came from: each turn's
temporaries (K/V grown token by token, logits, activations) were kept by up to eight
arenas at once. glibc also raises its mmap threshold each time a large block is freed
(up to 32 MB), after which tensor-sized blocks come from those arenas too and fragment
them. Measured in bench/team.py's load (20 users over TCP, 8 asking at once, one round
each): 16 arenas holding up to 490 MB of free chunks, RSS peaking at 1322 MB; with two
arenas and the threshold held at glibc's default, 2 arenas, ~70 MB free, peak 1236 MB.

Set once at start, before torch loads and before any thread runs: `mallopt` changes
the live allocator (the `MALLOC_ARENA_MAX` environment variable is read only when a
process starts). Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameters (malloc.h)
M_ARENA_MAX = -8
ARENAS = 2  # one for the event loop and connections, one shared by the agent threads
MMAP_THRESHOLD = 128 * 1024  # glibc's initial value; setting it keeps it from rising


def tune_malloc() -> bool:
    """Cap glibc's arenas and fix its mmap threshold; False where that is not possible."""
    with contextlib.suppress(OSError, AttributeError, TypeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(
            libc.mallopt(M_ARENA_MAX, ARENAS) and libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        )
    return False
