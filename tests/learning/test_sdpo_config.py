"""An SDPO step's options are typed: an unknown one is refused on the way to the backend."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from continual_lsp.config import Settings
from continual_lsp.learning.sdpo import SdpoConfig, sdpo_step
from continual_lsp.policy import training


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
        training.train_step(object(), [], "cross_entropy", 1e-3, prefix_cach=False)  # type: ignore[call-arg]
