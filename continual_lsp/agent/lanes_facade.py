"""The agent's one door into the lanes: routing, guards, cued bullets, the ledger."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from continual_lsp.config import Settings
from continual_lsp.lanes import allow_rules, context, routing_ledger
from continual_lsp.lanes.guards import GuardVerdict, feedback, guard_set
from continual_lsp.lanes.guards.commands import is_commit
from continual_lsp.lanes.reading import Situation
from continual_lsp.lanes.routing import allocator
from continual_lsp.policy.base import DecodeRestrictions
from continual_lsp.protocol import LedgerResult, RoutedNotification
from continual_lsp.store import Store
from continual_lsp.tools.base import Preview, ToolCall
from continual_lsp.tools.globs import directory_prefix

log = logging.getLogger(__name__)


class CorrectedCall(Protocol):
    """What routing reads of a corrected proposal (the agent's `Proposal` has it)."""

    id: str
    call: ToolCall
    preview: Preview | None


class LanesFacade:
    def __init__(
        self, store: Store, settings: Settings, count_tokens: Callable[[str], int]
    ) -> None:
        self.store = store
        self.settings = settings
        self._count_tokens = count_tokens

    def route_correction(
        self,
        text: str,
        proposal: CorrectedCall,
        *,
        is_denial: bool,
        task_text: str | None = None,
        demonstration: ToolCall | None = None,
    ) -> RoutedNotification | None:
        situation = Situation(
            proposal_id=proposal.id,
            task_text=task_text,
            tool=proposal.call.tool,
            arguments=proposal.call.arguments,
            demonstration=demonstration,
            path=proposal.preview.path if proposal.preview else proposal.call.arguments.get("path"),
        )
        item = allocator.route_correction(
            self.store, text, situation, self.settings, denial=is_denial, source=proposal.id
        )
        return self._routed(item)

    def cluster_demonstrations(self, item_id: str, exclude: str) -> list[ToolCall]:
        """Calls the reviewer accepted after earlier corrections routed with `item_id`'s
        cluster (not the proposal `exclude` itself)."""
        # deferred: learning/ loads torch (1.2 s); the agent imports none, so a server answers initialize before it
        from continual_lsp.learning.gate import cluster_demonstrations

        item = self.store.lane_item(item_id)
        if item is None or not item.get("cluster_id"):
            return []
        return cluster_demonstrations(self.store, item["cluster_id"], exclude=exclude)

    def route_note(self, text: str) -> RoutedNotification | None:
        """A note is routed only when the detector calls it a standing correction."""
        return self._routed(allocator.route_correction(self.store, text, None, self.settings))

    @staticmethod
    def _routed(item: allocator.LaneItem | None) -> RoutedNotification | None:
        if item is None or item.lane == "NONE":
            return None
        return RoutedNotification(item_id=item.id, lane=item.lane, reason=item.reason)

    def check_guards(
        self, call: ToolCall, preview: Preview | None, history: Sequence[ToolCall] = ()
    ) -> GuardVerdict:
        """`history`: the task's executed calls, oldest first (sequence rules read it)."""
        return guard_set.check_guards(self.store, call, preview, history)

    def guard_overridden(self, guard_id: str, proposal_id: str) -> RoutedNotification | None:
        """The reviewer ran a call `guard_id` blocked; the guard's retirement to CONTEXT
        when that was one override too many."""
        return feedback.record_override(self.store, guard_id, proposal_id)

    def let_through(
        self,
        guard_ids: Sequence[str],
        call: ToolCall,
        preview: Preview | None,
        history: Sequence[ToolCall],
        what: str,
    ) -> list[RoutedNotification]:
        """Narrow or drop the guards of `guard_ids` (compiled from this task's denials)
        that would block `call`, which the reviewer accepted (`guards.feedback`)."""
        return feedback.let_through(self.store, guard_ids, call, preview, history, what)

    def due_step(self, history: Sequence[ToolCall], call: ToolCall | None) -> str | None:
        """The step a sequence guard still requires before `call` commits, or (`call`
        None) before the task finishes; None when nothing is due."""
        if call is not None and not is_commit(call):
            return None
        before = "finish" if call is None else "commit"
        due = guard_set.GuardSet.from_store(self.store).missing_steps(history, before)
        return due[0][1] if due else None

    def allow_match(
        self, call: ToolCall, preview: Preview | None, workspace: str
    ) -> allow_rules.AllowMatch | None:
        """The allow rule that lets `call` run unasked (consult only after the guards)."""
        return allow_rules.match(self.store, call, preview, workspace)

    def allow_offer(
        self, call: ToolCall, preview: Preview | None, workspace: str, after: int
    ) -> tuple[allow_rules.AllowSpec, list[str]] | None:
        return allow_rules.offer(self.store, call, preview, workspace, after)

    def add_allow_rule(
        self, call: ToolCall, preview: Preview | None, workspace: str, source: str, learned: bool
    ) -> tuple[str, str]:
        """(item id, what it allows); ValueError saying why calls like this cannot be."""
        spec, why = allow_rules.call_class(call, preview, workspace)
        if spec is None:
            raise ValueError(why)
        spec.approvals = allow_rules.approvals_of(self.store, spec)
        return allow_rules.add_rule(self.store, spec, source, learned), spec.summary()

    def decode_restrictions(self) -> DecodeRestrictions:
        """The active guards' blocks that a grammar can express, so the sampler never
        writes them (DESIGN §4). The one place that turns guards into decoding limits.

        From each guard's own `restrictions()` (its unconditional denials), keeping only
        what a prefix can say exactly: a tool blocked everywhere (prefix ""), a blocked
        glob that names a whole directory (`dir/`, `dir/**`), a literal command prefix.
        Rewrites, content and sequence rules stay with the guard.
        """
        paths: dict[str, set[str]] = {}
        commands: set[str] = set()
        for guard in guard_set.GuardSet.from_store(self.store).guards:
            restrictions = guard.spec.restrictions()
            for tool, globs in restrictions.tools_blocked.items():
                for glob in globs:
                    if glob == "**":
                        paths.setdefault(tool, set()).add("")
                    elif prefix := directory_prefix(glob):
                        paths.setdefault(tool, set()).add(prefix)
            commands.update(prefix + " " for prefix in restrictions.command_prefixes_never)
        return DecodeRestrictions(
            path_prefixes={tool: sorted(p) for tool, p in sorted(paths.items())},
            command_prefixes=sorted(commands),
        )

    def bullets_for_turn(
        self, task_text: str, recent_calls: list[ToolCall], recent_paths: list[str]
    ) -> list[str]:
        return context.bullets_for_turn(
            self.store, task_text, recent_calls, recent_paths, tokenizer=self._count_tokens
        )

    def ledger(self) -> LedgerResult:
        return routing_ledger.build_ledger(self.store)

    def promote(self, item_id: str) -> RoutedNotification:
        """A task-scoped correction made standing (`routing_ledger.promote`); LedgerError
        when the id names no task-scoped item."""
        item = routing_ledger.promote(self.store, item_id, self.settings)
        return RoutedNotification(item_id=item.id, lane=item.lane, reason=item.reason)

    def revert(self, item_id: str) -> int | None:
        """Deactivate a bullet or guard; for an adapter id, the version the caller must revert."""
        try:
            routing_ledger.revert(self.store, item_id)
        except routing_ledger.AdapterRevertNeeded as exc:
            return exc.version
        return None
