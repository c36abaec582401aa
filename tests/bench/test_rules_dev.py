"""The allocator's dev set is well formed and keeps the validation repositories out."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "bench/data/rules-dev.jsonl"

# Kept for validation elsewhere (issue #17): no row may come from them.
HELD_OUT = {
    "01-ai/langcrew",
    "0xIntuition/intuition-contracts-v2",
    "0xfrankz/Kaas",
    "0xmichalis/nftbk",
    "7span/laravel-boilerplate",
    "9elements/firmware-action",
    "AU-Master-Thesis/magics",
    "BernardinD/PhotoWordFind",
    "GaneshRajuGalla/SoundTrackWireframe",
    "PostHog/posthog",
    "aaronrussell/beamlet",
    "cebartling/spring-boot-spikes",
    "djliden/multi-ai-code-cli",
    "dotnet/runtime",
    "ggml-org/llama.cpp",
    "google-gemini/gemini-cli",
    "home-assistant/core",
    "joshband/monument-reverb",
    "langchain-ai/langchain",
    "loopedsouls/mathquest",
    "microsoft/playwright",
    "microsoft/vscode",
    "n8n-io/n8n",
    "openai/codex",
    "pytorch/pytorch",
    "shakacode/react_on_rails",
    "travisdock/house-health",
    "twentyhq/twenty",
    "zed-industries/zed",
    "anthropics/claude-code",
    "github/copilot-cli",
    "copilot-extensions/user-feedback",
}


def _rows() -> list[dict]:
    return [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]


def repository(source: str) -> str:
    """`owner/repo:path` or a github.com issue address -> owner/repo (lower case)."""
    s = source.removeprefix("https://github.com/")
    return "/".join(s.split(":")[0].split("/")[:2]).lower()


def test_no_row_from_a_held_out_repository() -> None:
    held = {r.lower() for r in HELD_OUT}
    bad = [r["id"] for r in _rows() if repository(r["source"]) in held]
    assert bad == []


def test_at_most_four_rows_per_repository_and_enough_rows() -> None:
    rows = _rows()
    per_repo = Counter(repository(r["source"]) for r in rows if "://" not in r["source"])
    assert max(per_repo.values()) <= 4
    new_rules = [r for r in rows if r["origin"] == "rules-file"]
    requests = [r for r in rows if r["origin"] == "task-list" and r["lane"] == "NONE"]
    assert len(new_rules) >= 300 and len(requests) >= 80
    assert len({r["id"] for r in rows}) == len(rows)
    assert {r["lane"] for r in rows} == {"CODE", "WEIGHTS", "CONTEXT", "NONE"}
    assert all(r["source"] and 5 <= len(r["text"]) <= 300 for r in rows)
