"""Several users' policies on one loaded model (issue 20): each sees only its own adapter."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from continual_lsp.config import Settings
from continual_lsp.policy.base import Completion, Message, SampleParams
from continual_lsp.policy.local.local_policy import LocalPolicy
from continual_lsp.policy.local.model_host import MB, ModelHost, prompt_cache_bytes
from tests.policy.local.support import user_on

pytestmark = pytest.mark.model

GREEDY = SampleParams(temperature=0.0, max_tokens=40)


def _host(model_and_tokenizer: tuple[Any, Any], **limits: float) -> ModelHost:
    return ModelHost.private(Settings.model_validate(limits), model_and_tokenizer)


def _prompt(policy: LocalPolicy) -> list[int]:
    task = "Task: the test in tests/test_calc.py fails; fix calc.py"
    return policy.renderer.render_prompt([Message(role="user", content=task)])


def _fresh_logprobs(policy: LocalPolicy, prompt: list[int], probe: list[int]) -> list[float]:
    """Scored from a full prefill: a prompt-cache hit sums in another order (~1e-6 off),
    and these tests compare scores exactly."""
    policy.prompt_cache.clear()
    return policy.logprobs(prompt, probe)


def _run(
    policy: LocalPolicy, prompt: list[int], probe: list[int]
) -> tuple[Completion, list[float]]:
    return policy.sample(prompt, GREEDY), _fresh_logprobs(policy, prompt, probe)


def test_two_users_interleaved_each_get_their_own_adapter(
    model_and_tokenizer: tuple[Any, Any],
) -> None:
    host = _host(model_and_tokenizer)
    alice, bob = user_on(host, "alice", seed=1), user_on(host, "bob", seed=None)
    prompt = _prompt(alice)
    probe = alice.renderer.tokenize('{"tool": "read", "arguments": {"path": "calc.py"}}')
    alone_alice = _run(alice, prompt, probe)
    alone_bob = _run(bob, prompt, probe)
    assert alone_alice[0].tokens != alone_bob[0].tokens  # the adapters really differ
    assert alone_alice[1] != alone_bob[1]
    for _ in range(2):  # interleaved: each call finds the other user's adapter live
        alice_now, bob_now = _run(alice, prompt, probe), _run(bob, prompt, probe)
        assert alice_now[0].tokens == alone_alice[0].tokens
        assert alice_now[1] == alone_alice[1]
        assert bob_now[0].tokens == alone_bob[0].tokens
        assert bob_now[1] == alone_bob[1]
    # Bob's fresh adapter is the base model.
    assert bob.reference_logprobs(prompt, probe) == alone_bob[1]


def test_concurrent_users_never_see_each_others_adapter(
    model_and_tokenizer: tuple[Any, Any],
) -> None:
    host = _host(model_and_tokenizer)
    users = [user_on(host, f"user{i}", seed=i) for i in range(3)]
    prompt = _prompt(users[0])
    probe = users[0].renderer.tokenize('{"tool": "glob", "arguments": {"pattern": "*.py"}}')
    alone = [_fresh_logprobs(u, prompt, probe) for u in users]
    assert len({tuple(a) for a in alone}) == 3
    seen: list[list[tuple[int, list[float]]]] = [[] for _ in users]

    def work(i: int) -> None:
        for _ in range(4):
            # Each user's prompt cache is its own, so clearing it races with no one.
            seen[i].append((i, _fresh_logprobs(users[i], prompt, probe)))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(users))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(scores == alone[i] for row in seen for i, scores in row)
    assert sum(len(row) for row in seen) == 12


def test_adapters_past_the_limit_go_to_disk_and_come_back_exact(
    model_and_tokenizer: tuple[Any, Any],
) -> None:
    host = _host(model_and_tokenizer, max_resident_adapters=1)
    users = [user_on(host, f"user{i}", seed=10 + i) for i in range(3)]
    prompt = _prompt(users[0])
    probe = users[0].renderer.tokenize('{"tool": "bash"')
    first = [_fresh_logprobs(u, prompt, probe) for u in users]
    assert host.resident == 1 and host.spills >= 2
    again = [_fresh_logprobs(u, prompt, probe) for u in users]
    assert again == first
    assert host.reloads >= 2
    assert host.resident == 1


def _storages(tensors: Any) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors}


def test_each_resident_adapter_is_held_once(model_and_tokenizer: tuple[Any, Any]) -> None:
    """The live adapter's weights are the model's LoRA tensors, and no copy of them stays
    in its slot: two resident adapters take two adapters' memory, not three."""
    host = _host(model_and_tokenizer, max_resident_adapters=2)
    users = [user_on(host, f"user{i}", seed=20 + i) for i in range(3)]
    for user in [*users, users[0], users[1]]:  # user2 spilled, user0 resident, user1 live
        with user.exclusive():
            pass
    live = _storages(param for _, param in host._lora_params())
    held = [_storages(u._slot.state.values()) for u in users if u._slot.state is not None]
    assert host.resident == 2
    assert len(held) == 1  # user0's; user1's are the model's, user2's on disk
    assert len(held[0]) == len(live) and not held[0] & live
    assert not _storages(host._initial.values()) & live


def test_training_one_user_leaves_the_other_alone(
    model_and_tokenizer: tuple[Any, Any],
) -> None:
    from continual_lsp.policy.base import Datum

    host = _host(model_and_tokenizer)
    alice, bob = user_on(host, "alice", seed=None), user_on(host, "bob", seed=None)
    prompt = _prompt(alice)
    probe = alice.renderer.tokenize('{"tool": "grep"')
    before = _fresh_logprobs(bob, prompt, probe)
    assert alice.logprobs(prompt, probe) == before  # both fresh
    datum = Datum(prompt_tokens=prompt, completion_tokens=probe)
    alice.train_step([datum], "cross_entropy", lr=1e-2)
    # Through alice's prompt cache, filled before the step: it must not serve old K/V.
    trained = alice.logprobs(prompt, probe)
    assert sum(trained) > sum(before) + 0.1  # cross-entropy raised the probe's log-prob
    assert _fresh_logprobs(alice, prompt, probe) == trained
    assert _fresh_logprobs(bob, prompt, probe) == before


def test_prompt_caches_are_bounded_across_users(model_and_tokenizer: tuple[Any, Any]) -> None:
    host = _host(model_and_tokenizer, max_prompt_caches=1)
    alice, bob = user_on(host, "alice", seed=None), user_on(host, "bob", seed=None)
    prompt = _prompt(alice)
    probe = alice.renderer.tokenize('{"tool": "read"')
    alice.logprobs(prompt, probe)
    assert alice.prompt_cache.entries
    bob.logprobs(prompt, probe)
    assert bob.prompt_cache.entries and not alice.prompt_cache.entries


def test_prompt_caches_are_bounded_by_bytes_least_recently_used_first(
    model_and_tokenizer: tuple[Any, Any],
) -> None:
    """The count allows ten; the bytes allow one and a half caches of this prompt."""
    host = _host(model_and_tokenizer, max_prompt_caches=10)
    alice, bob, carol = (user_on(host, name, seed=None) for name in ("alice", "bob", "carol"))
    prompt = _prompt(alice)
    probe = alice.renderer.tokenize('{"tool": "read"')
    alice.logprobs(prompt, probe)
    size = prompt_cache_bytes(alice.prompt_cache)
    assert size > 1 * MB  # K/V of the prompt: ~45 KB a token
    host.max_prompt_cache_bytes = int(2.5 * size)
    bob.logprobs(prompt, probe)
    assert alice.prompt_cache.entries and bob.prompt_cache.entries  # 2 sizes fit
    alice.logprobs(prompt, probe)  # alice is now the more recently used
    carol.logprobs(prompt, probe)  # 3 sizes do not fit: the least recently used goes
    assert not bob.prompt_cache.entries
    assert alice.prompt_cache.entries and carol.prompt_cache.entries
    assert host.prompt_cache_bytes == 2 * size
    # Below one cache's size, the turn that runs keeps its own; every other goes.
    host.max_prompt_cache_bytes = size // 2
    bob.logprobs(prompt, probe)
    assert bob.prompt_cache.entries
    assert not alice.prompt_cache.entries and not carol.prompt_cache.entries
    assert host.prompt_cache_bytes == size


class _CheckedLock:
    """The host's lock, recording at each outermost release which users' prompt caches
    hold entries: what another thread finds when it takes the model next."""

    def __init__(self, users: list[LocalPolicy]) -> None:
        self._lock = threading.RLock()
        self._depth = 0
        self.users = users
        self.seen: list[list[str]] = []

    def __enter__(self) -> None:
        self._lock.acquire()
        self._depth += 1

    def __exit__(self, *_: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            self.seen.append([u.settings.user for u in self.users if u.prompt_cache.entries])
        self._lock.release()


@pytest.mark.parametrize("call", ["sample", "logprobs"])
def test_prompt_caches_are_bounded_before_the_model_is_released(
    model_and_tokenizer: tuple[Any, Any], call: str
) -> None:
    """With eight users waiting on one model, a cache noted after the release stays past
    the bound while the others' turns run: the bound must hold at every release."""
    host = _host(model_and_tokenizer, max_prompt_caches=1)
    alice, bob = user_on(host, "alice", seed=None), user_on(host, "bob", seed=None)
    lock = _CheckedLock([alice, bob])
    host.lock = lock  # type: ignore[assignment]
    prompt = _prompt(alice)
    probe = alice.renderer.tokenize('{"tool": "read"')
    for user in (alice, bob, alice):
        if call == "sample":
            user.sample(prompt, GREEDY)
        else:
            user.logprobs(prompt, probe)
    assert lock.seen[-1] == ["alice"]
    assert all(len(holding) <= 1 for holding in lock.seen), lock.seen
