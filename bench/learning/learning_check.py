"""The recipe's learning check: does a candidate starter learn from denials at least as
well as the one it would replace? (issue 33; run by scripts/check_starter_learns.sh)

    python bench/learning/learning_check.py SHIPPED.json CANDIDATE.json
        [SHIPPED_SKILL.json CANDIDATE_SKILL.json]

Each of the first two files is a `through_agent.py --summary` of the same scenarios run
the same way (deny-only reviewer); the optional two are `bench/agent_skill.py
--policies starter --skill-only --out` of each adapter, and a candidate that finishes
fewer one-step or multi-step tasks is not shipped either (issue 33: the skill must not
drop; a 2026-12-07 candidate learned more and finished 27/36 against 29/36).

What a starter "learns" is the mean over those scenarios of the weights-only held-out
compliance at the 5th correction (`weights_at_5`), the number issue 33's bar is about;
shown-at-3 and retry-follows are printed beside it, not gated. Exit 1, "not shipped", when
the candidate learns less; a scenario either run did not reach counts as 0 for it (a run
that stopped early is not a pass).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

KEYS = ("weights_at_5", "shown_at_3", "retry_follows")


def mean_of(summary: dict[str, Any], key: str, scenarios: list[str]) -> float:
    """Mean of `key` over `scenarios` (missing or None: 0)."""
    values = [float((summary.get(name) or {}).get(key) or 0.0) for name in scenarios]
    return sum(values) / max(1, len(values))


def verdict(shipped: dict[str, Any], candidate: dict[str, Any]) -> tuple[bool, str]:
    """(ship it?, the lines to print) for two `{"scenarios": {name: headline}}` summaries;
    compared over the scenarios the shipped run measured."""
    names = sorted(shipped.get("scenarios", {}))
    if not names:
        return False, "not shipped: the shipped adapter's run measured no scenario"
    old, new = shipped["scenarios"], candidate.get("scenarios", {})
    lines = [
        f"{key:>14}: shipped {mean_of(old, key, names):.3f}  candidate {mean_of(new, key, names):.3f}"
        for key in KEYS
    ]
    learned_old = mean_of(old, "weights_at_5", names)
    learned_new = mean_of(new, "weights_at_5", names)
    ok = learned_new >= learned_old
    lines.append(
        f"passes: the candidate learns as much or more ({learned_new:.3f} >= {learned_old:.3f})"
        if ok
        else f"not shipped: learns less than the one it replaces ({learned_new:.3f} < {learned_old:.3f})"
    )
    return ok, "\n".join(lines)


SKILL_KEYS = ("one_step", "multi_step")


def skill_verdict(shipped: dict[str, Any], candidate: dict[str, Any]) -> tuple[bool, str]:
    """(ship it?, the lines to print) for two `agent_skill.py` summaries of the starter:
    the candidate finishes at least as many one-step and multi-step tasks."""
    ok = True
    lines = []
    for key in SKILL_KEYS:
        old = float(shipped["starter"][key]["finished"])
        new = float(candidate["starter"][key]["finished"])
        lines.append(f"{key + ' finished':>20}: shipped {old:.3f}  candidate {new:.3f}")
        ok = ok and new >= old
    lines.append(
        "passes: the candidate finishes as many agent-skill tasks or more"
        if ok
        else "not shipped: finishes fewer agent-skill tasks than the one it replaces"
    )
    return ok, "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 4):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    shipped, candidate, *skill = (json.loads(Path(a).read_text()) for a in args)
    ok, text = verdict(shipped, candidate)
    print(text)
    if skill:
        skill_ok, skill_text = skill_verdict(*skill)
        print(skill_text)
        ok = ok and skill_ok
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
