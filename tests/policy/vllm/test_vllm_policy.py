"""VllmPolicy against a local fake of vLLM's HTTP API (tests/policy/vllm/vllm_fake.py): what is
sent (token-id prompts, the tool-call schema, adapter names and paths), what comes back
(the call, the policy's own log-probs), adapter pushes through the registry, two users on
one server, a server restart, and the failures the reviewer is told about. No network."""

from __future__ import annotations

import http.server
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from continual_lsp.config import Settings
from continual_lsp.policy.adapter_registry import (
    ADAPTER_FILE,
    CONFIG_FILE,
    AdapterRegistry,
    sha256_file,
)
from continual_lsp.policy.base import (
    BackendUnavailable,
    DecodeRestrictions,
    Message,
    Policy,
    SampleParams,
    Sampler,
)
from continual_lsp.policy.call_schema import decoding_schema
from continual_lsp.policy.factory import make_policy, trainer_settings
from continual_lsp.policy.render import ChatMLRenderer
from continual_lsp.policy.vllm.vllm_policy import VllmPolicy, lora_name
from continual_lsp.store import Store
from continual_lsp.tools.base import ToolCall
from tests.policy.vllm.vllm_fake import FakeVllm, serve

BASE = "base-model"
GREP = ToolCall(tool="grep", arguments={"pat": "TODO"})


@pytest.fixture
def end_of_turn(embedded_tokenizer: Any) -> int:
    return int(embedded_tokenizer.convert_tokens_to_ids("<|im_end|>"))


@pytest.fixture
def fake(embedded_tokenizer: Any, end_of_turn: int) -> FakeVllm:
    return FakeVllm(embedded_tokenizer, base=BASE, end_of_turn=end_of_turn)


@pytest.fixture
def url(fake: FakeVllm) -> Iterator[str]:
    server, address = serve(fake)
    yield address
    server.shutdown()
    server.server_close()


def make(
    url: str, tokenizer: Any, root: Path, user: str = "alice", served_model: str = BASE, **kw: Any
) -> VllmPolicy:
    return VllmPolicy(
        url=url,
        served_model=served_model,
        tokenizer=tokenizer,
        user=user,
        adapters_dir=root / "adapters" / user,
        timeout_s=5.0,
        **kw,
    )


def adapter_dir(root: Path, user: str, version: str) -> Path:
    """A version directory as the local trainer writes one (contents are not read here)."""
    path = root / "adapters" / user / version
    path.mkdir(parents=True)
    (path / CONFIG_FILE).write_text('{"peft_type": "LORA", "r": 16}')
    (path / ADAPTER_FILE).write_bytes(version.encode() * 64)
    return path


def damaged(adapter: dict[str, Any], problem: str) -> None:
    pytest.fail(f"{adapter['name']} passed over: {problem}")


def prompt_of(policy: VllmPolicy) -> list[int]:
    return policy.renderer.render_prompt([Message(role="user", content="Fix the failing test.")])


def test_sample_sends_the_schema_and_reports_the_policys_logprobs(
    fake: FakeVllm, url: str, embedded_tokenizer: Any, tmp_path: Path
) -> None:
    policy = make(url, embedded_tokenizer, tmp_path)
    prompt = prompt_of(policy)
    forbid = DecodeRestrictions(path_prefixes={"read": [".git"]}, command_prefixes=["rm "])
    params = SampleParams(tools=["read", "grep", "bash"], forbid=forbid, max_tokens=64, seed=3)
    done = policy.sample(prompt, params)

    call = ToolCall(tool="read", arguments={"path": "README.md"})
    assert policy.renderer.parse_call(done.text) == call
    assert done.tokens == policy.renderer.render_call(call)  # ends with <|im_end|>
    # The unconstrained scores of the sampled tokens, not the masked zeros vLLM samples with.
    assert done.logprobs == pytest.approx(fake.expected_logprobs(BASE, prompt, done.tokens))
    assert done.logprobs == pytest.approx(policy.logprobs(prompt, done.tokens))

    (_, models), (_, sampled), (_, scored) = fake.requests[:3]
    assert models == {}  # GET /v1/models first: the base model is checked
    assert sampled["model"] == BASE and sampled["prompt"] == prompt and sampled["seed"] == 3
    assert sampled["structured_outputs"] == {
        "json": decoding_schema(["read", "grep", "bash"], forbid),
        "disable_any_whitespace": True,
    }
    assert "guided_json" not in sampled
    assert sampled["stop_token_ids"] == [policy.renderer.end_of_turn_id]
    assert scored["prompt"] == [[*prompt, *done.tokens]]
    assert "structured_outputs" not in scored and scored["prompt_logprobs"] == 1
    assert policy.context_window == fake.max_model_len


def test_older_server_guided_json_and_ids_from_logprobs(
    fake: FakeVllm, url: str, embedded_tokenizer: Any, tmp_path: Path
) -> None:
    fake.old_server = True  # no token_ids, no stop token in the output
    policy = make(url, embedded_tokenizer, tmp_path, legacy_guided=True)
    done = policy.sample(prompt_of(policy), SampleParams(tools=["read"]))
    assert done.tokens == policy.renderer.render_call(
        ToolCall(tool="read", arguments={"path": "README.md"})
    )
    sampled = fake.requests[1][1]
    assert sampled["guided_json"] == decoding_schema(["read"])
    assert "structured_outputs" not in sampled


def test_batch_greedy_rows_then_samples_scored_in_one_request(
    fake: FakeVllm, url: str, embedded_tokenizer: Any, tmp_path: Path
) -> None:
    policy = make(url, embedded_tokenizer, tmp_path)
    prompt = prompt_of(policy)
    done = policy.sample_batch(prompt, SampleParams(temperature=0.8, greedy_rows=1), 4)
    assert len(done) == 4
    completions = [b for p, b in fake.requests if p == "/v1/completions"]
    assert [(b.get("temperature"), b["n"]) for b in completions[:2]] == [(0.0, 1), (0.8, 3)]
    assert len(completions) == 3 and len(completions[2]["prompt"]) == 4
    assert done[0].logprobs == pytest.approx(fake.expected_logprobs(BASE, prompt, done[0].tokens))


def test_a_served_version_is_pushed_and_a_revert_follows(
    fake: FakeVllm, url: str, embedded_tokenizer: Any, tmp_path: Path
) -> None:
    """The agent's path: the registry's newest intact version → `load_adapter` → vLLM."""
    store = Store(tmp_path / "alice.sqlite3")
    registry = AdapterRegistry(store)
    policy = make(url, embedded_tokenizer, tmp_path)
    prompt = prompt_of(policy)
    paths = [adapter_dir(tmp_path, "alice", v) for v in ("v0001", "v0002")]
    versions = []
    for path in paths:
        versions.append(
            store.add_adapter(path.name, str(path), sha256_file(path / ADAPTER_FILE), None, {})
        )
        registry.serve(policy, registry.newest_intact(policy, damaged))
    names = [lora_name("alice", p) for p in paths]
    assert fake.loras == {names[1]: str(paths[1])}  # v0001 loaded, then unloaded for v0002
    assert policy.adapter_version == "v0002"

    done = policy.sample(prompt, SampleParams())
    assert fake.requests[-2][1]["model"] == names[1]
    assert done.logprobs == pytest.approx(fake.expected_logprobs(names[1], prompt, done.tokens))
    reference = policy.reference_logprobs(prompt, done.tokens)
    assert fake.requests[-1][1]["model"] == BASE
    assert reference == pytest.approx(fake.expected_logprobs(BASE, prompt, done.tokens))
    assert reference != pytest.approx(done.logprobs)

    store.set_adapter_active(versions[1], False)  # the reviewer reverts v0002
    registry.serve(policy, registry.newest_intact(policy, damaged))
    assert fake.loras == {names[0]: str(paths[0])} and policy.adapter_version == "v0001"
    store.set_adapter_active(versions[0], False)
    registry.serve(policy, registry.newest_intact(policy, damaged))
    assert fake.loras == {} and policy.adapter_version is None
    policy.sample(prompt, SampleParams())
    assert fake.requests[-2][1]["model"] == BASE
    store.close()


def test_two_users_on_one_server_never_share_an_adapter(
    fake: FakeVllm, url: str, embedded_tokenizer: Any, tmp_path: Path
) -> None:
    alice = make(url, embedded_tokenizer, tmp_path, user="alice")
    bob = make(url, embedded_tokenizer, tmp_path, user="bob")
    alice_v1, bob_v1 = (
        adapter_dir(tmp_path, "alice", "v0001"),
        adapter_dir(tmp_path, "bob", "v0001"),
    )
    fake.proposals = {str(bob_v1): GREP}
    alice.load_adapter(str(alice_v1))
    bob.load_adapter("v0001")  # a bare version name: inside bob's adapters folder
    assert lora_name("alice", alice_v1) != lora_name("bob", bob_v1)

    prompt = prompt_of(alice)
    a, b = alice.sample(prompt, SampleParams()), bob.sample(prompt, SampleParams())
    assert alice.renderer.parse_call(a.text).tool == "read"
    assert bob.renderer.parse_call(b.text) == GREP
    same = alice.logprobs(prompt, b.tokens), bob.logprobs(prompt, b.tokens)
    assert same[0] == pytest.approx(
        fake.expected_logprobs(lora_name("alice", alice_v1), prompt, b.tokens)
    )
    assert same[1] == pytest.approx(b.logprobs)
    assert same[0] != pytest.approx(same[1])
    # Each user's requests carry their own prefix-cache salt, and never the other's.
    pairs = {(b["model"], b["cache_salt"]) for p, b in fake.requests if p == "/v1/completions"}
    assert len(pairs) == 2 and len({salt for _, salt in pairs}) == 2


def test_a_restarted_server_gets_the_adapter_again(
    fake: FakeVllm, url: str, embedded_tokenizer: Any, tmp_path: Path
) -> None:
    policy = make(url, embedded_tokenizer, tmp_path)
    path = adapter_dir(tmp_path, "alice", "v0001")
    policy.load_adapter(str(path))
    fake.loras.clear()  # vLLM restarted: run-time adapters are gone
    done = policy.sample(prompt_of(policy), SampleParams())
    name = lora_name("alice", path)
    assert fake.loras == {name: str(path)}
    assert done.logprobs == pytest.approx(
        fake.expected_logprobs(name, prompt_of(policy), done.tokens)
    )


def test_adapter_paths_as_the_vllm_host_sees_them(
    fake: FakeVllm, url: str, embedded_tokenizer: Any, tmp_path: Path
) -> None:
    """One map for every user of a shared server (TCP: adapters_dir/<user>)."""
    fake.check_paths = False
    settings = Settings(
        backend="vllm",
        vllm_url=url,
        vllm_model=BASE,
        adapters_dir=str(tmp_path / "adapters"),
        vllm_path_map=f"{tmp_path / 'adapters'}=/mnt/adapters,/elsewhere=/x",  # as from env
    )
    for user in ("alice", "bob"):
        own = settings.model_copy(
            update={"user": user, "adapters_dir": str(tmp_path / "adapters" / user)}
        )
        adapter_dir(tmp_path, user, "v0003")
        VllmPolicy.from_settings(own, tokenizer=embedded_tokenizer).load_adapter("v0003")
    assert sorted(fake.loras.values()) == ["/mnt/adapters/alice/v0003", "/mnt/adapters/bob/v0003"]
    with pytest.raises(ValidationError, match="LOCAL=REMOTE"):
        Settings(vllm_path_map="no-equals-sign")


def test_a_trainer_that_keeps_versions_is_exported_then_pushed(
    fake: FakeVllm, url: str, embedded_tokenizer: Any, tmp_path: Path
) -> None:
    exported: list[str] = []

    def export(version: str) -> Path:
        exported.append(version)
        return adapter_dir(tmp_path, "alice", f"tinker-{version}")

    policy = make(url, embedded_tokenizer, tmp_path, manages_versions=True, export=export)
    policy.load_adapter("v0007")
    assert exported == ["v0007"] and policy.adapter_version == "v0007"
    assert list(fake.loras.values()) == [str(tmp_path / "adapters/alice/tinker-v0007")]


def test_failures_the_reviewer_is_told_about(
    fake: FakeVllm, url: str, embedded_tokenizer: Any, tmp_path: Path
) -> None:
    prompt = prompt_of(make(url, embedded_tokenizer, tmp_path))
    with pytest.raises(BackendUnavailable, match=f"serves {BASE}, not other"):
        make(url, embedded_tokenizer, tmp_path, served_model="other").sample(prompt, SampleParams())
    policy = make(url, embedded_tokenizer, tmp_path)
    fake.fail_next = 503
    with pytest.raises(BackendUnavailable, match="overloaded or failing while connecting"):
        policy.sample(prompt, SampleParams())
    fake.fail_next = 401
    with pytest.raises(BackendUnavailable, match="VLLM_API_KEY"):
        policy.sample(prompt, SampleParams())
    fake.runtime_lora = False
    with pytest.raises(BackendUnavailable, match="VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"):
        policy.load_adapter(str(adapter_dir(tmp_path, "alice", "v0001")))
    fake.runtime_lora = True
    unreadable = adapter_dir(tmp_path, "alice", "v0002")
    (unreadable / CONFIG_FILE).unlink()
    with pytest.raises(BackendUnavailable, match=r"could not load adapter .*No adapter found"):
        policy.load_adapter(str(unreadable))
    fake.fail_next = 400
    with pytest.raises(BackendUnavailable, match="refused to list its models"):
        policy.sample(prompt, SampleParams())
    assert policy.context_window == fake.max_model_len
    fake.fail_next = 400
    with pytest.raises(BackendUnavailable, match=r"refused the request while sampling: .* 400"):
        policy.sample(prompt, SampleParams())
    # It samples and scores; it has no training verbs to refuse (the worker trains on
    # vllm_trainer: test_worker_vllm.py).
    assert isinstance(policy, Sampler) and not isinstance(policy, Policy)
    assert policy.logit_scorer() is None  # off-box: scores of given tokens only


def test_an_unreachable_server(embedded_tokenizer: Any, tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    policy = make(f"http://127.0.0.1:{port}", embedded_tokenizer, tmp_path)
    with pytest.raises(BackendUnavailable, match=f"cannot reach vLLM at http://127.0.0.1:{port}"):
        policy.sample([1, 2, 3], SampleParams())


def test_a_server_that_hangs_meets_the_deadline(embedded_tokenizer: Any, tmp_path: Path) -> None:
    class Hang(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.server.release.wait(10)  # type: ignore[attr-defined]

        def log_message(self, *args: Any) -> None:
            pass

    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hang)
    server.release = threading.Event()  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        policy = make(f"http://127.0.0.1:{server.server_address[1]}", embedded_tokenizer, tmp_path)
        policy.timeout_s = 0.5
        with pytest.raises(BackendUnavailable, match="while connecting"):
            policy.sample([1, 2, 3], SampleParams())
    finally:
        server.release.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()


def test_settings_select_the_sampler_and_its_trainer(tmp_path: Path, url: str) -> None:
    settings = Settings(
        backend="vllm",
        vllm_url=url,
        vllm_model=BASE,
        vllm_trainer="local",
        store_path=str(tmp_path / "s.sqlite3"),
        user="carol",
    )
    assert trainer_settings(settings).backend == "local"
    assert trainer_settings(settings.model_copy(update={"backend": "tinker"})).backend == "tinker"
    policy = make_policy(settings)  # the embedded model's tokenizer, loaded locally
    assert isinstance(policy, VllmPolicy) and not policy.manages_versions
    assert policy.model_name == BASE and policy.adapters_dir == tmp_path / "adapters" / "carol"
    done = policy.sample(prompt_of(policy), SampleParams())
    assert policy.renderer.parse_call(done.text).tool == "read"


def test_a_tinker_trainer_means_its_renderer_and_no_grammar(
    fake: FakeVllm, url: str, embedded_tokenizer: Any, tmp_path: Path
) -> None:
    """The worker trains on Tinker with Tinker's renderer: the sampler renders the same
    way and samples as Tinker does, without the JSON schema."""
    settings = Settings(
        backend="vllm",
        vllm_url=url,
        vllm_model=BASE,
        vllm_trainer="tinker",
        store_path=str(tmp_path / "s.sqlite3"),
    )
    policy = VllmPolicy.from_settings(settings, tokenizer=embedded_tokenizer)
    assert policy.manages_versions and not isinstance(policy.renderer, ChatMLRenderer)
    done = policy.sample(prompt_of(policy), SampleParams(tools=["read"]))
    assert policy.renderer.parse_call(done.text) == ToolCall(
        tool="read", arguments={"path": "README.md"}
    )
    sampled = fake.requests[1][1]
    assert "structured_outputs" not in sampled and "guided_json" not in sampled
    assert sampled["stop_token_ids"] == policy.renderer.stop()
