"""Model and embedder loads cannot race (issue 31): the first routed note of a fresh
server once failed with `cannot import name 'AutoModel' from 'transformers'` while the
policy's model loaded in another thread, and that correction was lost."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from continual_lsp.lanes.routing.embed import MiniLMEmbedder, model_zip_path
from continual_lsp.policy.hf_lock import LOAD_LOCK, loads

needs_minilm = pytest.mark.skipif(model_zip_path() is None, reason="MiniLM package missing")


@needs_minilm
@pytest.mark.slow
def test_an_embedding_that_arrives_during_a_model_load_waits_for_it() -> None:
    started = time.monotonic()
    MiniLMEmbedder().embed(["warm"])  # how long a load takes when nothing else loads
    alone = time.monotonic() - started
    loading, release = threading.Event(), threading.Event()

    @loads
    def model_load() -> None:
        loading.set()
        release.wait(600)

    loader = threading.Thread(target=model_load)
    loader.start()
    assert loading.wait(30)
    out: list[object] = []
    note = threading.Thread(target=lambda: out.append(MiniLMEmbedder().embed(["a note"])))
    note.start()
    note.join(min(60.0, max(3.0, 3 * alone)))
    assert note.is_alive() and not out  # it would have loaded by now: it waits
    release.set()
    loader.join(30)
    note.join(60)
    assert not note.is_alive() and len(out) == 1 and out[0].shape == (1, 384)  # type: ignore[attr-defined]


def test_the_lock_is_reentrant_for_a_load_inside_a_load() -> None:
    @loads
    def inner() -> int:
        return 1

    @loads
    def outer() -> int:
        return inner() + 1

    assert outer() == 2
    assert LOAD_LOCK.acquire(blocking=False)  # released after both
    LOAD_LOCK.release()


SCRIPT = textwrap.dedent(
    """
    import sys, threading
    from continual_lsp.config import EMBEDDED_MODEL
    from continual_lsp.lanes.routing.embed import MiniLMEmbedder
    from continual_lsp.policy.model_files import ModelNotFoundError, load_tokenizer

    start = threading.Barrier(2)
    errors, done = [], []

    def run(name, fn):
        start.wait()
        try:
            fn()
            done.append(name)
        except ModelNotFoundError:
            done.append(name)  # no embedded model here: the embedder half still ran
        except Exception as exc:
            errors.append(f"{name}: {type(exc).__name__}: {exc}")

    threads = [
        threading.Thread(target=run, args=("model", lambda: load_tokenizer(EMBEDDED_MODEL))),
        threading.Thread(target=run, args=("embedder", lambda: MiniLMEmbedder().embed(["x"]))),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(sorted(done), errors)
    sys.exit(1 if errors else 0)
    """
)


@needs_minilm
@pytest.mark.slow
def test_two_threads_loading_at_once_in_a_fresh_process() -> None:
    """Both loads start together in an interpreter where transformers is not imported yet."""
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "['embedder', 'model'] []" in proc.stdout


def test_a_load_that_meets_a_half_done_import_tries_again() -> None:
    calls: list[int] = []

    @loads
    def load() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ImportError("cannot import name 'AutoModel' from 'transformers'")
        return "loaded"

    assert load() == "loaded" and len(calls) == 3


def test_a_missing_package_fails_at_once_and_a_lasting_import_error_in_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from continual_lsp.policy import hf_lock

    calls: list[int] = []

    @loads
    def missing() -> None:
        calls.append(1)
        raise ModuleNotFoundError("No module named 'peft'")

    with pytest.raises(ModuleNotFoundError):
        missing()
    assert len(calls) == 1
    monkeypatch.setattr(hf_lock, "RETRY_S", 0.5)

    @loads
    def broken() -> None:
        raise ImportError("cannot import name 'Nope' from 'transformers'")

    started = time.monotonic()
    with pytest.raises(ImportError):
        broken()
    assert time.monotonic() - started < 5
