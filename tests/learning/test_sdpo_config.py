"""An SDPO step's options are typed: an unknown one is refused on the way to the backend."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from continual_lsp.config import Settings
from continual_lsp.learning.sdpo import SdpoConfig, sdpo_step
from continual_lsp.policy.local import lora_step


def test_the_config_comes_from_the_settings_and_forwards_only_what_was_given() -> None:
    settings = Settings(learning_rate=2e-3, kl_coef=0.5, is_clip_low=0.4, teacher_update_rate=0.1)
    config = SdpoConfig.from_settings(settings, grammar_mask=False)
    assert (config.lr, config.kl_coef, config.trust_region_rate) == (2e-3, 0.5, 0.1)
    assert not config.grammar_mask
    assert config.train_options() == {"kl_coef": 0.5, "clip_low": 0.4, "clip_high": 2.0}
    given = SdpoConfig.from_settings(settings, prefix_cache=False, max_grad_norm=None)
    assert given.train_options() == {
        "kl_coef": 0.5,
        "clip_low": 0.4,
        "clip_high": 2.0,
        "max_grad_norm": None,
        "prefix_cache": False,
    }


def test_an_unknown_step_option_is_an_error_not_dropped() -> None:
    # Before: sdpo_step(**options) -> train_step(**_ignored) trained without a word.
    with pytest.raises(ValidationError, match="prefix_cach"):
        sdpo_step(object(), {"proposal_id": "p", "prompt_tokens": [1]}, Settings(), prefix_cach=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="prefix_cach"):
        lora_step.train_step(object(), [], "cross_entropy", 1e-3, prefix_cach=False)  # type: ignore[call-arg]


# -- more from each correction (issue 33): scripted, no model -------------------------------


class ScriptedPolicy:
    """Records each train_step's batch; `clipped` scripts each step's clipped fraction."""

    def __init__(self, clipped: list[float] | None = None) -> None:
        self.batches: list[list[object]] = []
        self.clipped = clipped or []

    def train_step(self, datums: list[object], loss: str, lr: float, **options: object):  # type: ignore[no-untyped-def]
        from continual_lsp.policy.base import TrainMetrics

        i = len(self.batches)
        self.batches.append(list(datums))
        fraction = self.clipped[i] if i < len(self.clipped) else 0.0
        return TrainMetrics(loss=float(i), clipped_fraction=fraction, seconds=1.0, tokens=10)


def _job(name: str, correction: str | None = "use pnpm") -> dict[str, object]:
    return {"proposal_id": name, "prompt_tokens": [1], "correction": correction, "cluster": "c1"}


@pytest.fixture
def datums_by_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """build_datums → one marker per job (a job without a correction has nothing to learn)."""
    from continual_lsp.learning import sdpo

    def fake(policy: object, job: sdpo.SdpoJob, settings: Settings, config: object) -> list[str]:
        if not job.correction:
            raise sdpo.NothingToLearn(job.proposal_id)
        return [f"datum:{job.proposal_id}"]

    monkeypatch.setattr(sdpo, "build_datums", fake)


def test_by_default_one_step_and_no_replay(datums_by_job: None) -> None:
    from continual_lsp.learning.sdpo import SdpoJob

    policy = ScriptedPolicy()
    earlier = [SdpoJob.model_validate(_job("old"))]
    metrics = sdpo_step(policy, _job("new"), Settings(), earlier)  # type: ignore[arg-type]
    assert policy.batches == [["datum:new"]]
    assert metrics.seconds == 1.0


def test_several_steps_on_the_same_datums(datums_by_job: None) -> None:
    policy = ScriptedPolicy()
    metrics = sdpo_step(policy, _job("new"), Settings(steps_per_correction=3))  # type: ignore[arg-type]
    assert policy.batches == [["datum:new"]] * 3
    assert (metrics.loss, metrics.seconds, metrics.tokens) == (2.0, 3.0, 30)


def test_the_trust_region_stops_later_steps(datums_by_job: None) -> None:
    # The second step finds most tokens' ratio clamped: the weights left the region the
    # stored scores describe, so no third or fourth step.
    policy = ScriptedPolicy(clipped=[0.0, 0.8, 0.0, 0.0])
    sdpo_step(policy, _job("new"), Settings(steps_per_correction=4))  # type: ignore[arg-type]
    assert len(policy.batches) == 2


def test_replay_adds_up_to_k_earlier_corrections_of_the_cluster(datums_by_job: None) -> None:
    from continual_lsp.learning.sdpo import SdpoJob

    earlier = [
        SdpoJob.model_validate(j)
        for j in (_job("a"), _job("empty", correction=None), _job("b"), _job("c"))
    ]
    policy = ScriptedPolicy()
    sdpo_step(policy, _job("new"), Settings(replay_same_cluster=2), earlier)  # type: ignore[arg-type]
    # The newest first, one with nothing to learn skipped, at most two.
    assert policy.batches == [["datum:new", "datum:a", "datum:b"]]


def test_the_options_come_from_the_settings_and_are_bounded() -> None:
    config = SdpoConfig.from_settings(Settings(steps_per_correction=3, replay_same_cluster=4))
    assert (config.steps_per_correction, config.replay_same_cluster) == (3, 4)
    # Not backend options: train_step never sees them.
    assert "steps_per_correction" not in config.train_options()
    with pytest.raises(ValidationError):
        Settings(steps_per_correction=0)
    with pytest.raises(ValidationError):
        SdpoConfig.from_settings(Settings(), replay_same_cluster=9)
