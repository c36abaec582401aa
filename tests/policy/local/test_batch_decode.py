"""Every user's decode in one batch (issue 34): each row computes what it would alone."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch

from continual_lsp.config import Settings
from continual_lsp.policy.base import Completion, Message, SampleParams
from continual_lsp.policy.local.batch_decode import open_row, step_rows
from continual_lsp.policy.local.batch_forward import RowCache, batched_forward
from continual_lsp.policy.local.decode import constrained_decode
from continual_lsp.policy.local.local_policy import LocalPolicy
from continual_lsp.policy.local.model_host import ModelHost
from tests.policy.local.support import user_on

pytestmark = pytest.mark.model

TASKS = [
    "Task: the test in tests/test_calc.py fails; fix calc.py",
    "Task: add a docstring to the function add in src/calc/ops.py",
    "Task: rename the variable total to result in main.py",
]


@pytest.fixture(autouse=True)
def _own_prefix_store(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The prompt start kept on disk lives under the user's cache, which outlives a run:
    a store an earlier run filled would answer a warm-up with 0 tokens prefilled."""
    monkeypatch.setenv("CONTINUAL_LSP_CACHE", str(tmp_path))


def _host(model_and_tokenizer: tuple[Any, Any], **limits: Any) -> ModelHost:
    host = ModelHost.private(Settings.model_validate(limits), model_and_tokenizer)
    assert host.enable_batching()
    return host


def _prompt(policy: LocalPolicy, task: str) -> list[int]:
    return policy.renderer.render_prompt([Message(role="user", content=task)])


def _alone(policy: LocalPolicy, prompt: list[int], params: SampleParams) -> Completion:
    """The call decoded the way it was before batching: one user holding the model."""
    grammar = policy.grammar_for(params.tools, params.forbid)
    with policy.exclusive(), policy._skip_zero_adapter():
        return constrained_decode(policy.model, grammar, prompt, params)


def _same(batched: Completion, alone: Completion) -> None:
    assert batched.tokens == alone.tokens
    assert batched.forced == alone.forced
    assert max(abs(a - b) for a, b in zip(batched.logprobs, alone.logprobs, strict=True)) < 1e-4


def test_batched_logits_match_each_row_alone(model_and_tokenizer: tuple[Any, Any]) -> None:
    """Three rows, three adapters (one zero), chunks of 1, 3 and 2 tokens: each row's
    logits are those of the peft model run on that row alone with its adapter live."""
    host = _host(model_and_tokenizer)
    users = [user_on(host, f"u{i}", seed) for i, seed in enumerate((1, None, 2))]
    prompts = [_prompt(u, t) for u, t in zip(users, TASKS, strict=True)]
    chunks = [[90], [28, 3712, 46], [1672, 28]]
    caches, adapters, alone = [], [], []
    with torch.inference_mode():
        for user, prompt, chunk in zip(users, prompts, chunks, strict=True):
            with user.exclusive():
                zero = user._adapter_is_zero()
                out = user.model(input_ids=torch.tensor([prompt]), use_cache=True)
                caches.append(RowCache(out.past_key_values, room=1))  # grows at once
                adapters.append(None if zero else dict(host._lora_params()))
                adapters[-1] = adapters[-1] and {k: v.clone() for k, v in adapters[-1].items()}
                full = user.model(input_ids=torch.tensor([prompt + chunk])).logits[0].float()
                alone.append(full[len(prompt) :])
        assert adapters[1] is None and adapters[0] is not None
        batched = batched_forward(host.model, chunks, caches, adapters)
    for got, want in zip(batched, alone, strict=True):
        assert got.shape == want.shape
        assert torch.allclose(got, want, atol=2e-4, rtol=1e-4)
    assert not torch.allclose(batched[0], alone[2], atol=1e-2)  # rows really differ
    assert [c.length for c in caches] == [
        len(p) + len(c) for p, c in zip(prompts, chunks, strict=True)
    ]


@pytest.mark.parametrize("budget", [1 << 30, 40])
def test_rows_join_and_leave_mid_batch(model_and_tokenizer: tuple[Any, Any], budget: int) -> None:
    """A short call leaves the batch, a new one joins at the next step; every row's
    tokens and log-probs are its single-row decode's, each under its own adapter and
    grammar (one row may only read, one samples at a temperature with a seed). Its
    prompt is prefilled in the batch: whole, or in pieces of at most `budget` tokens
    beside the other rows' steps."""
    host = _host(model_and_tokenizer)
    users = [user_on(host, f"u{i}", seed) for i, seed in enumerate((3, 4, None))]
    params = [
        SampleParams(temperature=0.0, max_tokens=48),
        SampleParams(temperature=0.0, max_tokens=16, tools=["read"]),
        SampleParams(temperature=0.8, max_tokens=40, seed=7),
    ]
    prompts = [_prompt(u, t) for u, t in zip(users, TASKS, strict=True)]
    want = [_alone(u, p, q) for u, p, q in zip(users, prompts, params, strict=True)]
    assert want[0].tokens != want[2].tokens

    def row(i: int) -> Any:
        user = users[i]
        with user.exclusive():
            zero = user._adapter_is_zero()
            adapter = None if zero else {k: v.clone() for k, v in host._lora_params()}
            grammar = user.grammar_for(params[i].tools)
            return open_row(user.model, grammar, prompts[i], params[i], lambda: adapter)

    rows = [first_row := row(0), second_row := row(1)]
    assert all(r.prefill and not r.done for r in rows)
    finished: dict[int, Completion] = {}
    joined = False
    prefilling = 0  # steps that fed a prompt
    with host.lock:
        while rows:
            prefilling += any(r.prefill for r in rows)
            for done in step_rows(host.model, rows, budget):
                finished[id(done)] = done.finish()
            left = [r for r in rows if r.done]
            rows = [r for r in rows if not r.done]
            if left and not joined:
                assert len(rows) == 1  # the short row left while the long one runs
                third = row(2)
                rows.append(third)
                joined = True
    assert joined
    assert prefilling > len(prompts[0]) // 40 if budget == 40 else prefilling == 2  # + the joiner
    first, second, third_done = (finished[id(r)] for r in (first_row, second_row, third))
    for got, alone in zip((first, second, third_done), want, strict=True):
        _same(got, alone)


def test_users_at_once_each_get_their_own_call(model_and_tokenizer: tuple[Any, Any]) -> None:
    """Three users sample at once through the host's scheduler, with room for one
    adapter in memory (the others would be spilled): the steps were shared, and each
    user got the call it decodes alone, twice (the second from its prompt cache). The
    prompt-cache bound holds all three caches: under the default 16 MB, which user's
    cache survives depends on which row finished last (CI saw none of the first two)."""
    host = _host(model_and_tokenizer, max_resident_adapters=1, max_prompt_cache_mb=256)
    users = [user_on(host, f"u{i}", seed) for i, seed in enumerate((5, 6, 7))]
    params = SampleParams(temperature=0.0, max_tokens=40)
    prompts = [_prompt(u, t) for u, t in zip(users, TASKS, strict=True)]
    want = [_alone(u, p, params) for u, p in zip(users, prompts, strict=True)]
    assert len({tuple(w.tokens) for w in want}) == 3
    got: dict[int, list[Completion]] = {}
    barrier = threading.Barrier(len(users))

    def run(i: int) -> None:
        barrier.wait()
        got[i] = [users[i].sample(prompts[i], params) for _ in range(2)]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(users))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert host.scheduler is not None and host.scheduler.max_rows >= 2
    for i, alone in enumerate(want):
        for completion in got[i]:
            _same(completion, alone)
    assert all(slot.pins == 0 for slot in host._slots)
    assert all(user.prompt_cache.hits >= 1 for user in users)


def test_a_warmed_prompt_cache_serves_the_first_task(model_and_tokenizer: tuple[Any, Any]) -> None:
    """The prompt's fixed start, prefilled at connect under the user's adapter, is what
    the first task reuses; the call is the one decoded from a cold cache."""
    host = _host(model_and_tokenizer)
    user = user_on(host, "u0", seed=8)
    params = SampleParams(temperature=0.0, max_tokens=40)
    prompt = _prompt(user, TASKS[1])
    want = _alone(user, prompt, params)
    warmed = user.warm_prompt()
    assert 100 < warmed < len(prompt)
    assert user.warm_prompt() == 0  # already held
    hits = user.prompt_cache.hits
    got = user.sample(prompt, params)
    assert user.prompt_cache.hits == hits + 1  # the task's
    assert user.prompt_cache.reused_tokens >= warmed - 1
    _same(got, want)
    user.prompt_cache.clear()
    assert user.warm_prompt() == 0  # a call was sampled: its prefill covered the prefix


def test_a_new_version_waits_for_the_call_in_flight(model_and_tokenizer: tuple[Any, Any]) -> None:
    """A version loaded (here: the adapter reset) while the user's call decodes lands
    after it: the call is the one its starting weights decode, not a mix of two."""
    host = _host(model_and_tokenizer)
    user = user_on(host, "u0", seed=9)
    params = SampleParams(temperature=0.0, max_tokens=48)
    prompt = _prompt(user, TASKS[0])
    want = _alone(user, prompt, params)
    got: list[Completion] = []
    with host.lock:  # no step runs until the reset is waiting
        sampler = threading.Thread(target=lambda: got.append(user.sample(prompt, params)))
        sampler.start()
        while not user._slot.pins:
            host._unpinned.wait(0.01)
        loader = threading.Thread(target=user.load_adapter, args=("",))
        loader.start()
        while host._waiting < 1 and loader.is_alive():  # it waits for the lock
            host._unpinned.wait(0.01)
    sampler.join(300)
    loader.join(300)
    _same(got[0], want)
    with user.exclusive():
        assert user._adapter_is_zero()  # the reset did land, after the call


def test_a_warm_up_never_clears_another_users_cache(model_and_tokenizer: tuple[Any, Any]) -> None:
    """Twenty editors connecting at once must not prefill twenty system prompts the
    prompt-cache bound then drops: past the bound's room, a warm-up does nothing."""
    host = _host(model_and_tokenizer, max_prompt_cache_mb=16.0)
    first, second = user_on(host, "u0", seed=10), user_on(host, "u1", seed=11)
    assert first.warm_prompt() > 100  # ~13 MB of float32 K/V of 16
    assert second.warm_prompt() == 0
    assert first.prompt_cache.entries and not second.prompt_cache.entries


def test_a_fresh_policy_reads_the_prompt_start_from_disk(
    model_and_tokenizer: tuple[Any, Any], tmp_path: Any
) -> None:
    """A restarted server (a new policy on the same weights) prefills none of the prompt
    start another process kept, and decodes the call a cold cache decodes; the training
    worker keeps a new version's once."""
    host = _host(model_and_tokenizer)
    first = user_on(host, "u0", seed=12)
    assert first.warm_prompt() > 100
    kept = tmp_path / "prompt-prefixes"
    assert len(list(kept.glob("*.safetensors"))) == 1
    second = user_on(host, "u1", seed=12)  # the same weights, loaded again
    params = SampleParams(temperature=0.0, max_tokens=40)
    prompt = _prompt(second, TASKS[2])
    want = _alone(second, prompt, params)
    assert second.warm_prompt() == 0
    assert second.prompt_cache.entries
    _same(second.sample(prompt, params), want)
    second.prompt_cache.clear()  # dropped by the memory bound: read back, not prefilled
    hits = second.prompt_cache.hits
    _same(second.sample(prompt, params), want)
    assert second.prompt_cache.hits == hits + 1
    other = user_on(host, "u2", seed=13)
    assert other.keep_prompt_prefix()
    assert not other.keep_prompt_prefix()  # on disk already
    assert not other.prompt_cache.entries  # the worker keeps nothing in memory
    assert len(list(kept.glob("*.safetensors"))) == 2
