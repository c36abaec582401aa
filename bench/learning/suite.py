"""The suite: every method on every scenario, k corrections at a time, same seeds.

Methods (`METHODS`):

- `sdpo_token` / `sdpo_topk`: one `learning.sdpo.sdpo_step` per correction (the agent's
  own step: the student's greedy proposal `y`, the reviewer's correction and edit as the
  teacher's context, KL to the reference), `loss_mode` "token" or "topk".
- `sft`: one cross-entropy `train_step` on the demonstrated call per correction (no KL:
  plain supervised fine-tuning, the usual baseline).
- `context`: no training; the rule rides in the prompt as the context lane's bullet.
- `none`: the base model.

Measured at each k in `ks` on the scenario's held-out situations, *without* the
correction in the prompt (except `context`, whose bullet is its whole mechanism):
compliance of the greedy proposal under the grammar, the log-probability margin
`log p(compliant call) − log p(violating call)`, drift (mean full-vocabulary KL of the
adapter to the base on unrelated prompts), seconds per correction, context tokens per call.

Every trained method starts each scenario from the same adapter initialisation (captured
once and restored, not reloaded), so methods differ only in their updates.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.learning.scenarios import (
    SCENARIOS,
    WORKSPACES,
    Scenario,
    ScenarioCase,
    judge_text,
    select,
)
from continual_lsp.agent.scenarios import situation_messages, tool_output
from continual_lsp.config import Settings
from continual_lsp.policy.base import Datum, Message, SampleParams

log = logging.getLogger("bench.learning")

METHODS = ["sdpo_token", "sdpo_topk", "sft", "context", "none"]
TRAINED = ("sdpo_token", "sdpo_topk", "sft")
DEFAULT_KS = [1, 2, 3, 5, 8]
RULES_HEADER = "Rules from the reviewer:"  # as agent/conversation.py renders bullets

# Unrelated chat turns for drift: an adapter that learned "use pnpm" should not change
# how the model answers these. KL is measured on the answer tokens.
DRIFT_PROMPTS: list[tuple[str, str]] = [
    ("What is the capital of France?", "The capital of France is Paris."),
    ("Write a haiku about autumn leaves.", "Red leaves drift and fall,\nthe path fills with gold."),
    ("Explain recursion in one sentence.", "A function that calls itself on a smaller input."),
    ("How do I say good morning in Spanish?", "You say buenos días."),
]


@dataclass
class SuiteConfig:
    ks: list[int] = field(default_factory=lambda: list(DEFAULT_KS))
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    scenarios: list[str] = field(default_factory=lambda: [s.name for s in SCENARIOS])
    held_out: int = 4  # held-out situations per scenario (at most the scenario's count)
    lr: float | None = None  # None: settings.learning_rate
    seed: int = 0
    drift_prompts: int = len(DRIFT_PROMPTS)  # the smoke test uses fewer


@dataclass
class Point:
    """One (scenario, method, k) measurement."""

    scenario: str
    method: str
    k: int
    compliance: float
    margin: float  # mean over held-out situations of log p(compliant) − log p(violating)
    drift_kl: float | None  # None where the backend gives no full distribution
    seconds_per_correction: float
    context_tokens: int  # tokens this method carries per call for the rule
    notes_only_tokens: int  # what a notes-only agent carries after k corrections per scenario
    train_proposals_compliant: int = 0  # of the k training proposals, already compliant
    proposals: list[dict[str, Any]] = field(default_factory=list)


# -- prompts ----------------------------------------------------------------------------------


class Prompts:
    """ScenarioCase → prompt tokens, with the real tools' output for the calls in its history."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self._outputs: dict[tuple[str, str], str] = {}

    def tool_output(self, workspace: str, tool: str, args: dict[str, Any]) -> str:
        key = (workspace, json.dumps([tool, args], sort_keys=True))
        if key not in self._outputs:
            self._outputs[key] = tool_output(WORKSPACES / workspace, tool, args)
        return self._outputs[key]

    def messages(self, s: ScenarioCase, bullets: list[str] | None = None) -> list[Message]:
        history = [
            (
                tool,
                args,
                output if output is not None else self.tool_output(s.workspace, tool, args),
            )
            for tool, args, output in s.history
        ]
        return situation_messages(s.task, history, bullets)

    def tokens(self, s: ScenarioCase, bullets: list[str] | None = None) -> list[int]:
        return list(self.policy.renderer.render_prompt(self.messages(s, bullets)))


def bullet_block_tokens(policy: Any, rule: str) -> int:
    """Tokens the context lane adds to a prompt for this rule (header + bullet line)."""
    return len(policy.renderer.tokenize(f"{RULES_HEADER}\n- {rule}"))


def notes_only_tokens(policy: Any, scenarios: list[Scenario], k: int) -> int:
    """A notes-only agent carries every correction given so far, verbatim, on every call."""
    return sum(
        len(policy.renderer.tokenize(f"- {s.correction}")) for sc in scenarios for s in sc.train[:k]
    )


def cue_hit_rate(scenario: Scenario, situations: list[ScenarioCase]) -> float | None:
    """How often the real context lane's cue for this rule would fire on these situations."""
    try:
        from continual_lsp.lanes.context import cue_matches, make_cue
        from continual_lsp.lanes.reading import read
        from continual_lsp.tools.base import ToolCall

        cue = make_cue(read(scenario.rule))
        hits = 0
        for s in situations:
            calls = [ToolCall(tool=t, arguments=a) for t, a, _ in s.history]  # type: ignore[arg-type]
            hits += bool(cue_matches(cue, s.task, calls))
        return hits / max(1, len(situations))
    except Exception as exc:  # the lane is another engineer's module; report, don't fail
        log.warning("cue matching unavailable: %s", exc)
        return None


# -- the bench --------------------------------------------------------------------------------


class Bench:
    """One loaded policy, reset between (method, scenario) runs."""

    def __init__(
        self,
        settings: Settings,
        policy: Any,
        config: SuiteConfig,
        policy_factory: Callable[[], Any] | None = None,
    ) -> None:
        self.settings = settings
        self.policy = policy
        self.config = config
        # Remote backends cannot restore an adapter in place: make a fresh one per run.
        self.policy_factory = policy_factory
        self.local = policy.logit_scorer() is not None
        self._init_state: Any = None
        if self.local:
            from continual_lsp.policy.local import adapter_files

            self._init_state = adapter_files.adapter_state(policy)
        self.prompts = Prompts(policy)
        self._drift_inputs: list[tuple[list[int], list[int]]] | None = None

    # -- state --

    def reset(self) -> None:
        """Back to the initial adapter (same LoRA A init for every method), fresh optimizer."""
        if self.local:
            import torch

            from continual_lsp.policy.local import adapter_files

            with torch.no_grad():
                adapter_files.set_adapter_state(self.policy, self._init_state)
            self.policy.train_state.bump(reset_optimizers=True)
            self.policy.adapter_version = None
            torch.manual_seed(self.config.seed)
        elif self.policy_factory is not None:
            self.policy = self.policy_factory()
            self.prompts = Prompts(self.policy)

    def method_settings(self, method: str) -> Settings:
        loss_mode = "topk" if method == "sdpo_topk" else "token"
        lr = self.config.lr if self.config.lr is not None else self.settings.learning_rate
        return self.settings.model_copy(update={"loss_mode": loss_mode, "learning_rate": lr})

    # -- proposals and scores --

    def propose(self, scenario: Scenario, prompt: list[int]) -> Any:
        params = SampleParams(
            temperature=0.0,
            max_tokens=scenario.max_tokens,
            seed=self.config.seed,
            tools=scenario.tools,
        )
        return self.policy.sample(prompt, params)

    def call_logprob(self, prompt: list[int], call: dict[str, Any]) -> float:
        from continual_lsp.tools.base import ToolCall

        tokens = list(self.policy.renderer.render_call(ToolCall.model_validate(call)))
        if self.local:
            from continual_lsp.policy.local import lora_step

            # Prefix-cached: the compliant and the violating call share the prompt's KV.
            return float(sum(lora_step.token_logprobs(self.policy, prompt, tokens)))
        return float(sum(self.policy.logprobs(prompt, tokens)))

    def evaluate(
        self, scenario: Scenario, bullets: list[str] | None = None
    ) -> tuple[float, float, list[dict[str, Any]]]:
        """(compliance, mean margin, per-situation records) on the held-out situations."""
        ok = 0
        margins = []
        records = []
        for s in scenario.held_out[: self.config.held_out]:
            prompt = self.prompts.tokens(s, bullets)
            completion = self.propose(scenario, prompt)
            judged = judge_text(completion.text, self.policy.renderer.parse_call)
            complied = bool(scenario.check(judged))
            ok += complied
            margin = self.call_logprob(prompt, s.demo) - self.call_logprob(prompt, s.violation)
            margins.append(margin)
            records.append(
                {
                    "situation": s.id,
                    "text": completion.text,
                    "complete": judged.complete,
                    "complied": complied,
                    "margin": round(margin, 3),
                    "prompt_tokens": len(prompt),
                }
            )
        n = max(1, len(records))
        return ok / n, sum(margins) / n, records

    def drift(self) -> float | None:
        """Mean per-token KL(adapter ‖ base) over the answers of DRIFT_PROMPTS."""
        if not self.local:
            return None
        import torch

        from continual_lsp.policy import losses

        if self._drift_inputs is None:
            tok = self.policy.tokenizer
            self._drift_inputs = []
            for question, answer in DRIFT_PROMPTS[: self.config.drift_prompts]:
                if getattr(tok, "chat_template", None):
                    text = tok.apply_chat_template(
                        [{"role": "user", "content": question}],
                        tokenize=False,
                        add_generation_prompt=True,
                    )
                else:  # a base model given with --model: plain text works the same way
                    text = f"Question: {question}\nAnswer: "
                prompt = self.policy.renderer.tokenize(str(text))
                answer_ids = self.policy.renderer.tokenize(answer)
                answer_ids.append(self.policy.renderer.end_of_turn_id)
                self._drift_inputs.append((prompt, answer_ids))
        model = self.policy.model
        total, count = 0.0, 0
        # One plain forward per prompt and weights (no KV-cache machinery): ~60 tokens each.
        for prompt, answer in self._drift_inputs:
            ids = torch.tensor([prompt + answer], dtype=torch.long, device=self.policy.device)
            n = len(answer)
            with torch.inference_mode():
                student = model(input_ids=ids, use_cache=False).logits[0, -n - 1 : -1]
                with model.disable_adapter():
                    reference = model(input_ids=ids, use_cache=False).logits[0, -n - 1 : -1]
                kl = losses.full_kl(student.float(), reference.float())
            total += float(kl.sum())
            count += n
        return total / max(1, count)

    # -- one correction --

    def correct(self, method: str, scenario: Scenario, s: ScenarioCase) -> tuple[float, bool]:
        """Apply one reviewer correction with `method`; (seconds of the step, proposal ok)."""
        from continual_lsp.learning.sdpo import SdpoJob, sdpo_step
        from continual_lsp.tools.base import ToolCall

        settings = self.method_settings(method)
        prompt = self.prompts.tokens(s)
        if method == "sft":
            demo = list(self.policy.renderer.render_call(ToolCall.model_validate(s.demo)))
            start = time.perf_counter()
            self.policy.train_step(
                [Datum(prompt_tokens=prompt, completion_tokens=demo)],
                "cross_entropy",
                settings.learning_rate,
            )
            return time.perf_counter() - start, False
        # SDPO learns from the student's own proposal: sample it as the agent would.
        completion = self.propose(scenario, prompt)
        complied = bool(
            scenario.check(judge_text(completion.text, self.policy.renderer.parse_call))
        )
        job = SdpoJob(
            proposal_id=s.id,
            prompt_tokens=prompt,
            tokens=list(completion.tokens),
            logprobs=list(completion.logprobs),
            correction=s.correction,
            demonstration=s.demo,
            # A violating proposal is denied; a compliant one that differs is edited. Both
            # carry the correction and the demonstration, so the step is built alike.
            signal="edit" if complied else "deny",
        )
        start = time.perf_counter()
        sdpo_step(self.policy, job, settings)
        return time.perf_counter() - start, complied


# -- the run ----------------------------------------------------------------------------------


def run_suite(
    bench: Bench,
    on_point: Callable[[Point], None] | None = None,
) -> list[Point]:
    """Every scenario × method × k; calls `on_point` as each measurement lands."""
    config = bench.config
    scenarios = select(config.scenarios)
    ks = sorted({k for k in config.ks if k >= 1})
    k_max = max(ks) if ks else 0
    for sc in scenarios:
        if k_max > len(sc.train):
            raise ValueError(
                f"k={k_max} needs {k_max} training situations; {sc.name} has {len(sc.train)}"
            )
    points: list[Point] = []

    def emit(p: Point) -> None:
        points.append(p)
        log.info(
            "%-15s %-10s k=%d compliance=%.2f margin=%+.2f drift=%s s/corr=%.2f",
            p.scenario, p.method, p.k, p.compliance, p.margin,
            "n/a" if p.drift_kl is None else f"{p.drift_kl:.5f}", p.seconds_per_correction,
        )  # fmt: skip
        if on_point is not None:
            on_point(p)

    for sc in scenarios:
        bench.reset()
        # The base model's numbers are the k = 0 point of every method and all of `none`.
        base_c, base_m, base_rec = bench.evaluate(sc)
        base_drift = bench.drift()
        for method in config.methods:
            if method in TRAINED or method == "none":
                emit(Point(sc.name, method, 0, base_c, base_m, base_drift, 0.0, 0, 0, 0, base_rec))
        if "none" in config.methods:
            for k in ks:
                notes = notes_only_tokens(bench.policy, scenarios, k)
                emit(Point(sc.name, "none", k, base_c, base_m, base_drift, 0.0, 0, notes))
        if "context" in config.methods:
            # One bullet per rule however many corrections made it (the lane clusters them),
            # so the context method's behaviour does not change with k: measured once.
            ctx_c, ctx_m, ctx_rec = bench.evaluate(sc, bullets=[sc.rule])
            carried = bullet_block_tokens(bench.policy, sc.rule)
            for k in [0, *ks]:
                notes = notes_only_tokens(bench.policy, scenarios, k)
                emit(
                    Point(
                        sc.name, "context", k, ctx_c if k else base_c, ctx_m if k else base_m,
                        base_drift, 0.0, carried if k else 0, notes, 0,
                        ctx_rec if k == ks[0] else [],
                    )
                )  # fmt: skip
        for method in [m for m in config.methods if m in TRAINED]:
            bench.reset()
            if method == "sdpo_topk" and not bench.local:
                log.warning("sdpo_topk needs the local backend's full distribution; skipped")
                continue
            seconds: list[float] = []
            already = 0
            for i, s in enumerate(sc.train[:k_max]):
                took, complied = bench.correct(method, sc, s)
                seconds.append(took)
                already += complied
                k = i + 1
                if k in ks:
                    c, m, rec = bench.evaluate(sc)
                    emit(
                        Point(
                            sc.name, method, k, c, m, bench.drift(),
                            sum(seconds) / len(seconds), 0,
                            notes_only_tokens(bench.policy, scenarios, k), already, rec,
                        )
                    )  # fmt: skip
    return points


def save_points(points: list[Point], path: Path, meta: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"meta": meta, "points": [asdict(p) for p in points]}, indent=1))
    tmp.replace(path)


def load_points(path: Path) -> tuple[dict[str, Any], list[Point]]:
    data = json.loads(path.read_text())
    return data["meta"], [Point(**p) for p in data["points"]]
