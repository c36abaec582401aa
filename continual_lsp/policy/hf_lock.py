"""One lock for loading Hugging Face code and weights in this process.

transformers exposes its classes through a lazy module: the first `from transformers
import AutoModel` imports the submodule and fills in the attribute, and two threads doing
that at once can find it half done (`ImportError: cannot import name 'AutoModel' from
'transformers'`). The server loads the policy's model in a loader thread while the first
note may route on another, through the lanes' embedder: that correction was lost.

So every model load (the policy's, a tokenizer's, the embedder's) runs under `LOAD_LOCK`,
and the first one resolves, under it, every transformers name this process imports
lazily later (`warm_imports`): after that a lazy import is an attribute read. A
correction that arrives while a model loads waits for the load, then routes.

A module that imports transformers or peft at its top (`policy.model_host`, imported by
the server's preload thread) does so outside the lock; a load that meets that import
half done ("cannot import name …") waits and tries again (`RETRY_S`) instead of failing.
"""

from __future__ import annotations

import functools
import importlib
import logging
import threading
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

log = logging.getLogger(__name__)

# Reentrant: a load may call another (the starter loads the base model first).
LOAD_LOCK = threading.RLock()
# How long a load retries an import another thread has half done (a cold import of
# transformers and peft takes tens of seconds on a loaded 2-core machine).
RETRY_S = 60.0

# (module, name) pairs imported lazily somewhere in the process (policy, lanes, learning).
_LAZY_NAMES = [
    ("transformers", "AutoConfig"),
    ("transformers", "AutoModel"),
    ("transformers", "AutoModelForCausalLM"),
    ("transformers", "AutoTokenizer"),
    ("transformers", "DynamicCache"),
    ("transformers.cache_utils", "DynamicLayer"),
    ("transformers.models.auto.modeling_auto", "MODEL_FOR_CAUSAL_LM_MAPPING"),
]
_warm = False

P = ParamSpec("P")
R = TypeVar("R")


def warm_imports() -> None:
    """Resolve the lazily imported transformers names once (under `LOAD_LOCK`)."""
    global _warm
    with LOAD_LOCK:
        if _warm:
            return
        for module, name in _LAZY_NAMES:
            # A name this transformers version lacks is looked up where it is used.
            getattr(importlib.import_module(module), name, None)
        _warm = True


def loads(fn: Callable[P, R]) -> Callable[P, R]:
    """Run `fn` (a model or tokenizer load) under `LOAD_LOCK`, imports warmed first."""

    @functools.wraps(fn)
    def locked(*args: P.args, **kwargs: P.kwargs) -> R:
        deadline = time.monotonic() + RETRY_S
        pause = 0.1
        while True:
            try:
                with LOAD_LOCK:
                    warm_imports()
                    return fn(*args, **kwargs)
            except ModuleNotFoundError:
                raise  # not installed: no wait makes it appear
            except ImportError as exc:
                # Another thread is importing the module outside the lock; its names
                # appear when that import ends.
                if time.monotonic() + pause > deadline:
                    raise
                log.info("%s: %s; trying again in %.1f s", fn.__qualname__, exc, pause)
            time.sleep(pause)
            pause = min(pause * 2, 2.0)

    return locked
