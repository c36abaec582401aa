"""Lanes: where a reviewer's correction lives — CODE (a guard), WEIGHTS (the adapter) or
CONTEXT (a cued bullet). DESIGN §5.

The agent's entry points (import from the submodules; this package imports nothing heavy
at import time so that `import continual_lsp.lanes` stays cheap):

- `routing.allocator.route_correction(store, text, situation, settings, *, denial=False,
  source=None) -> LaneItem | None` — detect, cluster, allocate, persist one correction,
  read once (`reading.read(text) -> Reading`, handed to every step that looks at it);
  `situation` (`reading.Situation`: the corrected call and its task) is None for a note.
  Before the lanes, a correction on a proposal that speaks of that change only comes back
  task-scoped (`lane == "NONE"`, `kind == scope.TASK_KIND`; see `scope.py`): no guard,
  no bullet; `routing_ledger.promote(store, item_id, settings) -> LaneItem` makes it standing.
- `guards.guard_set.check_guards(store, call, preview, history=()) -> GuardVerdict` — run
  every active guard; `history` (the task's executed calls, oldest first) lets sequence
  rules ("after changing X run Y") block a `git commit` that skips the step, and
  `GuardSet.from_store(store).missing_steps(history)` lists steps due before finishing.
- `guards.spec.GuardSpec.restrictions() -> Restrictions` — a guard's unconditional denials
  (tools per path glob, path prefixes never touched, command prefixes never run), for
  narrowing the decoding grammar.
- `context.bullets_for_turn(store, task_text, recent_calls, recent_paths, *, tokenizer)
  -> list[str]` and `context.render_bullets(bullets) -> str`.
- `routing_ledger.build_ledger(store) -> LedgerResult`, `routing_ledger.revert(store, item_id) -> str`.
- `rules_import.import_rules(store, path, settings) -> list[LaneItem]`,
  `rules_import.watch_rules(paths, callback, stop_event=...)`,
  `rules_import.routing_stats(store) -> dict`.
- `weights.on_weights_decision(...)` queues a job of kind `weights.JOB_KIND`; the training
  worker runs it with `continual_lsp.learning.consolidate.consolidate`, reading this lane
  through `learning.gate.situations_for_cluster` and the pure `learning.gate.gate`.
"""
