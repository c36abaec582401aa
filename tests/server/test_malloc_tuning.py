"""server/malloc_tuning.py: glibc's arenas capped, its mmap threshold held and MKL's
per-thread cache off, in a child process (the settings are process-wide; the test
process keeps its own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Eight threads allocate at once (the server's agent threads); then a 4 MB block is freed
# (glibc would raise its mmap threshold to it) and a 2 MB block taken: it is mmapped (its
# memory returns to the system when freed) only while the threshold stays put.
CHILD = """
import ctypes, json, os, re, sys, threading
sys.path.insert(0, sys.argv[1])
from server.malloc_tuning import tune_allocators

tuned = tune_allocators() if sys.argv[2] == "tuned" else None
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
start = threading.Barrier(8)

def churn():
    start.wait()
    for _ in range(2000):
        libc.free(libc.malloc(4096))

threads = [threading.Thread(target=churn) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
libc.free(libc.malloc(4 << 20))
block = libc.malloc(2 << 20)

class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

libc.mallinfo2.restype = Info
libc.open_memstream.restype = ctypes.c_void_p
buf, size = ctypes.c_char_p(), ctypes.c_size_t()
stream = libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
libc.malloc_info(0, ctypes.c_void_p(stream))
libc.fclose(ctypes.c_void_p(stream))
heaps = len(re.findall("<heap nr=", ctypes.string_at(buf, size.value).decode()))
mkl = os.environ.get("MKL_DISABLE_FAST_MM")
print(json.dumps({"tuned": tuned, "heaps": heaps, "mmapped": libc.mallinfo2().hblkhd, "mkl": mkl}))
"""


def _child(mode: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "MKL_DISABLE_FAST_MM"}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(ROOT), mode],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc only")
def test_threads_share_two_arenas_and_large_blocks_stay_mmapped() -> None:
    tuned = _child("tuned")
    assert tuned["tuned"] is True
    assert tuned["heaps"] <= 2
    assert tuned["mmapped"] >= 2 << 20  # the 2 MB block: returned to the system on free
    assert tuned["mkl"] == "1"  # set before torch loads: MKL reads it when it first runs
    # Without it glibc adds arenas for the contending threads and the 4 MB free raises
    # the threshold past 2 MB (what the test would not notice if the default changed).
    untuned = _child("default")
    assert untuned["heaps"] > 2
    assert untuned["mmapped"] < 2 << 20
    assert untuned["mkl"] is None


def test_a_deployment_choice_of_mkl_cache_is_kept() -> None:
    env = {**os.environ, "MKL_DISABLE_FAST_MM": "0"}
    code = "import os, sys; sys.path.insert(0, sys.argv[1]); from server.malloc_tuning import "
    code += "tune_allocators; tune_allocators(); print(os.environ['MKL_DISABLE_FAST_MM'])"
    out = subprocess.run(
        [sys.executable, "-c", code, str(ROOT)], env=env, capture_output=True, text=True
    )
    assert out.stdout.strip() == "0"
