"""Every active guard of a store run on one proposal, in creation order.

Rewrites chain (guard B sees guard A's rewrite); the first block wins. A guard that fails
(`GuardFailure`, or any error of its own) fails open with a logged warning, and after
`MAX_FAILURES` failures its item is deactivated.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from continual_lsp.lanes.guards import ALLOW, GuardVerdict, patterns
from continual_lsp.lanes.guards.evaluate import (
    GuardFailure,
    missing_first,
    rule_verdict,
    step_missing,
)
from continual_lsp.lanes.guards.spec import GuardSpec, ReadFirstRule, SequenceRule
from continual_lsp.store.db import Store
from continual_lsp.tools.base import Preview, ToolCall

log = logging.getLogger(__name__)

MAX_FAILURES = 3


class Guard:
    """One guard: an id (its lane item) and its spec."""

    def __init__(self, guard_id: str, spec: GuardSpec) -> None:
        self.id = guard_id
        self.spec = spec

    def check(
        self, call: ToolCall, preview: Preview | None, history: Sequence[ToolCall] = ()
    ) -> GuardVerdict:
        current = call
        rewritten = False
        for rule in self.spec.rules:
            if isinstance(rule, (SequenceRule, ReadFirstRule)):
                missing = missing_first(rule, current, history)
                if missing is not None:
                    return GuardVerdict(
                        action="block",
                        message=f"{self.spec.message} {missing}",
                        guard_id=self.id,
                    )
                continue
            action, args = rule_verdict(rule, current, preview)
            if action == "block":
                return GuardVerdict(action="block", message=self.spec.message, guard_id=self.id)
            if action == "rewrite":
                current = ToolCall(tool=current.tool, arguments=args)
                rewritten = True
        if rewritten:
            return GuardVerdict(
                action="rewrite",
                message=self.spec.message,
                rewritten_call=current,
                guard_id=self.id,
            )
        return ALLOW


class GuardSet:
    """All active guards of one store, checked in creation order.

    Rewrites chain (guard B sees guard A's rewrite); the first block wins.
    """

    def __init__(self, guards: list[Guard], store: Store | None = None) -> None:
        self.guards = guards
        self.store = store

    @classmethod
    def from_store(cls, store: Store) -> GuardSet:
        guards = []
        for item in store.lane_items(lane="CODE", active_only=True):
            spec = item.get("spec") or {}
            if not spec.get("rules"):
                continue  # a CODE decision still waiting for a guard (kept as a bullet)
            try:
                guards.append(Guard(item["id"], GuardSpec.model_validate(spec)))
            except ValueError as exc:
                log.warning("guard %s has an invalid spec, skipped: %s", item["id"], exc)
        return cls(guards, store)

    def check(
        self, call: ToolCall, preview: Preview | None = None, history: Sequence[ToolCall] = ()
    ) -> GuardVerdict:
        current = call
        notes: list[str] = []
        last_id: str | None = None
        for guard in self.guards:
            try:
                verdict = guard.check(current, preview, history)
            except patterns.PatternTimeout:
                # The proposal's text made a lookaround pattern slow: blocked, never run
                # unchecked, and not held against the guard (a text could disable it).
                why = "(the change could not be checked in time)"
                return GuardVerdict(
                    action="block", message=f"{guard.spec.message} {why}", guard_id=guard.id
                )
            except GuardFailure as exc:
                self._failed(guard, str(exc))
                continue
            except Exception as exc:  # a bad regex in a spec must not take the agent down
                self._failed(guard, f"{type(exc).__name__}: {exc}")
                continue
            if verdict.action == "block":
                return verdict
            if verdict.action == "rewrite" and verdict.rewritten_call is not None:
                current = verdict.rewritten_call
                notes.append(verdict.message)
                last_id = guard.id
        if current is not call and current != call:
            return GuardVerdict(
                action="rewrite", message=" ".join(notes), rewritten_call=current, guard_id=last_id
            )
        return ALLOW

    def missing_steps(
        self, history: Sequence[ToolCall], before: str = "finish"
    ) -> list[tuple[str, str]]:
        """(guard id, step) for each runnable sequence step due before the task commits or
        finishes: the agent proposes these instead of finishing."""
        due = []
        for guard in self.guards:
            for rule in guard.spec.rules:
                if (
                    isinstance(rule, SequenceRule)
                    and rule.runnable
                    and (before == "finish" or rule.before == before)
                    and step_missing(rule, history)
                ):
                    due.append((guard.id, rule.step))
        return due

    def _failed(self, guard: Guard, error: str) -> None:
        log.warning("guard %s failed open: %s", guard.id, error)
        if self.store is None:
            return
        name = f"guard_failures:{guard.id}"
        self.store.bump(name)
        self.store.append_event("guard_failure", {"itemId": guard.id, "error": error[:500]})
        if self.store.counter(name) >= MAX_FAILURES:
            log.warning("guard %s disabled after %d failures", guard.id, MAX_FAILURES)
            self.store.update_lane_item(guard.id, active=False)
            self.guards = [g for g in self.guards if g.id != guard.id]


def check_guards(
    store: Store,
    call: ToolCall,
    preview: Preview | None = None,
    history: Sequence[ToolCall] = (),
) -> GuardVerdict:
    """The agent's entry point: run every active guard of `store` on one proposal.

    `history`: the task's executed calls, oldest first (sequence rules need them)."""
    return GuardSet.from_store(store).check(call, preview, history)
