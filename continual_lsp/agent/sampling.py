"""What the model is asked for a turn: the prompt fitted to its window, the decoding
limits, the parameters of a batch of candidates, and the turn's own call (`sample`)."""

from __future__ import annotations

from continual_lsp.agent.candidates import canonical
from continual_lsp.agent.conversation import KEEP_CALLS
from continual_lsp.agent.errors import AgentError
from continual_lsp.agent.parts import Parts, Task
from continual_lsp.policy.base import Completion, DecodeRestrictions, SampleParams
from continual_lsp.tools.base import READ_ONLY_TOOLS, TOOL_NAMES, ToolCall


def fit_prompt(parts: Parts, task: Task) -> list[int]:
    """The turn's prompt with the lanes' bullets for it, dropping the oldest calls
    (summarised in one line) until it and the call fit the model's context window."""
    bullets = parts.lanes.bullets_for_turn(
        task.text, task.conversation.recent_calls(), task.conversation.recent_paths()
    )
    renderer = parts.policy.renderer
    window = parts.policy.context_window
    room = window - parts.settings.max_new_tokens
    keep = KEEP_CALLS
    while True:
        tokens = renderer.render_prompt(task.conversation.messages(bullets, keep=keep))
        if len(tokens) <= room:
            return tokens
        if keep == 0:
            raise AgentError(
                f"the task and its rules need {len(tokens)} tokens, more than the "
                f"model's window leaves for a prompt ({room}); shorten the task text"
            )
        keep -= 1


def decode_limits(parts: Parts) -> DecodeRestrictions:
    """What no sampled call may say: the guards' limits, and a path to read or edit
    that names no file of the workspace (Settings.decode_paths_limit)."""
    limits = parts.lanes.decode_restrictions()
    limits.files = parts.tools.listed_files(parts.settings.decode_paths_limit)
    return limits


def batch_params(parts: Parts, task: Task, *, greedy_rows: int, salt: int) -> SampleParams:
    """How a batch of candidates is sampled (a retry; the calls in place of one that
    cannot run): warm, every allowed tool, the guards' decoding limits, a seed of the
    turn (`salt` keeps the two batches of one turn apart)."""
    settings = parts.settings
    return SampleParams(
        temperature=settings.retry_temperature,
        greedy_rows=greedy_rows,
        max_tokens=settings.max_new_tokens,
        seed=settings.seed + salt + 31 * task.turn + 7 * task.retries,
        tools=settings.allowed_tools,
        forbid=decode_limits(parts),
    )


def _repeats(task: Task, call: ToolCall) -> bool:
    """Whether `call` repeats one already run: it gives way to another sample (a task ends
    by `done`, the turn limit or the reviewer, never by a repeat). Looking again right
    after a call that could not run is not a repeat: the model is checking the text it
    got wrong."""
    if call.read_only and task.invalid_streak > 0:
        return False
    return canonical(call) in task.executed


def sample(parts: Parts, task: Task) -> tuple[ToolCall | None, Completion, list[int], bool]:
    """A call for the turn, or None when no try gave a valid, new one (and whether the
    tries only repeated calls already run).

    A repeat is sampled again, warmer. When the first two tries only repeat, the last
    is decoded under a narrowed grammar: with nothing done yet (only looks), it may
    only act, so a task never ends on its first look with nothing shown; else it may
    only be `done`, in the model's own words. A model that keeps repeating what it
    ran has nothing new to do, which is what `done` says, and the reviewer, not the
    repeat, decides whether the task is finished ("not done: the test still fails" is
    a correction like any other). This is the fallback for weights never trained to
    say `done` (the shipped starter, until it is); without it such tasks would run
    to the turn limit. When `done` is not an allowed tool, the last try is not
    narrowed.
    """
    policy, settings, store = parts.policy, parts.settings, parts.store
    # What the student proposes after a correction comes from the weights that learned it.
    parts.landing.join()
    # A step may have landed in the background (a resumed job, a timed-out wait):
    # sample from the version the proposal will be labelled with.
    parts.training.sync_sampler(policy)
    prompt_tokens = fit_prompt(parts, task)
    completion = Completion(tokens=[], logprobs=[], text="")
    forbid = decode_limits(parts)
    repeats = 0
    for attempt in range(3):
        tools = settings.allowed_tools
        if attempt == 2 and repeats == 2:
            tools = _last_try_tools(task, tools)
        params = SampleParams(
            temperature=settings.temperature if attempt == 0 else 0.8,
            max_tokens=settings.max_new_tokens,
            seed=settings.seed + attempt + 31 * task.turn + 7 * task.retries,
            tools=tools,
            forbid=forbid,
        )
        completion = policy.sample(prompt_tokens, params)
        try:
            call = policy.renderer.parse_call(completion.text)
        except ValueError as exc:
            store.append_event(
                "parse_error", {"text": completion.text, "error": str(exc)}, task_id=task.id
            )
            continue
        if _repeats(task, call):
            # Already ran: the model may be done, or stuck re-reading a file (a 135M
            # model often is).
            store.append_event("repeat_of_executed", {"call": call.model_dump()}, task.id)
            repeats += 1
            continue
        return call, completion, prompt_tokens, False
    return None, completion, prompt_tokens, repeats == 3


def _last_try_tools(task: Task, tools: list[str] | None) -> list[str] | None:
    """The tools of a turn's last try after two repeats (`sample`)."""
    allowed = list(tools or TOOL_NAMES)
    if all(c.read_only for c in task.history):
        acting = [t for t in allowed if t not in READ_ONLY_TOOLS and t != "done"]
        return acting or tools
    return ["done"] if "done" in allowed else tools
