"""The Agent with `backend = "vllm"` against the local fake of vLLM (tests/policy/vllm/vllm_fake.py):
the agent builds the policy from its settings, pushes the store's served version to the
server before it samples, and records the proposal with the policy's own log-probs (the
ones SDPO's step will use). Only the embedded model's tokenizer is loaded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from continual_lsp.agent.agent import Agent
from continual_lsp.config import Settings
from continual_lsp.policy.adapter_registry import ADAPTER_FILE, CONFIG_FILE, sha256_file
from continual_lsp.policy.vllm.vllm_policy import VllmPolicy, lora_name
from continual_lsp.store import Store
from tests.policy.vllm.vllm_fake import FakeVllm, serve

BASE = "base-model"


@pytest.fixture
def fake(embedded_tokenizer: Any) -> Iterator[tuple[FakeVllm, str]]:
    end = int(embedded_tokenizer.convert_tokens_to_ids("<|im_end|>"))
    fake = FakeVllm(embedded_tokenizer, base=BASE, end_of_turn=end)
    server, url = serve(fake)
    yield fake, url
    server.shutdown()
    server.server_close()


def test_the_served_version_is_pushed_before_the_first_proposal(
    fake: tuple[FakeVllm, str], tmp_path: Path, workspace: Path
) -> None:
    server, url = fake
    settings = Settings(
        backend="vllm",
        vllm_url=url,
        vllm_model=BASE,
        enable_training=False,
        autonomy="manual",
        store_path=str(tmp_path / "store.sqlite3"),
        user="dana",
    )
    version = tmp_path / "adapters" / "dana" / "v0001"  # beside the store, as the worker writes
    version.mkdir(parents=True)
    (version / CONFIG_FILE).write_text('{"peft_type": "LORA", "r": 16}')
    (version / ADAPTER_FILE).write_bytes(b"weights" * 64)
    store = Store(settings.store_path or "")
    store.add_adapter("v0001", str(version), sha256_file(version / ADAPTER_FILE), None, {})
    name = lora_name("dana", version)
    server.proposals = {
        str(version): server.proposal_tokens(BASE)[0].model_copy(
            update={"arguments": {"path": "src/calc/ops.py"}}
        )
    }

    agent = Agent(settings, workspace, store=store)
    _, proposal = agent.start_task("Fix mean() in src/calc/ops.py")
    assert isinstance(agent.policy, VllmPolicy)
    assert proposal is not None and proposal.call.arguments == {"path": "src/calc/ops.py"}
    assert server.loras == {name: str(version)}
    paths = [path for path, _ in server.requests]
    assert paths.index("/v1/load_lora_adapter") < paths.index("/v1/completions")
    sampled = next(b for p, b in server.requests if p == "/v1/completions")
    assert sampled["model"] == name

    row = store.proposal(proposal.id)
    assert row is not None
    assert row["logprobs"] == pytest.approx(
        server.expected_logprobs(name, row["prompt_tokens"], row["tokens"])
    )
    assert not any(x == 0.0 for x in row["logprobs"])  # not vLLM's masked numbers
    agent.close()
