"""Generate the curriculum and train the starter adapter (see scripts/train_starter.sh).

Recipe: LoRA SFT on the call tokens only. Every sequence starts with the same system
prompt (~260 tokens, the tool list), so its keys and values are computed once without
gradients under the current adapter and refreshed every `refresh_every` optimizer steps;
the rest of the sequence (task, tool results, denials, calls) is backpropagated in full,
so the adapter learns how the task and the reviewer's words change the call. The
dropped gradient path through the system prompt is the one `policy/local/lora_step.py`
measures for its prefix cache (cos ≈ 0.7–0.8 with the full gradient).

Resumable: a checkpoint (adapter, optimizer, position in the shuffled order) is written
atomically every `checkpoint_every` steps; rerunning the same command continues from it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from continual_lsp.config import EMBEDDED_MODEL
from continual_lsp.curriculum.episodes import Sequence, generate
from continual_lsp.curriculum.exercises import load_vocab
from continual_lsp.learning.anchors import ANCHORS_FILE, Anchor, tools_in_turn
from continual_lsp.policy import model_files
from continual_lsp.policy.render import ChatMLRenderer

# Attention and MLP: the MLP carries most of what the model knows about formats.
STARTER_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class TrainConfig(BaseModel):
    """The recipe's knobs; the defaults are the shipped adapter's."""

    data: list[str]
    out: str
    rank: int = 8
    targets: list[str] = Field(default_factory=lambda: list(STARTER_TARGETS))
    lr: float = 1e-3
    warmup_steps: int = 15
    accumulate: int = 4  # sequences per optimizer step
    epochs: float = 1.0
    max_minutes: float = 80.0  # stop (and save) when the budget is spent
    refresh_every: int = 8  # optimizer steps between system-prompt KV refreshes
    checkpoint_every: int = 10
    # One thread: on the shared 2-core build machine 2 threads ran 3-5x slower per token
    # (OpenMP threads wait for each other at every barrier; see policy.local.torch_threads).
    threads: int = 1
    seed: int = 0
    # Start from an adapter of the same shape (the shipped starter) instead of a fresh one:
    # on a loaded machine the time budget covers a fifth of an epoch, which teaches a
    # new ending and longer tasks on top of the old skills but not all of them again.
    init_adapter: str | None = None


def load_tokenizer(model: str) -> object:
    if model_files.resolve_model(model)[1]:  # first run: writes the safetensors cache
        return model_files.load_model_and_tokenizer(model)[1]
    return model_files.load_tokenizer(model)


def cmd_generate(args: argparse.Namespace) -> None:
    renderer = ChatMLRenderer(load_tokenizer(EMBEDDED_MODEL))
    sequences, dropped = generate(
        renderer, args.situations, args.seed, load_vocab(), multi_share=args.multi_share
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".partial")
    with tmp.open("w", encoding="utf-8") as fh:
        for seq in sequences:
            fh.write(seq.model_dump_json() + "\n")
    tmp.replace(out)
    print(json.dumps({"sequences": len(sequences), "dropped": dropped, "out": str(out)}))


def cmd_anchors(args: argparse.Namespace) -> None:
    """The starter's anchors (`learning/anchors.py`): one call per generated sequence, a
    random one of its spans, with the prompt before it; prompts over `--max-prompt`
    tokens are left out (each anchor's prompt is run at every step that rehearses it).
    The calls are drawn from each tool in turn, so the few edits and `done`s of short
    prompts are not outnumbered by first reads."""
    renderer = ChatMLRenderer(load_tokenizer(EMBEDDED_MODEL))
    sequences, _ = generate(renderer, args.situations, args.seed, load_vocab(), multi_share=0.5)
    rng = random.Random(args.seed)
    drawn = []
    for seq in sequences:
        a, b = rng.choice(seq.spans)
        if a <= args.max_prompt:
            drawn.append(
                Anchor(
                    prompt_tokens=seq.tokens[:a],
                    completion_tokens=seq.tokens[a:b],
                    kind=seq.kind,
                    tool=renderer.parse_call(renderer.decode(seq.tokens[a:b])).tool,
                )
            )
    anchors = tools_in_turn(drawn, args.count)
    rng.shuffle(anchors)  # so the pool's turn order mixes the tools
    out = Path(args.out)
    tmp = out.with_suffix(".partial")
    tmp.write_text("".join(a.model_dump_json() + "\n" for a in anchors), encoding="utf-8")
    tmp.replace(out)
    print(json.dumps({"anchors": len(anchors), "out": str(out)}))


def read_sequences(paths: list[str]) -> list[Sequence]:
    out: list[Sequence] = []
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            out.extend(Sequence.model_validate_json(line) for line in fh if line.strip())
    return out


def common_prefix(sequences: list[Sequence]) -> int:
    """Tokens every sequence starts with, stopping before the first loss span."""
    first = sequences[0].tokens
    n = min(min(s.spans[0][0] for s in sequences) - 1, len(first))
    for s in sequences:
        i = 0
        while i < n and s.tokens[i] == first[i]:
            i += 1
        n = i
    return n


def lr_at(step: int, progress: float, cfg: TrainConfig) -> float:
    """Linear warm-up, then cosine down to a tenth over `progress` (0..1).

    Progress is the larger of steps done / planned and time spent / `max_minutes`, so on a
    slower machine the schedule still completes when the time budget ends.
    """
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def sequence_loss(model: Any, seq: Sequence, prefix: int, layers: Any) -> tuple[Any, int]:
    """Summed cross-entropy of the span tokens, the prefix's K/V given; (loss, tokens).

    Only the rows that predict a span token go through the LM head (576 x 49k a row):
    on a tool result that is most of the sequence's forward and backward cost.
    """
    import torch

    # deferred: torch, which `generate` never loads
    from continual_lsp.policy.local.kv_cache import forward, sliced_cache

    rest = seq.tokens[prefix:]
    rows, targets = [], []
    for a, b in seq.spans:
        rows.extend(range(a - prefix - 1, b - prefix - 1))
        targets.extend(seq.tokens[a:b])
    logits, _ = forward(model, rest, sliced_cache(layers, prefix), keep=torch.tensor(rows))
    loss = torch.nn.functional.cross_entropy(logits.float(), torch.tensor(targets), reduction="sum")
    return loss, len(targets)


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    import torch

    tmp = path.with_suffix(".partial")
    torch.save(state, tmp)
    os.replace(tmp, path)


def build_model(cfg: TrainConfig) -> Any:
    """The embedded base with a fresh LoRA adapter of the recipe's shape."""
    from peft import LoraConfig, get_peft_model

    base, _tokenizer = model_files.load_model_and_tokenizer(EMBEDDED_MODEL)
    lora = LoraConfig(
        r=cfg.rank,
        lora_alpha=2 * cfg.rank,
        target_modules=cfg.targets,
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(base, lora)


def cmd_export(args: argparse.Namespace) -> None:
    """Write the adapter of a run's last checkpoint (to look at a run still training)."""
    import torch

    run = Path(args.run)
    cfg = TrainConfig.model_validate_json((run / "config.json").read_text())
    model = build_model(cfg)
    state = torch.load(run / "checkpoint.pt", weights_only=False)
    model.load_state_dict(state["adapter"], strict=False)
    export(model, Path(args.out))
    print(json.dumps({"step": state["step"], "adapter": args.out}))


def _train_config(args: argparse.Namespace) -> TrainConfig:
    """The run's config: a saved one (`--config`) or the flags', with the budget and the
    starting adapter as the flags say."""
    cfg = TrainConfig.model_validate_json(Path(args.config).read_text()) if args.config else None
    if cfg is None:
        cfg = TrainConfig(data=args.data, out=args.out)
    if args.max_minutes is not None:
        cfg.max_minutes = args.max_minutes
    if args.init_adapter:
        cfg.init_adapter = args.init_adapter
    return cfg


def _resume(model: Any, optim: Any, cfg: TrainConfig, ckpt: Path) -> tuple[int, float]:
    """(steps done, seconds spent) of a run: the checkpoint's, or a fresh start (from
    `init_adapter` when one is named)."""
    import torch

    if not ckpt.exists():
        if cfg.init_adapter:
            load_adapter(model, Path(cfg.init_adapter))
            print(f"started from the adapter in {cfg.init_adapter}", flush=True)
        return 0, 0.0
    state = torch.load(ckpt, weights_only=False)
    model.load_state_dict(state["adapter"], strict=False)
    optim.load_state_dict(state["optimizer"])
    return int(state["step"]), float(state["seconds"])


def cmd_train(args: argparse.Namespace) -> None:
    import torch

    # deferred: torch, which `generate` never loads
    from continual_lsp.policy.local.kv_cache import cache_layers, forward

    cfg = _train_config(args)
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(cfg.model_dump_json(indent=2))
    sequences = read_sequences(cfg.data)
    order = list(range(len(sequences)))
    random.Random(cfg.seed).shuffle(order)
    order = (order * math.ceil(cfg.epochs))[: int(len(order) * cfg.epochs)]
    total_steps = math.ceil(len(order) / cfg.accumulate)
    prefix = common_prefix(sequences)

    model = build_model(cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    optim = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    ckpt = out / "checkpoint.pt"
    step, spent = _resume(model, optim, cfg, ckpt)
    if step:
        print(f"resumed at step {step}/{total_steps}", flush=True)
    log = (out / "train.log").open("a", encoding="utf-8")
    start = time.monotonic()
    layers = None
    model.train()
    while step < total_steps:
        if layers is None or step % cfg.refresh_every == 0:
            with torch.no_grad():
                _, cache = forward(model, sequences[0].tokens[:prefix], None, keep=1)
            layers = cache_layers(cache)
        elapsed = spent + time.monotonic() - start
        progress = max(step / total_steps, elapsed / (cfg.max_minutes * 60))
        lr = lr_at(step, progress, cfg)
        for group in optim.param_groups:
            group["lr"] = lr
        batch = [sequences[i] for i in order[step * cfg.accumulate : (step + 1) * cfg.accumulate]]
        n_tokens = sum(b - a for s in batch for a, b in s.spans)
        total = 0.0
        for seq in batch:
            loss, _ = sequence_loss(model, seq, prefix, layers)
            (loss / n_tokens).backward()
            total += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optim.step()
        optim.zero_grad(set_to_none=True)
        step += 1
        record = {
            "step": step,
            "of": total_steps,
            "loss": round(total / n_tokens, 4),
            "lr": round(lr, 6),
            "tokens": sum(len(s.tokens) - prefix for s in batch),
            "seconds": round(spent + time.monotonic() - start, 1),
        }
        log.write(json.dumps(record) + "\n")
        log.flush()
        elapsed = spent + time.monotonic() - start
        out_of_time = elapsed > cfg.max_minutes * 60
        if step % cfg.checkpoint_every == 0 or step == total_steps or out_of_time:
            adapter = {k: v for k, v in model.state_dict().items() if "lora_" in k}
            state = {"adapter": adapter, "optimizer": optim.state_dict(), "step": step}
            save_checkpoint(ckpt, {**state, "seconds": elapsed})
        if out_of_time:
            print(f"time budget spent at step {step}/{total_steps}", flush=True)
            break
    export(model, out / "adapter")
    print(json.dumps({"steps": step, "of": total_steps, "adapter": str(out / "adapter")}))


def load_adapter(model: Any, directory: Path) -> None:
    """Set the LoRA weights of `model` to those of an exported adapter (same rank and
    targets), in float32."""
    import torch
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    state = load_file(str(directory / "adapter_model.safetensors"))
    result = set_peft_model_state_dict(model, {k: v.to(torch.float32) for k, v in state.items()})
    missing = [k for k in result.missing_keys if "lora_" in k]
    if missing or result.unexpected_keys:
        raise ValueError(f"{directory} does not fit the recipe's adapter: {missing[:3]}")


def export(model: Any, directory: Path) -> None:
    """The adapter in peft's format, weights in bf16 (half the size; merged into fp32)."""
    import torch
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    model.peft_config["default"].save_pretrained(str(directory))
    state = {
        k: v.detach().to(torch.bfloat16).contiguous()
        for k, v in get_peft_model_state_dict(model).items()
    }
    save_file(state, str(directory / "adapter_model.safetensors"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m continual_lsp.curriculum.train")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="write the curriculum (JSON lines)")
    gen.add_argument("--situations", type=int, default=500, help="how many exercises")
    gen.add_argument("--seed", type=int, default=1)
    gen.add_argument(
        "--multi-share", type=float, help="the fraction of multi-step exercises (default: 4/17)"
    )
    gen.add_argument("--out", required=True)
    tr = sub.add_parser("train", help="train the adapter (resumes from a checkpoint)")
    tr.add_argument("--data", nargs="+", default=[])
    tr.add_argument("--out", default="")
    tr.add_argument("--config", help="a TrainConfig JSON file instead of --data/--out")
    tr.add_argument("--max-minutes", type=float, help="the time budget (default: the recipe's)")
    tr.add_argument("--init-adapter", help="start from this adapter directory")
    an = sub.add_parser("anchors", help="write the starter's anchors (learning/anchors.py)")
    # A seed no training shard uses: the anchors rehearse the skills, not the shards.
    an.add_argument("--seed", type=int, default=11)
    an.add_argument("--situations", type=int, default=160, help="exercises generated")
    an.add_argument("--count", type=int, default=32, help="anchors kept")
    an.add_argument("--max-prompt", type=int, default=600, help="longest prompt kept (tokens)")
    an.add_argument("--out", default=str(model_files.STARTER_DIR / ANCHORS_FILE))
    ex = sub.add_parser("export", help="write the adapter of a run's last checkpoint")
    ex.add_argument("--run", required=True)
    ex.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    commands = {
        "generate": cmd_generate,
        "anchors": cmd_anchors,
        "train": cmd_train,
        "export": cmd_export,
    }
    commands[args.command](args)


if __name__ == "__main__":
    main(sys.argv[1:])
