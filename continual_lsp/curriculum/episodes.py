"""Exercises → training sequences, through the real tools and the agent's own prompt.

Each exercise is written to a temporary workspace and walked call by call: the prompt of
a turn is `Conversation.messages()` rendered by `ChatMLRenderer.render_prompt` (the
agent's system prompt, history format, notes, bullets and denial text), the target is
`render_call` (the canonical call the grammar lets the model write, then end-of-turn),
and the call is then executed by `ToolRunner` so the next turn sees its real output.

Correction-following episodes reuse the walk: at one turn the reviewer has denied a call
that broke a rule; `Conversation.add_feedback` renders that denial exactly as the agent
does, and the target is the compliant call. A note ("this project uses …") or a bullet
("Rules from the reviewer") changes the default call the same way without a denial.

The last target of a trajectory is `done` with a summary in plain words of what changed
(issue 30): after the change and its check (the tests run again, or the file read again).
Multi-step exercises start from a failing check: its real output (the assertion, the
file and line) is what the next calls act on, and the check must fail before the change
and pass after it, else the exercise is dropped. A call repeats an executed one only
when no file changed in between, as in the agent.
"""

from __future__ import annotations

import random
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from continual_lsp.agent.conversation import Conversation
from continual_lsp.config import Settings
from continual_lsp.policy.render import ChatMLRenderer, call_text
from continual_lsp.tools.base import FILE_CHANGING_TOOLS, ToolCall, ToolError, ToolResult
from continual_lsp.tools.runner import ToolRunner

from .exercises import Builder, Exercise, call, commit_call

# Generation runs many small checks; a sandbox per call would only add seconds.
TOOL_SETTINGS = Settings(sandbox="none", allow_unsandboxed=True, bash_timeout=60)


class Sequence(BaseModel):
    """One training sequence: tokens, and the [start, end) spans the loss is taken on."""

    tokens: list[int]
    spans: list[tuple[int, int]]
    kind: str
    episode: str  # "trajectory", "correction:<kind>", "note:<kind>"


def write_workspace(
    root: Path, files: dict[str, str], staged: dict[str, str] | None = None
) -> None:
    """`files`; with `staged`, a git repository: `files` committed, then `staged` written
    and added (a change made and staged, ready to commit)."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    if not staged:
        return
    for args in (
        ["init", "-q", "-b", "main"],
        ["config", "user.name", "Curriculum"],
        ["config", "user.email", "curriculum@example.invalid"],
        ["add", "-A"],
        ["commit", "-q", "--no-gpg-sign", "-m", "Initial version"],
    ):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
    write_workspace(root, staged)
    subprocess.run(["git", "add", *staged], cwd=root, check=True, capture_output=True)


def execute(runner: ToolRunner, c: ToolCall) -> ToolResult:
    """Run a call the way the agent does after approval; a ToolError becomes its result."""
    try:
        return runner.execute(c)
    except ToolError as exc:
        return ToolResult(ok=False, output=f"error: {exc}")


def _typo(rng: random.Random, text: str) -> str:
    """Swap two letters inside one longer plain word (reviewers type fast)."""
    words = [m for m in re.finditer(r"\b[a-z]{5,}\b", text)]
    if not words:
        return text
    m = rng.choice(words)
    i = rng.randrange(m.start() + 1, m.end() - 2)
    return text[:i] + text[i + 1] + text[i] + text[i + 2 :]


def phrase(vocab: dict[str, Any], rng: random.Random, kind: str, **slots: Any) -> str:
    """A reviewer's correction of `kind`: template, politeness, sometimes a typo."""
    text = str(rng.choice(vocab["corrections"][kind])).format(**slots)
    prefix = str(rng.choice(vocab["politeness"]))
    if prefix and text[:1].isupper() and not text.startswith(("I ", "`")):
        text = text[0].lower() + text[1:]
    text = prefix + text
    if rng.random() < 0.2:
        text = _typo(rng, text)
    return text


class Walk:
    """Prompt/target pairs of one exercise, merged into as few sequences as possible."""

    def __init__(self, renderer: ChatMLRenderer, kind: str) -> None:
        self.renderer = renderer
        self.kind = kind
        self.sequences: list[Sequence] = []
        self._chain: Sequence | None = None

    def add(self, prompt: list[int], target: list[int], episode: str) -> None:
        """Extend the running chain when `prompt` continues it, else start a new one."""
        chain = self._chain
        if chain is not None and prompt[: len(chain.tokens)] == chain.tokens:
            start = len(prompt)
            chain.tokens = prompt + target
            chain.spans.append((start, start + len(target)))
            if episode != "trajectory":
                chain.episode = episode
            return
        seq = Sequence(
            tokens=prompt + target,
            spans=[(len(prompt), len(prompt) + len(target))],
            kind=self.kind,
            episode=episode,
        )
        self.sequences.append(seq)
        if episode == "trajectory":
            self._chain = seq

    def side(self, prompt: list[int], target: list[int], episode: str) -> None:
        """A pair that no later prompt continues (a denial): its own sequence."""
        self.sequences.append(
            Sequence(
                tokens=prompt + target,
                spans=[(len(prompt), len(prompt) + len(target))],
                kind=self.kind,
                episode=episode,
            )
        )


def corrections_for(
    s: Exercise, turn: int, vocab: dict[str, Any], rng: random.Random
) -> list[tuple[str, str]]:
    """(kind, correction text) a reviewer could have written before plan[turn] was proposed."""
    c = s.plan[turn]
    out: list[tuple[str, str]] = []
    f = s.facts
    if turn in s.untrained:
        return out
    inserts = c.tool == "edit_lines" and c.arguments["end"] < c.arguments["start"]
    if c.tool == "edit_lines" and turn == s.change and not inserts:
        n = c.arguments["start"]
        out.append(("use_edit_lines", phrase(vocab, rng, "use_edit_lines", n=n, path=s.target)))
        out.append(("only_line", phrase(vocab, rng, "only_line", n=n)))
    if c.tool == "edit" and turn == s.change:
        out.append(("use_edit", phrase(vocab, rng, "use_edit", path=s.target)))
    if turn == s.change and "good" in f and s.kind in ("constant", "config"):
        out.append(("value", phrase(vocab, rng, "value", good=f["good"], bad=f["bad"])))
    if c.tool == "read" and turn == 0 and s.target:
        fn = f.get("fn") or Path(s.target).stem
        out.append(("wrong_file", phrase(vocab, rng, "wrong_file", fn=fn, path=s.target)))
        out.append(("look_first", phrase(vocab, rng, "look_first", path=s.target)))
    if c.tool == "read" and f.get("protected") and turn == s.change - 1:
        out.append(
            ("protected", phrase(vocab, rng, "protected", dir=f["protected"], path=s.target))
        )
    if c.tool == "bash" and s.kind == "add_dep" and c.arguments["cmd"] == f.get("good"):
        slots = {"mgr": f["mgr"], "badmgr": f["badmgr"], "good": f["good"]}
        out.append(("manager", phrase(vocab, rng, "manager", **slots)))
    if c.tool == "bash" and s.check and c.arguments["cmd"] == s.check and f.get("runner"):
        out.append(("runner", phrase(vocab, rng, "runner", good=s.check)))
    if c.tool == "write" and turn == s.change and f.get("test_dir"):
        slots = {"dir": f["test_dir"], "path": s.target}
        out.append(("test_dir", phrase(vocab, rng, "test_dir", **slots)))
    if c.tool == "bash" and f.get("ticket") and c.arguments["cmd"].startswith("git commit"):
        slots = {"ticket": f["ticket"], "prefix": f["prefix"]}
        out.append(("ticket", phrase(vocab, rng, "ticket", **slots)))
    return out


def adjust(s: Exercise, vocab: dict[str, Any], rng: random.Random) -> tuple[str, str | None]:
    """Draw the episode kind of a exercise and change its plan to fit.

    Returns (mode, note): mode is "plain", "correction" or "note"; a note is text to add
    to the conversation (or a reviewer bullet) that changes the default call.
    """
    f = s.facts
    roll = rng.random()
    if s.kind == "add_dep":
        # The default manager unless told otherwise (a note, a rule or a denial).
        if roll < 0.3:
            s.plan[-1] = call("bash", cmd=f["bad"])
            return "plain", None
        if roll < 0.6:
            note = rng.choice(vocab["notes"]["manager"]).format(mgr=f["mgr"])
            return "note", note
        return "correction", None
    if s.kind == "commit":
        # A team's message format (a ticket id first), told by a note or by a denial.
        if roll < 0.45:
            return "plain", None
        f["ticket"] = f"{rng.choice(vocab['ticket_keys'])}-{rng.randint(2, 999)}"
        f["prefix"] = str(rng.choice(vocab["ticket_forms"])).format(ticket=f["ticket"])
        f["message"] = f["prefix"] + f["message"]
        s.plan[-1] = commit_call(f["message"])
        if roll < 0.6:
            return "note", rng.choice(vocab["notes"]["ticket"]).format(ticket=f["ticket"])
        return "correction", None
    if s.kind == "add_test" and s.target not in s.task and roll < 0.4:
        # Where this project keeps its tests, when the task does not say.
        d = str(rng.choice(vocab["test_dirs"]))
        path = f"{d}/{Path(s.target).name}"
        s.plan = [
            call("write", path=path, content=p.arguments["content"]) if p.tool == "write" else p
            for p in s.plan
        ]
        s.target = path
        f["test_dir"] = d
        if roll < 0.1:
            return "note", rng.choice(vocab["notes"]["test_dir"]).format(dir=d)
        return "correction", None
    # Runner rules swap a test command; a multi-step task's check may be the program itself.
    if s.check and s.kind not in Builder.MULTI_STEP_KINDS and roll < 0.35:
        lang = "py" if s.check.startswith("python3") else "js"
        _bad, good = rng.choice(vocab["runners"][lang])
        s.plan = [
            call("bash", cmd=good) if p.arguments.get("cmd") == s.check else p for p in s.plan
        ]
        s.check = good
        f["runner"] = good
        if roll < 0.15:
            return "note", rng.choice(vocab["notes"]["runner"]).format(good=good)
        return "correction", None
    return ("correction" if roll < 0.7 else "plain"), None


def protect(s: Exercise, vocab: dict[str, Any], rng: random.Random) -> None:
    """Put a foreign copy of the target file under a directory the reviewer guards."""
    if s.language != "py" or not s.facts.get("fn") or s.plan[0].tool != "grep":
        return
    if rng.random() < 0.5:
        return
    d = rng.choice(vocab["protected_dirs"])
    s.files[f"{d}/{Path(s.target).name}"] = s.files[s.target]
    s.facts["protected"] = d


def walk(
    s: Exercise, renderer: ChatMLRenderer, vocab: dict[str, Any], rng: random.Random
) -> list[Sequence]:
    """The exercise's sequences (trajectory, maybe one denial or note); [] if its check fails."""
    protect(s, vocab, rng)
    mode, note = adjust(s, vocab, rng)
    turns = [i for i in range(len(s.plan)) if corrections_for(s, i, vocab, random.Random(0))]
    denial_turn = rng.choice(turns) if mode == "correction" and turns else None
    conv = Conversation(s.task)
    bullets: list[str] | None = None
    if note:
        if rng.random() < 0.5:
            conv.add_note(note)
        else:
            bullets = [note]
    out = Walk(renderer, s.kind)
    executed: set[str] = set()
    episode = f"note:{s.kind}" if note else "trajectory"
    with tempfile.TemporaryDirectory(prefix="curriculum-") as tmp:
        root = Path(tmp)
        write_workspace(root, s.files, s.staged)
        runner = ToolRunner(root, TOOL_SETTINGS)
        for turn, c in enumerate(s.plan):
            target = renderer.render_call(c)
            if turn == denial_turn:
                kind, text = rng.choice(corrections_for(s, turn, vocab, rng))
                conv.add_feedback(text)
                out.side(
                    renderer.render_prompt(conv.messages(bullets)), target, f"correction:{kind}"
                )
                conv.feedback = []
            if turn not in s.untrained:
                out.add(renderer.render_prompt(conv.messages(bullets)), target, episode)
            key = call_text(c)
            if s.kind == "add_dep" and c.tool == "bash":
                # Never run a package manager here (network, the host's environment).
                return out.sequences
            if key in executed:
                return out.sequences  # a repeat: the agent ends the task here
            result = execute(runner, c)
            # Before the change the check must fail (it is what the task is about), after
            # it pass (else the generator's fix is wrong): else the exercise is dropped.
            passed = result.exit_code == 0
            if c.tool == "bash" and c.arguments["cmd"] == s.check and passed != (turn >= s.change):
                return []
            if c.tool in FILE_CHANGING_TOOLS:
                executed = set()  # the workspace changed: looking again is no repeat
            executed.add(key)
            conv.add_call(c, result)
        prompt = renderer.render_prompt(conv.messages(bullets))
        out.add(prompt, renderer.render_call(done_call(s, vocab, rng)), episode)
    return out.sequences


def summary_of(s: Exercise, vocab: dict[str, Any], rng: random.Random) -> str:
    """What changed, in plain words, for the final `done` (from `vocab["summaries"]`)."""
    slots = {**s.facts, "path": s.target, "check": s.check or ""}
    slots["line"] = str(s.facts.get("new", "")).strip().split("\n")[-1].strip()
    text = str(rng.choice(vocab["summaries"][s.kind])).format(**slots)
    return " ".join(text.split())[:300]


def done_call(s: Exercise, vocab: dict[str, Any], rng: random.Random) -> ToolCall:
    return ToolCall(tool="done", arguments={"summary": summary_of(s, vocab, rng)})


def kind_at(i: int, multi_share: float | None = None) -> str:
    """The kind of the `i`-th exercise: every kind in turn, or with `multi_share` the
    multi-step kinds in turn whenever their running share would fall behind it, and the
    one-step kinds in turn otherwise."""
    if multi_share is None:
        every = Builder.KINDS + Builder.MULTI_STEP_KINDS
        return every[i % len(every)]
    multi_before = int(i * multi_share)
    if int((i + 1) * multi_share) > multi_before:
        return Builder.MULTI_STEP_KINDS[multi_before % len(Builder.MULTI_STEP_KINDS)]
    return Builder.KINDS[(i - multi_before) % len(Builder.KINDS)]


def generate(
    renderer: ChatMLRenderer,
    count: int,
    seed: int,
    vocab: dict[str, Any],
    multi_share: float | None = None,
) -> tuple[list[Sequence], int]:
    """`count` exercises from `seed`: (their sequences, how many were dropped). Every
    kind in turn; with `multi_share`, that fraction of the exercises are multi-step
    kinds (in turn) and the rest one-step kinds (in turn)."""
    rng = random.Random(seed)
    builder = Builder(vocab, rng)
    sequences: list[Sequence] = []
    dropped = 0
    for i in range(count):
        s = builder.exercise(kind_at(i, multi_share))
        got = walk(s, renderer, vocab, rng)
        if not got:
            dropped += 1
        sequences.extend(got)
    return sequences, dropped
