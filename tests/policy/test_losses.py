"""policy/losses.py against TRL's SDPO helpers, numerically (values and gradients)."""

from __future__ import annotations

import os

import pytest
import torch

from continual_lsp.policy import losses

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
trl_loss = pytest.importorskip("trl.experimental.sdpo.loss_utils")
trl_utils = pytest.importorskip("trl.trainer.utils")

T, V, K = 7, 50, 5


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _logits(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen) * 3


def test_selective_log_softmax_matches_trl(gen: torch.Generator) -> None:
    logits = _logits(gen, 2, T, V)
    ids = torch.randint(0, V, (2, T), generator=gen)
    assert torch.allclose(
        losses.selective_log_softmax(logits, ids),
        trl_utils.selective_log_softmax(logits, ids),
        atol=1e-5,
    )
    topk = torch.randint(0, V, (2, T, K), generator=gen)
    assert torch.allclose(
        losses.selective_log_softmax(logits, topk),
        trl_utils.selective_log_softmax(logits, topk),
        atol=1e-5,
    )


def test_on_policy_surrogate_equals_trl_sampled_token_loss(gen: torch.Generator) -> None:
    """Ratio 1: −adv·log π with adv = log π_T − log π is TRL's sampled-token SDPO loss."""
    student = _logits(gen, 1, T, V).requires_grad_()
    teacher = _logits(gen, 1, T, V)
    ids = torch.randint(0, V, (1, T), generator=gen)
    logp = losses.selective_log_softmax(student, ids)
    adv = losses.selective_log_softmax(teacher, ids) - logp.detach()
    ours = losses.clamped_is_surrogate(logp, logp.detach(), adv).loss
    (g_ours,) = torch.autograd.grad(ours.mean(), student)
    theirs = trl_loss.compute_sampled_token_self_distillation_loss(
        student, teacher, ids, distillation_alpha=1.0
    )
    (g_theirs,) = torch.autograd.grad(theirs.mean(), student)
    assert torch.allclose(ours, theirs, atol=1e-5)
    assert torch.allclose(g_ours, g_theirs, atol=1e-6)


def test_stale_ratio_is_clamped_and_gradient_uses_the_clamped_weight(gen: torch.Generator) -> None:
    logp = (-torch.rand(T, generator=gen) * 3).requires_grad_()
    adv = torch.randn(T, generator=gen)
    shift = torch.tensor([3.0, -3.0, 0.1, -0.1, 2.0, 0.0, -2.0])  # log π − log π_old
    old = logp.detach() - shift
    terms = losses.clamped_is_surrogate(logp, old, adv, low=0.5, high=2.0)
    ratio = torch.exp(shift)
    assert torch.allclose(terms.ratio, ratio, atol=1e-5)
    assert terms.clipped.tolist() == [True, True, False, False, True, False, True]
    assert float(terms.clipped.float().mean()) > 0
    (grad,) = torch.autograd.grad(losses.masked_mean(terms.loss), logp)
    # Stop-gradient clamp (CISPO form): d/dlogπ = −clamp(r, .5, 2)·adv / T, never zeroed.
    expected = -ratio.clamp(0.5, 2.0) * adv / T
    assert torch.allclose(grad, expected, atol=1e-6)
    # TRL's IS clipping is the same weight with no lower bound: equal where r ≥ low.
    per_token = -adv * logp
    trl = trl_loss.apply_importance_sampling_clipping(per_token, logp, old, 2.0)
    keep = ratio >= 0.5
    assert torch.allclose(terms.loss[keep], trl[keep], atol=1e-6)


def test_full_kl_matches_trl_divergence_and_torch(gen: torch.Generator) -> None:
    student = _logits(gen, T, V)
    reference = _logits(gen, T, V)
    ours = losses.full_kl(student, reference)
    s, r = torch.log_softmax(student, -1), torch.log_softmax(reference, -1)
    assert torch.allclose(ours, trl_loss.compute_divergence(s, r, 1.0), atol=1e-5)
    torch_kl = torch.nn.functional.kl_div(r, s, reduction="none", log_target=True).sum(-1)
    assert torch.allclose(ours, torch_kl, atol=1e-5)
    assert (ours >= 0).all()
    assert torch.allclose(losses.full_kl(student, student), torch.zeros(T), atol=1e-6)


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
def test_divergence_and_tail_bucket_match_trl(gen: torch.Generator, alpha: float) -> None:
    s = torch.log_softmax(_logits(gen, T, V), -1)[:, :K]
    t = torch.log_softmax(_logits(gen, T, V), -1)[:, :K]
    assert torch.allclose(losses.add_tail_bucket(s), trl_loss.add_tail_bucket(s), atol=1e-6)
    s1, t1 = losses.add_tail_bucket(s), losses.add_tail_bucket(t)
    assert torch.allclose(torch.logsumexp(s1, -1), torch.zeros(T), atol=1e-5)
    assert torch.allclose(
        losses.divergence(s1, t1, alpha), trl_loss.compute_divergence(s1, t1, alpha), atol=1e-5
    )


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_topk_tail_distill_matches_trl(gen: torch.Generator, alpha: float) -> None:
    student = _logits(gen, T, V).requires_grad_()
    teacher = _logits(gen, T, V)
    t_lp, t_ids = torch.topk(torch.log_softmax(teacher, -1), K, dim=-1)
    ours = losses.topk_tail_distill(student, t_ids, t_lp, alpha)
    # TRL's teacher-support path (sdpo_trainer._compute_server_distillation_loss).
    s_lp = torch.gather(torch.log_softmax(student, -1), -1, t_ids)
    theirs = trl_loss.compute_divergence(
        trl_loss.add_tail_bucket(s_lp), trl_loss.add_tail_bucket(t_lp), alpha
    )
    assert torch.allclose(ours, theirs, atol=1e-5)
    g_ours = torch.autograd.grad(ours.sum(), student)[0]
    g_theirs = torch.autograd.grad(theirs.sum(), student)[0]
    assert torch.allclose(g_ours, g_theirs, atol=1e-5)


def test_topk_over_the_whole_vocab_is_the_full_divergence(gen: torch.Generator) -> None:
    student = _logits(gen, T, V)
    teacher = _logits(gen, T, V)
    t_lp, t_ids = torch.topk(torch.log_softmax(teacher, -1), V, dim=-1)
    ours = losses.topk_tail_distill(student, t_ids, t_lp, 1.0)
    full = trl_loss.compute_full_logit_self_distillation_loss(
        student, teacher, distillation_alpha=1.0
    )
    assert torch.allclose(ours, full, atol=1e-4)


def test_masked_mean_is_a_token_mean() -> None:
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert float(losses.masked_mean(values, mask)) == pytest.approx(2.5)
