"""Contract: the datums the Tinker backend builds, under Tinker's documented loss, give the
local SDPO step's loss and gradient on the same tokens.

The learner side of Tinker (logprobs of `target_tokens` given `model_input`, then the
`cispo` / `cross_entropy` formulas of Tinker's loss docs, `cispo_loss_reference`) is run on a
small random Llama with a LoRA adapter, against the local backend's own `lora_step.train_step`
(whose exact gradient is captured by a recording optimizer) on a policy holding the same model.

In which sense they are equal:

* Clamped IS surrogate (and cross-entropy): equal in value and gradient, exactly, for any
  ratio π/π_old (inside or outside the clamp) and any batch: CISPO's weight is the same
  `sg(clamp(ratio))`, and the local token mean is carried by advantages scaled by 1/N.
* KL to the reference: the local backend adds the exact full-vocabulary KL; Tinker gets
  `adv − β(log π_old − log π_ref)`. At the on-policy point the expected Tinker gradient over
  y ~ π equals the local KL gradient (checked here by enumerating the vocabulary); a single
  sampled completion gives an unbiased estimate of it, not the same number.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

tinker = pytest.importorskip("tinker")
peft = pytest.importorskip("peft")

from continual_lsp.policy import losses  # noqa: E402
from continual_lsp.policy.base import Datum  # noqa: E402
from continual_lsp.policy.local import kv_cache, lora_step  # noqa: E402
from continual_lsp.policy.tinker.datums import (  # noqa: E402
    batch_metrics,
    build_tinker_batch,
    cispo_loss_reference,
    cross_entropy_loss_reference,
)

VOCAB = 48
LOW, HIGH = 0.5, 2.0


class ToyPolicy:
    """What `lora_step.train_step` needs: `.model`, a peft model with adapter "default"."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.adapter_version: str | None = None
        self.train_state = kv_cache.TrainState()


@pytest.fixture(scope="module")
def base_model() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    model = LlamaForCausalLM(config)
    lora = peft.LoraConfig(
        r=4,
        lora_alpha=8,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        lora_dropout=0.0,
        init_lora_weights=False,  # random B: the adapter differs from the base (KL ≠ 0)
    )
    peft_model = peft.get_peft_model(model, lora)
    peft_model.eval()
    return peft_model


@pytest.fixture
def policy(base_model: Any) -> ToyPolicy:
    return ToyPolicy(copy.deepcopy(base_model))


class RecordingOptimizer(torch.optim.SGD):
    """Captures the gradient `train_step` computed, and leaves the weights alone."""

    def __init__(self, params: list[torch.nn.Parameter]) -> None:
        super().__init__(params, lr=0.0)
        self.grads: list[torch.Tensor] = []

    def step(self, closure: Any = None) -> None:
        self.grads = [p.grad.detach().clone() for g in self.param_groups for p in g["params"]]


def local_step(
    policy: ToyPolicy, batch: list[Datum], loss: str, kl_coef: float = 0.0
) -> tuple[Any, list[torch.Tensor]]:
    """The local backend's own train_step (full backprop), and the gradient it applied."""
    params = lora_step.trainable_parameters(policy.model)
    recorder = RecordingOptimizer(params)
    policy.train_state.optimizers[1.0] = recorder
    metrics = lora_step.train_step(
        policy,
        batch,
        loss,
        1.0,
        kl_coef=kl_coef,
        clip_low=LOW,
        clip_high=HIGH,
        max_grad_norm=None,
        prefix_cache=False,
    )
    return metrics, recorder.grads


def tinker_side(policy: ToyPolicy, tb: Any) -> tuple[float, list[torch.Tensor], list[list[float]]]:
    """What Tinker's server does with the datums: learner logprobs, documented loss, backward."""
    params = lora_step.trainable_parameters(policy.model)
    for p in params:
        p.grad = None
    total = torch.zeros(())
    learner: list[list[float]] = []
    for datum in tb.datums:
        ids = torch.tensor([datum.model_input.to_ints()])
        logits = policy.model(input_ids=ids, use_cache=False).logits[0]
        targets = datum.loss_fn_inputs["target_tokens"].to_torch().long()
        target_logprobs = losses.selective_log_softmax(logits, targets)
        if tb.loss_fn == "cispo":
            total = total + cispo_loss_reference(target_logprobs, datum, LOW, HIGH)
        else:
            total = total + cross_entropy_loss_reference(target_logprobs, datum)
        learner.append(target_logprobs.detach().tolist())
    total.backward()
    return float(total.detach()), [p.grad.detach().clone() for p in params], learner


def scores(policy: ToyPolicy, prompt: list[int], completion: list[int]) -> list[float]:
    return lora_step.token_logprobs(policy, prompt, completion)


def assert_same_gradient(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert len(a) == len(b)
    flat_a, flat_b = torch.cat([x.flatten() for x in a]), torch.cat([x.flatten() for x in b])
    assert flat_a.norm() > 0
    torch.testing.assert_close(flat_a, flat_b, rtol=1e-4, atol=1e-6)


def sdpo_batch(policy: ToyPolicy, *, off_policy: bool) -> list[Datum]:
    """Two SDPO datums as learning/sdpo.py builds them: student = the proposal's prompt,
    teacher = the prompt plus a correction, adv = log π_teacher − log π_student."""
    g = torch.Generator().manual_seed(1)
    batch = []
    for prompt, completion in (
        ([1, 5, 9, 14, 3, 7], [20, 21, 22, 23, 2]),
        ([4, 8, 15], [30, 31, 2]),
    ):
        correction = [40, 41, 42]
        student = scores(policy, prompt, completion)
        teacher = scores(policy, prompt + correction, completion)
        adv = [t - s for t, s in zip(teacher, student, strict=True)]
        if off_policy:
            # A stale behaviour policy: ratios on both sides of the clamp.
            noise = (torch.randn(len(completion), generator=g) * 1.2).tolist()
            old = [s + n for s, n in zip(student, noise, strict=True)]
        else:
            old = student
        batch.append(
            Datum(
                prompt_tokens=prompt, completion_tokens=completion, advantages=adv, old_logprobs=old
            )
        )
    return batch


@pytest.mark.parametrize("off_policy", [False, True])
def test_clamped_is_surrogate_same_loss_and_gradient(policy: ToyPolicy, off_policy: bool) -> None:
    batch = sdpo_batch(policy, off_policy=off_policy)
    tb = build_tinker_batch(batch, "importance_sampling", clip_low=LOW, clip_high=HIGH)
    assert tb.loss_fn == "cispo" and tb.loss_fn_config == {
        "clip_low_threshold": LOW,
        "clip_high_threshold": HIGH,
    }
    remote_loss, remote_grad, learner = tinker_side(policy, tb)
    local, local_grad = local_step(policy, batch, "importance_sampling")
    assert remote_loss == pytest.approx(local.loss, rel=1e-5, abs=1e-7)
    assert_same_gradient(remote_grad, local_grad)
    if off_policy:
        assert 0 < local.clipped_fraction < 1  # the clamp was active on some tokens
    # The metrics the Tinker backend reports, from the returned logprobs, are the local ones.
    reported = batch_metrics(tb, learner, kl_coef=0.0, clip_low=LOW, clip_high=HIGH, seconds=0.0)
    assert reported.loss == pytest.approx(local.loss, rel=1e-5, abs=1e-7)
    assert reported.mean_ratio == pytest.approx(local.mean_ratio, rel=1e-5)
    assert reported.clipped_fraction == pytest.approx(local.clipped_fraction)
    assert reported.mean_advantage == pytest.approx(local.mean_advantage, rel=1e-5)
    assert reported.tokens == local.tokens


def test_on_policy_without_old_logprobs(policy: ToyPolicy) -> None:
    """A datum without old logprobs is on-policy locally (ratio 1); the Tinker backend
    fills them from the current weights, which gives the same objective."""
    batch = [
        d.model_copy(update={"old_logprobs": []}) for d in sdpo_batch(policy, off_policy=False)
    ]
    current = [scores(policy, d.prompt_tokens, d.completion_tokens) for d in batch]
    tb = build_tinker_batch(batch, "importance_sampling", old_logprobs=current)
    remote_loss, remote_grad, _ = tinker_side(policy, tb)
    local, local_grad = local_step(policy, batch, "importance_sampling")
    assert remote_loss == pytest.approx(local.loss, rel=1e-5, abs=1e-7)
    assert_same_gradient(remote_grad, local_grad)


@pytest.mark.parametrize("with_old", [False, True])
def test_cross_entropy_same_loss_and_gradient(policy: ToyPolicy, with_old: bool) -> None:
    batch = sdpo_batch(policy, off_policy=True)
    batch = [
        d.model_copy(update={"advantages": [], "old_logprobs": d.old_logprobs if with_old else []})
        for d in batch
    ]
    tb = build_tinker_batch(batch, "cross_entropy", clip_low=LOW, clip_high=HIGH)
    assert tb.loss_fn == ("cispo" if with_old else "cross_entropy")
    remote_loss, remote_grad, _ = tinker_side(policy, tb)
    local, local_grad = local_step(policy, batch, "cross_entropy")
    assert remote_loss == pytest.approx(local.loss, rel=1e-5, abs=1e-7)
    assert_same_gradient(remote_grad, local_grad)


def test_kl_folded_into_advantages_matches_full_kl_in_expectation(policy: ToyPolicy) -> None:
    """E_{y~π}[∇ Tinker loss of datum(y) with adv 0, KL folded] = ∇ β·KL(π‖π_ref) (local)."""
    beta = 0.3
    prompt = [1, 5, 9, 14, 3]
    model = policy.model
    params = lora_step.trainable_parameters(model)
    ids = torch.tensor([prompt])
    with torch.no_grad():
        student = torch.log_softmax(model(input_ids=ids).logits[0, -1].float(), -1)
        with model.disable_adapter():
            reference = torch.log_softmax(model(input_ids=ids).logits[0, -1].float(), -1)
    assert float((student.exp() * (student - reference)).sum()) > 1e-4  # the adapter matters

    # Local: the exact full-vocab KL term of train_step at this position.
    for p in params:
        p.grad = None
    logits = model(input_ids=ids).logits[0, -1:]
    with torch.no_grad(), model.disable_adapter():
        ref_logits = model(input_ids=ids).logits[0, -1:]
    (beta * losses.full_kl(logits, ref_logits).sum()).backward()
    local_grad = [p.grad.detach().clone() for p in params]

    # Tinker: one datum per possible token y, weighted by π(y).
    expected = [torch.zeros_like(p) for p in params]
    for y in range(VOCAB):
        datum = Datum(
            prompt_tokens=prompt,
            completion_tokens=[y],
            advantages=[0.0],
            old_logprobs=[float(student[y])],
        )
        tb = build_tinker_batch(
            [datum], "importance_sampling", ref_logprobs=[[float(reference[y])]], kl_coef=beta
        )
        _, grad, _ = tinker_side(policy, tb)
        weight = float(student[y].exp())
        expected = [e + weight * g for e, g in zip(expected, grad, strict=True)]
    assert_same_gradient(expected, local_grad)
