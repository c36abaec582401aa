"""xAI is used only when the setting asks for it, tested against a local fake of the
gRPC service the xai-sdk client talks to (chat.v6 GetCompletion, plain gRPC on loopback)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import pytest

from continual_lsp.config import Settings
from continual_lsp.lanes import llm
from continual_lsp.lanes.compile import llm_guard_spec
from continual_lsp.lanes.reading import read
from continual_lsp.lanes.routing.allocator import allocate
from continual_lsp.lanes.routing.detector import detect

grpc = pytest.importorskip("grpc")
chat_pb2 = pytest.importorskip("xai_sdk.proto.v6.chat_pb2")
chat_pb2_grpc = pytest.importorskip("xai_sdk.proto.v6.chat_pb2_grpc")
sample_pb2 = pytest.importorskip("xai_sdk.proto.v6.sample_pb2")

ANSWERS = {
    "DetectionAnswer": {"is_correction": True, "confidence": 0.9},
    "Allocation": {"checkable": False, "behavioural": True, "confidence": 0.8},
    "GeneratedGuard": {"feasible": False, "code": ""},
}


class FakeChat(chat_pb2_grpc.ChatServicer):
    """Answers GetCompletion with JSON for the requested schema and records the request."""

    def __init__(self) -> None:
        self.requests: list[Any] = []

    def GetCompletion(self, request: Any, context: Any) -> Any:
        self.requests.append(request)
        schema = json.loads(request.response_format.schema)
        content = json.dumps(ANSWERS[schema["title"]])
        message = chat_pb2.CompletionMessage(content=content, role=chat_pb2.ROLE_ASSISTANT)
        output = chat_pb2.CompletionOutput(
            index=0, message=message, finish_reason=sample_pb2.REASON_STOP
        )
        return chat_pb2.GetChatCompletionResponse(id="fake", outputs=[output], model=request.model)


@pytest.fixture()
def fake_xai(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeChat, str]]:
    servicer = FakeChat()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    chat_pb2_grpc.add_ChatServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    monkeypatch.setenv("XAI_API_KEY", "xai-test-not-a-key")
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        server.stop(0)


def test_a_key_alone_never_turns_xai_on(fake_xai, embedder) -> None:
    servicer, host = fake_xai
    settings = Settings(xai_host=host)  # allocator defaults to "offline"
    assert not llm.enabled(settings)
    assert (
        detect(read("Never modify git config."), embedder=embedder, settings=settings).source
        == "offline"
    )
    allocate(read("Keep changes small."), 1, settings, embedder=embedder)
    assert servicer.requests == []


def test_the_setting_turns_it_on_and_only_the_text_is_sent(fake_xai, embedder) -> None:
    servicer, host = fake_xai
    settings = Settings(allocator="xai", xai_host=host, xai_timeout_s=5)
    text = "Prefer small pull requests."
    det = detect(read(text), embedder=embedder, settings=settings)
    assert det.source == "llm" and det.is_correction and det.confidence == pytest.approx(0.9)
    d = allocate(read(text), 1, settings, embedder=embedder, recurrence_met=True)
    assert d.lane == "WEIGHTS"  # the fake says behavioural, not checkable
    assert llm_guard_spec("Every pull request MUST have 100% coverage.", settings) is None
    assert len(servicer.requests) == 3
    first = servicer.requests[0]
    contents = [part.text for m in first.messages for part in m.content]
    assert contents == [llm.PROMPTS["detect"], text]  # the prompt and the text, nothing else
    assert json.loads(first.response_format.schema) == llm.DetectionAnswer.model_json_schema()
    assert first.model == settings.xai_model


def test_unreachable_service_falls_back_offline(monkeypatch, embedder) -> None:
    monkeypatch.setenv("XAI_API_KEY", "xai-test-not-a-key")
    settings = Settings(allocator="xai", xai_host="127.0.0.1:9", xai_timeout_s=2)
    assert llm.enabled(settings)
    det = detect(read("Never modify git config."), embedder=embedder, settings=settings)
    assert det.source == "offline" and det.is_correction
    assert allocate(read("Never modify git config."), 1, settings, embedder=embedder).lane == "CODE"


def test_setting_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("CONTINUAL_LSP_ALLOCATOR", "xai")
    assert Settings.load().allocator == "xai"
    monkeypatch.setenv("CONTINUAL_LSP_ALLOCATOR", "grok")
    with pytest.raises(ValueError):
        Settings.load()
