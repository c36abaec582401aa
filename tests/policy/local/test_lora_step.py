"""LoRA train_step, prefix KV cache and adapter files on the real embedded model (CPU).

Prompts use a one-line system prompt (~40 tokens) so every forward pass is short.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from continual_lsp.config import Settings
from continual_lsp.policy import adapter_registry, losses
from continual_lsp.policy.base import Datum, Message
from continual_lsp.policy.local import adapter_files, kv_cache, lora_step
from continual_lsp.policy.local.local_policy import LocalPolicy
from continual_lsp.policy.render import ChatMLRenderer
from continual_lsp.tools.base import ToolCall

pytestmark = pytest.mark.model

SYSTEM = "Reply with exactly one JSON tool call."
TASK = "Fix add() in src/calc/ops.py: line 3 returns a - b."
CALL = ToolCall(
    tool="edit_lines",
    arguments={"path": "src/calc/ops.py", "start": 3, "end": 3, "content": "    return a + b"},
)


@pytest.fixture
def policy(model_and_tokenizer: tuple[Any, Any], tmp_path: Path) -> LocalPolicy:
    # float32 passes, so the exactness checks hold on every CPU: "auto" picks bf16
    # autocast where the CPU has it natively (the ratio of a first step was 0.995 there);
    # the bf16 pass has a test of its own below.
    settings = Settings(adapters_dir=str(tmp_path / "adapters"), train_dtype="float32")
    return LocalPolicy(settings, model_and_tokenizer)


def situation(policy: LocalPolicy) -> tuple[list[int], list[int]]:
    prompt = ChatMLRenderer(policy.tokenizer, system_prompt=SYSTEM).render_prompt(
        [Message(role="user", content=TASK)]
    )
    return prompt, policy.renderer.render_call(CALL)


def datum(policy: LocalPolicy, prompt: list[int], call: list[int], adv: float = 1.0) -> Datum:
    return Datum(
        prompt_tokens=prompt,
        completion_tokens=call,
        advantages=[adv] * len(call),
        old_logprobs=policy.logprobs(prompt, call),
    )


def lora_grad(
    policy: LocalPolicy, prompt: list[int], call: list[int], use_prefix_cache: bool
) -> tuple[float, torch.Tensor]:
    policy.model.zero_grad(set_to_none=True)
    logits = lora_step.completion_logits(
        policy, prompt, call, grad=True, use_prefix_cache=use_prefix_cache
    )
    logp = losses.selective_log_softmax(logits, torch.tensor(call))
    adv = torch.linspace(-1.0, 1.0, len(call))
    loss = losses.masked_mean(losses.clamped_is_surrogate(logp, logp.detach(), adv).loss)
    loss.backward()
    grad = torch.cat([p.grad.flatten() for p in lora_step.trainable_parameters(policy.model)])
    policy.model.zero_grad(set_to_none=True)
    return float(loss.detach()), grad


def test_scores_match_the_policy_and_the_prefix_cache_is_exact(policy: LocalPolicy) -> None:
    prompt, call = situation(policy)
    expected = policy.logprobs(prompt, call)
    cached = lora_step.token_logprobs(policy, prompt, call)
    again = lora_step.token_logprobs(policy, prompt, call)  # served from the cache
    assert cached == pytest.approx(expected, abs=1e-4)
    assert again == cached
    ref = lora_step.token_logprobs(policy, prompt, call, kv_cache.REFERENCE)
    assert ref == pytest.approx(policy.reference_logprobs(prompt, call), abs=1e-4)


def test_step_trains_only_lora_and_leaves_the_reference_unchanged(policy: LocalPolicy) -> None:
    prompt, call = situation(policy)
    base_before = {
        n: p.detach().clone() for n, p in policy.model.named_parameters() if "lora_" not in n
    }
    ref_before = policy.reference_logprobs(prompt, call)
    before = policy.logprobs(prompt, call)
    metrics = policy.train_step(
        [datum(policy, prompt, call)], "importance_sampling", 1e-3, kl_coef=0.05
    )
    assert math.isfinite(metrics.loss) and metrics.tokens == len(call)
    assert metrics.mean_ratio == pytest.approx(1.0, abs=1e-3) and metrics.clipped_fraction == 0.0
    assert metrics.mean_advantage == pytest.approx(1.0)
    after = policy.logprobs(prompt, call)
    assert sum(after) > sum(before)  # positive advantages push the call up
    assert policy.reference_logprobs(prompt, call) == ref_before
    for name, param in policy.model.named_parameters():
        if "lora_" not in name:
            assert torch.equal(param, base_before[name]), name
    kl = lora_step.kl_to_reference(policy, prompt, call)
    assert all(k >= -1e-6 for k in kl)
    assert 0 < sum(kl) / len(kl) < 1.0  # moved, and not far


def test_optimizer_is_kept_across_steps_per_lr(policy: LocalPolicy) -> None:
    prompt, call = situation(policy)
    policy.train_step([datum(policy, prompt, call)], "cross_entropy", 1e-3)
    opt = policy.train_state.optimizers[1e-3]
    policy.train_step([datum(policy, prompt, call)], "cross_entropy", 1e-3)
    assert policy.train_state.optimizers[1e-3] is opt
    assert policy.train_state.steps == 2


def test_stale_behaviour_policy_is_clamped(policy: LocalPolicy) -> None:
    prompt, call = situation(policy)
    d = datum(policy, prompt, call, adv=0.5)
    stale = d.model_copy(update={"old_logprobs": [x - 3.0 for x in d.old_logprobs]})  # ratio e^3
    # The gradient through the model equals the clamped form −2·adv·∇log π.
    policy.model.zero_grad(set_to_none=True)
    logits = lora_step.completion_logits(policy, prompt, call, grad=True)
    logp = losses.selective_log_softmax(logits, torch.tensor(call))
    old = torch.tensor(stale.old_logprobs)
    adv = torch.tensor(stale.advantages)
    losses.masked_mean(losses.clamped_is_surrogate(logp, old, adv, 0.5, 2.0).loss).backward()
    g_surrogate = [p.grad.clone() for p in lora_step.trainable_parameters(policy.model)]
    policy.model.zero_grad(set_to_none=True)
    logits = lora_step.completion_logits(policy, prompt, call, grad=True)
    logp = losses.selective_log_softmax(logits, torch.tensor(call))
    (-(2.0 * adv * logp).mean()).backward()
    for a, p in zip(g_surrogate, lora_step.trainable_parameters(policy.model), strict=True):
        assert torch.allclose(a, p.grad, atol=1e-6, rtol=1e-4)
    policy.model.zero_grad(set_to_none=True)
    metrics = policy.train_step([stale], "importance_sampling", 1e-3)
    assert metrics.clipped_fraction == 1.0
    assert metrics.mean_ratio == pytest.approx(math.exp(3.0), rel=1e-2)
    assert math.isfinite(metrics.loss)


def test_warm_prefix_serves_the_next_step_under_the_new_weights(policy: LocalPolicy) -> None:
    prompt, call = situation(policy)
    policy.train_step([datum(policy, prompt, call)], "importance_sampling", 2e-3)
    state = policy.train_state
    assert not [e for e in state.prefix if e.weights != kv_cache.REFERENCE]  # a step drops them
    kv_cache.warm_prefix(policy, prompt)
    (entry,) = [e for e in state.prefix if e.weights != kv_cache.REFERENCE]
    assert entry.tokens == tuple(prompt[:-1]) and entry.generation == state.generation
    # The next turn's prompt extends this one: scoring it starts from the warm entry and
    # gives what an uncached forward gives.
    longer = prompt + policy.renderer.render_call(CALL)[:-1] + prompt[-3:]
    cached = lora_step.completion_logits(policy, longer, call)
    full = lora_step.completion_logits(policy, longer, call, use_prefix_cache=False)
    assert torch.allclose(cached, full, atol=2e-3)
    assert any(e.tokens == tuple(longer[:-1]) for e in state.prefix)


def test_prefix_gradient_drop_is_small(policy: LocalPolicy) -> None:
    """Prefix-cached vs full backprop: the loss is identical, the gradient well aligned.

    The numbers quoted in lora_step.py's docstring come from this comparison.
    """
    prompt, call = situation(policy)
    for _ in range(2):  # a fresh adapter (B = 0), then after one step
        loss_full, g_full = lora_grad(policy, prompt, call, use_prefix_cache=False)
        loss_cached, g_cached = lora_grad(policy, prompt, call, use_prefix_cache=True)
        assert loss_cached == pytest.approx(loss_full, abs=1e-5)
        cos = float(torch.nn.functional.cosine_similarity(g_full, g_cached, dim=0))
        print(f"cos {cos:.3f} rel {float((g_full - g_cached).norm() / g_full.norm()):.3f}")
        assert cos > 0.5
        policy.train_step([datum(policy, prompt, call)], "importance_sampling", 1e-3)


def test_full_backprop_mode_takes_the_same_step_loss(policy: LocalPolicy) -> None:
    prompt, call = situation(policy)
    d = datum(policy, prompt, call)
    full = lora_step.train_step(policy, [d], "cross_entropy", 1e-3, kl_coef=0.1, prefix_cache=False)
    adapter_files.reset_adapter(policy)
    cached = lora_step.train_step(policy, [d], "cross_entropy", 1e-3, kl_coef=0.1)
    assert cached.loss == pytest.approx(full.loss, abs=1e-4)


def test_topk_distill_step(policy: LocalPolicy) -> None:
    prompt, call = situation(policy)
    teacher = torch.log_softmax(lora_step.completion_logits(policy, prompt, call).float(), -1)
    # A sharpened teacher: its top-k concentrates on the call's tokens.
    target = torch.nn.functional.one_hot(torch.tensor(call), teacher.shape[-1]).float() * 5.0
    teacher = torch.log_softmax(teacher + target, -1)
    values, ids = torch.topk(teacher, 8, dim=-1)
    d = Datum(
        prompt_tokens=prompt,
        completion_tokens=call,
        old_logprobs=policy.logprobs(prompt, call),
        teacher_topk_ids=ids.tolist(),
        teacher_topk_logprobs=values.tolist(),
    )
    before = sum(policy.logprobs(prompt, call))
    metrics = policy.train_step([d], "topk_distill", 1e-3, kl_coef=0.05)
    assert math.isfinite(metrics.loss) and metrics.loss > 0
    assert sum(policy.logprobs(prompt, call)) > before

    # Loss weights scale the distillation term per position (0 = not trained on).
    muted = d.model_copy(update={"loss_weights": [0.0] * len(call), "old_logprobs": []})
    assert policy.train_step([muted], "topk_distill", 1e-3, kl_coef=0.0).loss == 0.0
    with pytest.raises(ValueError, match="loss_weights"):
        policy.train_step([d.model_copy(update={"loss_weights": [1.0]})], "topk_distill", 1e-3)


def test_adapter_versions_round_trip_and_revert_exactly(
    policy: LocalPolicy, tmp_path: Path
) -> None:
    prompt, call = situation(policy)
    directory = tmp_path / "versions"
    base = policy.logprobs(prompt, call)
    policy.train_step([datum(policy, prompt, call)], "importance_sampling", 2e-3)
    v1 = adapter_files.save_adapter(policy, "v0001", directory)
    lp1 = policy.logprobs(prompt, call)
    policy.train_step([datum(policy, prompt, call)], "importance_sampling", 2e-3)
    v2 = adapter_files.save_adapter(policy, "v0002", directory)
    lp2 = policy.logprobs(prompt, call)
    assert lp1 != lp2 != base

    adapter_files.load_adapter(policy, v1.path, v1.sha256)  # revert to v(n−1)
    assert policy.logprobs(prompt, call) == lp1  # exactly, not approximately
    assert policy.adapter_version == "v0001"
    adapter_files.load_adapter(policy, Path(v2.path) / adapter_registry.ADAPTER_FILE, v2.sha256)
    assert policy.logprobs(prompt, call) == lp2
    adapter_files.reset_adapter(policy)
    assert policy.logprobs(prompt, call) == base

    with pytest.raises(adapter_files.AdapterIntegrityError):
        adapter_files.load_adapter(policy, v1.path, "0" * 64)
    with pytest.raises(FileExistsError):
        adapter_files.save_adapter(policy, "v0001", directory)
    listed = adapter_files.list_adapters(directory)
    assert [a.name for a in listed] == ["v0001", "v0002"]
    assert [a.sha256 for a in listed] == [v1.sha256, v2.sha256]
    assert sorted(p.name for p in directory.iterdir()) == ["v0001", "v0002"]
    # Through the LocalPolicy protocol methods (they delegate here).
    policy.load_adapter(str(Path(v1.path)))
    assert policy.logprobs(prompt, call) == lp1


def test_a_save_that_dies_leaves_no_version(
    policy: LocalPolicy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "versions"

    def broken(state: dict[str, torch.Tensor], path: str, metadata: dict[str, str]) -> None:
        Path(path).write_bytes(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(adapter_files, "save_file", broken)
    with pytest.raises(OSError):
        adapter_files.save_adapter(policy, "v0001", directory)
    assert list(directory.iterdir()) == []
    assert adapter_files.list_adapters(directory) == []
    (directory / ".partial-left-by-kill").mkdir()
    assert adapter_files.clean_partial(directory) == 1


def test_a_rehearsal_datum_keeps_no_prefix_and_takes_no_kl(policy: LocalPolicy) -> None:
    """A starter anchor rides in the step for its own loss only: its prompt's K/V would
    evict the job's from the few entries kept, and a reference pass would double it."""
    prompt, call = situation(policy)
    rehearsal = datum(policy, prompt, call).model_copy(update={"rehearsal": True})
    metrics = policy.train_step([rehearsal], "importance_sampling", 1e-3, kl_coef=0.25)
    assert metrics.kl == 0.0
    assert policy.train_state.prefix == []
    judged = datum(policy, prompt, call)
    metrics = policy.train_step([judged], "importance_sampling", 1e-3, kl_coef=0.25)
    assert metrics.kl > 0.0
    assert {e.weights for e in policy.train_state.prefix} == {kv_cache.REFERENCE}


def test_a_step_takes_the_forward_scored_for_it_and_no_other(policy: LocalPolicy) -> None:
    """SDPO scores the student's call, then trains on it: the step reuses that forward
    (one ~1 s pass less at 2k context) and ends where a step that ran its own would."""
    prompt, call = situation(policy)
    d = datum(policy, prompt, call)
    scorer = policy.logit_scorer()
    assert scorer is not None
    # A step first, so that both compared steps start from an adapter with B ≠ 0.
    policy.train_step([d], "importance_sampling", 1e-3, kl_coef=0.1)
    start = adapter_files.adapter_state(policy)

    policy.train_state.bump(reset_optimizers=True)
    policy.train_step([d], "importance_sampling", 1e-3, kl_coef=0.1)
    fresh = adapter_files.adapter_state(policy)
    with torch.no_grad():
        adapter_files.set_adapter_state(policy, start)
    policy.train_state.bump(reset_optimizers=True)

    scored = scorer.log_distributions(prompt, call, for_step=True)
    assert list(policy.train_state.scored) == [(tuple(prompt), tuple(call))]
    assert not scored.requires_grad
    policy.train_step([d], "importance_sampling", 1e-3, kl_coef=0.1)
    assert not policy.train_state.scored  # taken by the step
    reused = adapter_files.adapter_state(policy)
    for name, tensor in fresh.items():
        assert torch.allclose(tensor, reused[name], atol=1e-6), name

    # Scored under weights that then change, it is never trained on.
    scorer.log_distributions(prompt, call, for_step=True)
    kv_cache.invalidate_prefix_cache(policy)
    assert not policy.train_state.scored


def test_a_bf16_autocast_pass_trains_the_float32_adapter(policy: LocalPolicy) -> None:
    """`train_dtype = bfloat16`: the pass runs under autocast, the adapter and the K/V
    kept for later scoring stay float32, and the step lowers the loss like a float32 one."""
    prompt, call = situation(policy)
    policy.train_state.autocast = torch.bfloat16
    d = datum(policy, prompt, call)
    before = policy.logprobs(prompt, call)
    lora_step.score_for_step(policy, prompt, call)  # the step takes this pass too
    metrics = lora_step.train_step(policy, [d], "cross_entropy", 2e-3, kl_coef=0.1)
    assert math.isfinite(metrics.loss) and metrics.kl >= 0
    assert {p.dtype for p in lora_step.trainable_parameters(policy.model)} == {torch.float32}
    assert sum(policy.logprobs(prompt, call)) > sum(before)
    kept = [k for e in policy.train_state.prefix for k, _ in e.layers]
    assert kept and {k.dtype for k in kept} == {torch.float32}
