"""A sequence guard's missing step is proposed when the agent would finish without it
(real embedded model, real tools, real store)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from continual_lsp.tools.base import ToolCall
from tests.agent.support import make_agent

pytestmark = pytest.mark.model


def test_the_agent_proposes_the_missing_step_instead_of_finishing(
    tmp_path: Path, workspace: Path, policy: Any
) -> None:
    # The grammar only lets the model write: a bash proposal can only be the guard's step.
    agent = make_agent(tmp_path, workspace, policy, allowed_tools=["write"], max_turns=8)
    agent.store.add_lane_item(
        {
            "text": "after changing files run `echo checked`",
            "lane": "CODE",
            "reason": "test",
            "spec": {
                "message": "after changing files run `echo checked`",
                "rules": [
                    {"kind": "sequence", "command": r"\becho checked\b", "step": "echo checked"}
                ],
            },
        }
    )
    _, proposal = agent.start_task("Create notes.txt that says hello")
    done = None
    while proposal is not None and proposal.call.tool == "write":
        outcome = agent.decide(proposal.id, "approve")
        proposal, done = outcome.next_proposal, outcome.task_done
    assert done is None, done  # it did not finish with the step missing
    assert proposal is not None
    assert proposal.call == ToolCall(tool="bash", arguments={"cmd": "echo checked"})
    assert proposal.note is not None and "before it finishes" in proposal.note
    outcome = agent.decide(proposal.id, "approve")
    assert outcome.result is not None and "checked" in outcome.result.output
    agent.close()
