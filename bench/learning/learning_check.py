"""The recipe's learning check: does a candidate starter learn from denials at least as
well as the one it would replace? (issue 33; run by scripts/check_starter_learns.sh)

    python bench/learning/learning_check.py SHIPPED.json CANDIDATE.json

Each file is a `through_agent.py --summary` of the same scenarios run the same way
(deny-only reviewer). What a starter "learns" is the mean over those scenarios of the
weights-only held-out compliance at the 5th correction (`weights_at_5`), the number issue
33's bar is about; shown-at-3 and retry-follows are printed beside it, not gated. Exit 1,
"not shipped", when the candidate learns less; a scenario either run did not reach
counts as 0 for it (a run that stopped early is not a pass).
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
        f"shipped: the candidate learns as much or more ({learned_new:.3f} >= {learned_old:.3f})"
        if ok
        else f"not shipped: learns less than the one it replaces ({learned_new:.3f} < {learned_old:.3f})"
    )
    return ok, "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    shipped, candidate = (json.loads(Path(a).read_text()) for a in args)
    ok, text = verdict(shipped, candidate)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
