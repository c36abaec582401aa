"""Constrained decoding of one tool call with llguidance.

The 135M embedded model writes 0/25 valid calls unconstrained (FIELD-NOTES), so every
token is sampled under a grammar compiled from `tools.base.tool_call_schema()`: the key
`tool`, its name, then that tool's argument schema with bounded strings.

Speed: most of a call is punctuation and key names the grammar forces. Those tokens are
never decoded one at a time: after each sampled token the matcher's fast-forward tokens
(`compute_ff_tokens`) are appended and fed together with the sampled token in **one**
forward pass over the KV cache; the forced opening `{"tool":"` rides along with the
prompt's prefill. A step where the mask allows a single token (the end-of-turn token
after the closing brace) needs no sampling either. `PromptCache` keeps the last prompt's
KV so the next prompt only prefills what it does not share (the system prompt and
earlier turns are shared between turns).

Logprobs: for every completion token, forced ones included, we record the *unmasked*
model log-softmax of that token at its position (temperature 1, no grammar mask). That is
what `Policy.logprobs()` computes with plain forward passes over prompt + completion,
so sampling-time and scoring-time logprobs agree (SDPO's importance ratios and
advantages rely on it) and the trainer gets a value for every completion token. The
sampling distribution itself (mask, temperature) is deliberately not what is recorded.

Over 500 lines on purpose: the grammar, its masks and both decoding loops (one call, a
batch of candidates) share the matcher and prompt-cache rules described here.
"""

from __future__ import annotations

import copy
import inspect
import re
import time
from typing import Any

import llguidance
import llguidance.hf
import numpy as np
import torch

from continual_lsp.policy.base import Completion, DecodeRestrictions, SampleParams
from continual_lsp.tools.base import (
    FILE_PATH_TOOLS,
    NEW_PATH_EXCLUDED,
    PATH_EXCLUDED,
    TOOL_NAMES,
    tool_call_schema,
)

# No whitespace between JSON tokens: the canonical form has none (render.call_text), and
# a small model given optional whitespace can loop on newlines until max_tokens.
JSON_OPTIONS: dict[str, Any] = {"whitespace_flexible": False}


def _strip_schema(node: Any) -> Any:
    """Drop what only documents (title, description, default) and `null` branches.

    An optional argument is expressed by leaving the key out, so `anyOf [X, null]` becomes
    `X`: the model cannot write `"offset":null`, and every decoded call is in the
    canonical form that `render.call_text` writes.
    """
    if isinstance(node, list):
        return [_strip_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {
        key: _strip_schema(value)
        for key, value in node.items()
        if key not in ("title", "description", "default")
    }
    branches = out.get("anyOf")
    if isinstance(branches, list):
        kept = [b for b in branches if b != {"type": "null"}]
        if len(kept) == 1:
            del out["anyOf"]
            out.update(kept[0])
        else:
            out["anyOf"] = kept
    return out


def check_tools(tools: list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """The allowed tools in canonical order (None = all eight answers, `done` too); ValueError if unknown/empty."""
    if tools is None:
        return TOOL_NAMES
    unknown = sorted(set(tools) - set(TOOL_NAMES))
    if unknown:
        raise ValueError(f"unknown tools {unknown}; the tools are {', '.join(TOOL_NAMES)}")
    if not tools:
        raise ValueError("the allowed tools list is empty: at least one tool is needed")
    return tuple(name for name in TOOL_NAMES if name in tools)


def not_prefixed_regex(prefixes: list[str], excluded: str = "") -> str:
    """An anchored regex for the strings that start with none of `prefixes` (and hold
    none of the `excluded` characters, a regex character-class body).

    A grammar has no negative lookahead, so the complement is spelled out over the trie
    of the prefixes: at each node a string may end, leave the trie on a character no
    prefix continues with, or follow a child that is not itself a forbidden prefix.
    """
    rest_class = f"[^{excluded}]" if excluded else r"[\s\S]"
    trie: dict[str, Any] = {}
    for prefix in prefixes:
        node = trie
        for char in prefix:
            node = node.setdefault(char, {})
        node[""] = {}  # a forbidden prefix ends here

    def below(node: dict[str, Any]) -> str | None:
        if "" in node:
            return None
        children = sorted(node)
        leave = "[^" + "".join(re.escape(c) for c in children) + excluded + "]"
        branches = ["", leave + rest_class + "*"]
        for char in children:
            rest = below(node[char])
            if rest is not None:
                branches.append(re.escape(char) + rest)
        return "(?:" + "|".join(branches) + ")"

    body = below(trie)
    return "^" + (body if body is not None else "[^\\s\\S]") + "$"


def decoding_schema(
    tools: list[str] | tuple[str, ...] | None = None, forbid: DecodeRestrictions | None = None
) -> dict[str, Any]:
    """The schema calls are decoded under: `tool_call_schema()` without null branches,
    restricted to `tools` (an allow-list, `SampleParams.tools`) when given, and narrowed
    by `forbid` (guards as grammar: a blocked tool is left out, a forbidden path or
    command prefix becomes a `pattern`; with a file list, the tools that need an
    existing file name one of those files, and are left out when there is none). A
    restriction that would leave no tool at all is not applied to the tool list: the
    guards and the tools still refuse what is sampled."""
    allowed = check_tools(tools)
    schema: dict[str, Any] = _strip_schema(copy.deepcopy(tool_call_schema()))
    branches = [b for b in schema["oneOf"] if b["properties"]["tool"]["const"] in allowed]
    if forbid is not None:
        open_paths = [(b, _open_paths(b, forbid)) for b in branches]
        open_tools = [(b, paths) for b, paths in open_paths if paths is not None]
        branches = [b for b, _ in open_tools or open_paths]
        for branch, paths in open_tools or open_paths:
            tool = branch["properties"]["tool"]["const"]
            args = branch["properties"]["arguments"]["properties"]
            prefixes = [p for p in forbid.path_prefixes.get(tool, []) if p]
            if paths:
                args["path"] = {"type": "string", "enum": paths}
            elif prefixes and "path" in args:
                excluded = NEW_PATH_EXCLUDED if tool == "write" else PATH_EXCLUDED
                args["path"]["pattern"] = not_prefixed_regex(prefixes, excluded)
            if tool == "bash" and forbid.command_prefixes and "cmd" in args:
                args["cmd"]["pattern"] = not_prefixed_regex(forbid.command_prefixes)
    schema["oneOf"] = branches
    return schema


def _open_paths(branch: dict[str, Any], forbid: DecodeRestrictions) -> list[str] | None:
    """The files a tool's branch may name: [] when any path (no file list, or not a tool
    that needs an existing file), None when none at all (the tool is blocked, or every
    file is under a blocked prefix)."""
    tool = branch["properties"]["tool"]["const"]
    prefixes = forbid.path_prefixes.get(tool, [])
    if "" in prefixes:
        return None
    if forbid.files is None or tool not in FILE_PATH_TOOLS:
        return []
    limit = branch["properties"]["arguments"]["properties"]["path"].get("maxLength", 200)
    paths = [
        f for f in forbid.files if len(f) <= limit and not any(f.startswith(p) for p in prefixes)
    ]
    return paths or None


class ToolCallGrammar:
    """The compiled grammar and llguidance's view of the tokenizer.

    Building the llguidance tokenizer takes ~0.5 s: pass `ll_tokenizer` from another
    grammar to share it (one grammar per allowed-tools set).
    """

    def __init__(
        self,
        tokenizer: Any,
        schema: dict[str, Any] | None = None,
        ll_tokenizer: llguidance.LLTokenizer | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.ll_tokenizer = ll_tokenizer or llguidance.hf.from_tokenizer(tokenizer)
        self.grammar = llguidance.LLMatcher.grammar_from_json_schema(
            schema if schema is not None else decoding_schema(), defaults=JSON_OPTIONS
        )
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(
            self.grammar, self.ll_tokenizer
        )
        if is_error:
            raise ValueError(f"tool-call grammar does not compile: {'; '.join(messages)}")
        self.vocab_size: int = self.ll_tokenizer.vocab_size
        self.eos_tokens: list[int] = list(self.ll_tokenizer.eos_tokens)

    def matcher(self) -> llguidance.LLMatcher:
        return llguidance.LLMatcher(self.ll_tokenizer, self.grammar, log_level=0)

    def accepted_prefix(self, tokens: list[int]) -> int:
        """How many of `tokens` the grammar accepts from the start (tests, diagnostics)."""
        return int(self.matcher().validate_tokens(tokens))

    def accepts(self, tokens: list[int]) -> bool:
        """True when `tokens` is a complete call followed by the end-of-turn token."""
        if not tokens or tokens[-1] not in self.eos_tokens:
            return False
        matcher = self.matcher()
        # The matcher stops as soon as the JSON is closed; the end-of-turn token must still
        # be consumable then (it is what ends the assistant turn in training data).
        return bool(
            matcher.consume_tokens(tokens) and matcher.is_stopped() and not matcher.is_error()
        )


def allowed_mask(matcher: llguidance.LLMatcher, vocab_size: int) -> torch.Tensor:
    """Boolean tensor over the model's vocabulary: True where the grammar allows a token."""
    bits = np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8)
    allowed = np.unpackbits(bits, bitorder="little")
    mask = torch.zeros(vocab_size, dtype=torch.bool)
    n = min(vocab_size, allowed.shape[0])
    mask[:n] = torch.from_numpy(allowed[:n].astype(bool))
    return mask


def cache_keyword(model: Any) -> str:
    """Name of the KV-cache argument: transformers 5.2x renamed `past_key_values` to `cache`."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    params = inspect.signature(base.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many tokens `a` and `b` share from the start."""
    shared = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        shared += 1
    return shared


class PromptCache:
    """The KV caches of the last prompts, reused for the longest prefix the next one shares.

    Every agent turn re-renders the whole conversation, so consecutive prompts share the
    system prompt (~250 tokens) and usually all earlier turns: reusing their keys and
    values saves most of the prefill, the largest cost of a proposal on CPU. Two prompts
    are kept because a retry alternates between two contexts: its candidates are sampled
    from the conversation with the correction, then scored against the denied turn's
    prompt (which, once a routed correction adds a rule near the top, shares little with
    the first). An entry is valid only for the weights it was computed with: `key` (see
    `LocalPolicy.weights_key`) must match, and entries of other weights are dropped.
    Only plain `DynamicCache` layers are reused (sliding-window or recurrent layers
    cannot be cut at an arbitrary prefix); other models simply prefill in full.

    An older entry that shares most of its tokens with the newer one is dropped: the
    newer covers that prefix, and the older would hold a second copy of its K/V to save
    the prefill of a short tail. Two different tasks of one user share the system prompt
    (~250 of ~300 tokens): both kept, a user's cache held ~24 MB where one entry is ~12.
    """

    CAPACITY = 2

    def __init__(self) -> None:
        # (prompt tokens, per-layer keys and values, weights key), newest first.
        self.entries: list[tuple[list[int], list[tuple[torch.Tensor, torch.Tensor]], Any]] = []
        self.hits = 0
        self.reused_tokens = 0

    def clear(self) -> None:
        self.entries = []

    def lookup(self, prompt_tokens: list[int], key: Any) -> tuple[int, Any]:
        """(number of prompt tokens covered, a fresh cache holding them) or (0, None)."""
        best, layers = 0, None
        for tokens, entry_layers, entry_key in self.entries:
            if entry_key != key:
                continue
            shared = common_prefix(tokens, prompt_tokens)
            if shared > best:
                best, layers = shared, entry_layers
        # At least one prompt token must still be fed: its logits predict the first token.
        shared = min(best, len(prompt_tokens) - 1)
        if shared <= 0 or layers is None:
            return 0, None
        from transformers import DynamicCache

        # DynamicCache.update concatenates into new tensors, so these slices of the stored
        # tensors are never written to: the entry stays valid for later lookups.
        data = [(k[..., :shared, :], v[..., :shared, :]) for k, v in layers]
        self.hits += 1
        self.reused_tokens += shared
        return shared, DynamicCache(ddp_cache_data=data)

    def store(self, prompt_tokens: list[int], cache: Any, key: Any) -> None:
        from transformers.cache_utils import DynamicLayer

        layers = getattr(cache, "layers", None)
        if not layers or any(type(layer) is not DynamicLayer for layer in layers):
            self.clear()
            return
        kept = [
            e
            for e in self.entries
            if e[2] == key and 2 * common_prefix(e[0], prompt_tokens) <= len(e[0])
        ]
        entry = (list(prompt_tokens), [(layer.keys, layer.values) for layer in layers], key)
        self.entries = [entry, *kept][: self.CAPACITY]


class _Decoder:
    """Incremental forward passes over one growing sequence, with a KV cache."""

    def __init__(
        self,
        model: Any,
        prompt_tokens: list[int],
        opening: list[int],
        prompt_cache: PromptCache | None = None,
        weights_key: Any = None,
    ) -> None:
        """Prefill the prompt and the grammar's forced `opening` in one pass.

        `self.opening_logits` row i predicts opening[i]; `next_logits` predicts the token
        after the opening. Only those rows go through the LM head (576 x 49k a row, a large
        share of prefill if done for every prompt token).
        """
        self.model = model
        self.device = next(model.parameters()).device
        self.cache: Any = None
        self.cache_keyword = cache_keyword(model)
        self.prompt = (prompt_cache, prompt_tokens, weights_key)
        reused = 0
        if prompt_cache is not None:
            reused, self.cache = prompt_cache.lookup(prompt_tokens, weights_key)
        logits = self._forward(prompt_tokens[reused:] + opening, keep=len(opening) + 1)
        self.opening_logits = logits[:-1]
        self.next_logits = logits[-1]

    def keep_prompt(self) -> None:
        """Store the prompt's K/V in the prompt cache (one call's: once decoding is done).

        Taken from the cache as decoding left it, not right after the prefill: every step
        copies the K/V into longer tensors (`DynamicCache.update` concatenates), so an
        entry stored at the prefill was a second copy of the prompt's K/V held for the
        whole decode (~12 MB for a first proposal; the team server's peaks were such
        decodes). The stored tensors run past the prompt (the opening, the sampled
        tokens); lookups never use more positions than the stored prompt tokens.
        """
        prompt_cache, prompt_tokens, weights_key = self.prompt
        if prompt_cache is not None:
            prompt_cache.store(prompt_tokens, self.cache, weights_key)

    def _forward(self, tokens: list[int], keep: int) -> torch.Tensor:
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        kwargs = {self.cache_keyword: self.cache}
        out = self.model(input_ids=ids, use_cache=True, logits_to_keep=keep, **kwargs)
        cache = getattr(out, "cache", None)
        self.cache = cache if cache is not None else out.past_key_values
        return out.logits[0].float()

    def feed(self, tokens: list[int]) -> torch.Tensor:
        """Append `tokens`; return logits predicting tokens[1:] and the next token."""
        logits = self._forward(tokens, keep=len(tokens))
        self.next_logits = logits[-1]
        return logits


def _generator(params: SampleParams) -> torch.Generator | None:
    """The sampling generator: None at temperature 0, unseeded when no seed is given."""
    if params.temperature <= 0:
        return None
    generator = torch.Generator()
    if params.seed is None:
        generator.seed()  # non-deterministic, as asked
    else:
        generator.manual_seed(params.seed)
    return generator


def _opening_logprobs(decoder: _Decoder, opening: list[int]) -> list[float]:
    rows = torch.log_softmax(decoder.opening_logits, dim=-1)
    picked = torch.tensor(opening, dtype=torch.long, device=rows.device)
    return rows.gather(1, picked[:, None])[:, 0].tolist()


def _feed_chunk(
    decoder: _Decoder, pending: list[int], tokens: list[int], logprobs: list[float]
) -> None:
    """One forward pass for the sampled token and the tokens forced after it.

    Row i of `decoder.feed`'s logits predicts pending[i + 1]; the first pending token was
    predicted by the logits we already held.
    """
    first_lp = _logprob(decoder.next_logits, pending[0])
    logits = decoder.feed(pending)
    log_probs = torch.log_softmax(logits[:-1], dim=-1)
    rest = torch.tensor(pending[1:], dtype=torch.long, device=logits.device)
    tokens.extend(pending)
    logprobs.append(first_lp)
    logprobs.extend(log_probs.gather(1, rest[:, None])[:, 0].tolist())


def _completion_text(grammar: ToolCallGrammar, tokens: list[int], eos: set[int]) -> str:
    text = grammar.tokenizer.decode(
        [t for t in tokens if t not in eos], clean_up_tokenization_spaces=False
    )
    return str(text)


def constrained_decode(
    model: Any,
    grammar: ToolCallGrammar,
    prompt_tokens: list[int],
    params: SampleParams,
    prompt_cache: PromptCache | None = None,
    weights_key: Any = None,
) -> Completion:
    """Sample one tool call under the grammar; see the module docstring for logprobs.

    Stops at the end-of-turn token (recorded as the last completion token, as in
    `Renderer.render_call`), at `params.max_tokens`, or when the matcher errors. An
    unfinished call is returned as is: the caller's `parse_call` fails and it resamples.
    With a `prompt_cache`, the prompt prefix it shares with the previous prompt is not
    recomputed; `weights_key` identifies the current weights (a mismatch drops the cache).
    """
    start = time.perf_counter()
    if not prompt_tokens:
        raise ValueError("constrained_decode needs a non-empty prompt")
    generator = _generator(params)

    matcher = grammar.matcher()
    eos = set(grammar.eos_tokens)
    tokens: list[int] = []
    logprobs: list[float] = []
    forced = 0
    limit = max(0, params.max_tokens)

    # The grammar's opening (`{"tool":"`) is forced before anything is sampled: it goes
    # through the model in the same pass as the prompt.
    opening = _take(matcher.compute_ff_tokens(), limit)
    if opening:
        matcher.consume_tokens(opening)
        forced += len(opening)
    pending: list[int] = []

    with torch.inference_mode():
        decoder = _Decoder(model, prompt_tokens, opening, prompt_cache, weights_key)
        if opening:
            tokens.extend(opening)
            logprobs.extend(_opening_logprobs(decoder, opening))
        while True:
            if pending:
                _feed_chunk(decoder, pending, tokens, logprobs)
            pending, more = _next_chunk(
                matcher,
                decoder.next_logits,
                tokens,
                logprobs,
                limit,
                eos,
                params.temperature,
                generator,
            )
            forced += more
            if not pending:
                break
        decoder.keep_prompt()

    return Completion(
        tokens=tokens,
        logprobs=logprobs,
        text=_completion_text(grammar, tokens, eos),
        forced=forced,
        seconds=time.perf_counter() - start,
    )


def _next_chunk(
    matcher: llguidance.LLMatcher,
    logits: torch.Tensor,
    tokens: list[int],
    logprobs: list[float],
    limit: int,
    eos: set[int],
    temperature: float,
    generator: torch.Generator | None,
) -> tuple[list[int], int]:
    """The next token and the tokens the grammar forces after it (to feed in one pass),
    and how many of them the grammar forced; [] when the call has ended.

    An end-of-turn token is appended to `tokens` / `logprobs` here, since nothing is fed
    after it; an unfinished call (the limit, a grammar error) simply ends.
    """
    if len(tokens) >= limit or matcher.is_error():
        return [], 0
    mask = allowed_mask(matcher, logits.shape[-1]).to(logits.device)
    count = int(mask.sum())
    if count == 0:
        return [], 0  # the grammar is in an error state; the call ends as it is
    forced = 0
    if count == 1:
        token = int(mask.nonzero()[0, 0])
        forced = 1
    else:
        token = _choose(logits, mask, temperature, generator)
    if token in eos:
        tokens.append(token)
        logprobs.append(_logprob(logits, token))
        matcher.consume_token(token)
        return [], forced
    if not matcher.consume_token(token):
        return [], forced
    chunk = [token]
    room = limit - len(tokens) - 1
    if room > 0 and not matcher.is_stopped():
        ff = _take(matcher.compute_ff_tokens(), room)
        if ff:
            matcher.consume_tokens(ff)
            forced += len(ff)
            chunk.extend(ff)
    return chunk, forced


def _take(tokens: list[int], room: int) -> list[int]:
    return list(tokens[: max(0, room)])


def _logprob(logits: torch.Tensor, token: int) -> float:
    return float(torch.log_softmax(logits, dim=-1)[token])


def _choose(
    logits: torch.Tensor,
    mask: torch.Tensor,
    temperature: float,
    generator: torch.Generator | None,
) -> int:
    masked = logits.masked_fill(~mask, float("-inf"))
    if temperature <= 0 or generator is None:
        return int(torch.argmax(masked))
    probs = torch.softmax(masked / temperature, dim=-1)
    # The generator lives on the CPU so a seed gives the same call on any device.
    return int(torch.multinomial(probs.cpu(), 1, generator=generator)[0])


def constrained_decode_batch(
    model: Any,
    grammar: ToolCallGrammar,
    prompt_tokens: list[int],
    params: SampleParams,
    n: int,
    prompt_cache: PromptCache | None = None,
    weights_key: Any = None,
) -> list[Completion]:
    """`n` tool calls from one prompt, decoded together: one forward pass per step for all.

    The prompt (and the grammar's forced opening) is prefilled once and its K/V is shared
    by every candidate, never copied per row: the candidates' tokens are packed into one
    sequence after it (a tree), and an attention mask lets each token see the prompt and
    its own candidate's earlier tokens only, at its own candidate's position ids. So a
    step costs the tokens the live candidates feed (a sampled token plus the tokens the
    grammar forces after it), with no padding to the longest chunk, and attention reads
    the prompt's K/V once instead of `n` times; each candidate computes what it would
    alone. Logprobs are recorded as in `constrained_decode` (unmasked, temperature 1).
    Rows share one seeded generator, so a seed gives the same `n` calls every time; the
    first `params.greedy_rows` rows (and all of them at temperature 0) are the greedy call.
    """
    start = time.perf_counter()
    if not prompt_tokens:
        raise ValueError("constrained_decode_batch needs a non-empty prompt")
    if n < 1:
        raise ValueError(f"need at least one candidate, asked for {n}")
    generator = _generator(params)
    eos = set(grammar.eos_tokens)
    limit = max(0, params.max_tokens)
    matchers, opening = _opened_matchers(grammar, n, limit)
    tokens: list[list[int]] = [list(opening) for _ in range(n)]
    logprobs: list[list[float]] = [[] for _ in range(n)]
    forced = [len(opening)] * n

    with torch.inference_mode():
        decoder = _Decoder(model, prompt_tokens, opening, prompt_cache, weights_key)
        # Kept now, not after the steps as one call's is: by then the cache also holds
        # `n` candidates' K/V, which a stored entry would keep alive.
        decoder.keep_prompt()
        if opening:
            opening_lps = _opening_logprobs(decoder, opening)
            for row in logprobs:
                row.extend(opening_lps)
        tree = CandidateTree(len(prompt_tokens) + len(opening), n)
        # Row r: the logits after candidate r's last fed token.
        next_logits = decoder.next_logits.unsqueeze(0).repeat(n, 1)
        alive = list(range(n))
        while True:
            chunks = _next_chunks(
                matchers,
                alive,
                next_logits,
                tokens,
                logprobs,
                forced,
                limit,
                eos,
                params,
                generator,
            )
            # A finished candidate leaves the step: its tokens stay in the cache, unseen.
            live = [(r, chunk) for r, chunk in zip(alive, chunks, strict=True) if chunk]
            live = without_stragglers(live, [len(row) for row in tokens], params.greedy_rows)
            if not live:
                break
            alive = [r for r, _ in live]
            ids, mask, position_ids = tree.step(live)
            logits, decoder.cache = tree_forward(
                decoder.model, decoder.cache, decoder.cache_keyword, ids, mask, position_ids
            )
            _record_step(live, logits, next_logits, tokens, logprobs)

    return _completions(grammar, tokens, logprobs, forced, eos, time.perf_counter() - start)


def without_stragglers(
    live: list[tuple[int, list[int]]], lengths: list[int], greedy_rows: int
) -> list[tuple[int, list[int]]]:
    """`live` without the sampled candidates that ramble: once half the candidates have
    finished, one that has grown past twice the longest finished is cut where it is.

    Every step waits for the slowest candidate, so one row that never closes its content
    held the others' answer back for up to `max_tokens` steps (measured: rows of 192
    tokens beside finished ones of 38-63, the choice 27 s instead of ~6 s). Cut short, it
    does not parse and is dropped like any call cut at the budget. The greedy rows run to
    their end: they are the model's best guess, however long."""
    running = {r for r, _ in live}
    finished = [n for r, n in enumerate(lengths) if r not in running]
    if 2 * len(finished) < len(lengths):
        return live
    bound = 2 * max(finished)
    return [(r, chunk) for r, chunk in live if r < greedy_rows or lengths[r] <= bound]


def _opened_matchers(
    grammar: ToolCallGrammar, n: int, limit: int
) -> tuple[list[llguidance.LLMatcher], list[int]]:
    """`n` matchers past the grammar's forced opening, and that opening."""
    matchers = [grammar.matcher() for _ in range(n)]
    opening = _take(matchers[0].compute_ff_tokens(), limit)
    for matcher in matchers:
        if opening:
            matcher.consume_tokens(opening)
    return matchers, opening


def _next_chunks(
    matchers: list[llguidance.LLMatcher],
    alive: list[int],
    next_logits: torch.Tensor,
    tokens: list[list[int]],
    logprobs: list[list[float]],
    forced: list[int],
    limit: int,
    eos: set[int],
    params: SampleParams,
    generator: torch.Generator | None,
) -> list[list[int]]:
    """`_next_chunk` for every live candidate, in the order of `alive`."""
    chunks: list[list[int]] = []
    for r in alive:
        temperature = 0.0 if r < params.greedy_rows else params.temperature
        chunk, more = _next_chunk(
            matchers[r],
            next_logits[r],
            tokens[r],
            logprobs[r],
            limit,
            eos,
            temperature,
            generator,
        )
        chunks.append(chunk)
        forced[r] += more
    return chunks


class CandidateTree:
    """The candidates' tokens packed after the shared prompt in one cached sequence (the
    batched decode here, the batched scoring in `LocalPolicy.logprobs_batch`).

    Each cache slot past the prompt belongs to one candidate, at that candidate's own
    position: a token may attend to the whole prompt, and to the slots of its own
    candidate at or before its position (earlier steps, and causally within its chunk).
    """

    def __init__(self, prefix: int, n: int) -> None:
        self.prefix = prefix
        self.positions = [prefix] * n  # each candidate's next position id
        self.owners = torch.empty(0, dtype=torch.long)
        self.slot_positions = torch.empty(0, dtype=torch.long)

    def step(self, live: list[tuple[int, list[int]]]) -> tuple[list[int], torch.Tensor, list[int]]:
        """This step's packed ids, its (1, 1, fed, cache + fed) mask and position ids."""
        ids: list[int] = []
        owners: list[int] = []
        positions: list[int] = []
        for r, chunk in live:
            ids.extend(chunk)
            owners.extend([r] * len(chunk))
            positions.extend(range(self.positions[r], self.positions[r] + len(chunk)))
            self.positions[r] += len(chunk)
        rows = torch.tensor(owners, dtype=torch.long)
        where = torch.tensor(positions, dtype=torch.long)
        self.owners = torch.cat([self.owners, rows])
        self.slot_positions = torch.cat([self.slot_positions, where])
        own = (self.owners[None, :] == rows[:, None]) & (
            self.slot_positions[None, :] <= where[:, None]
        )
        prompt = torch.ones(len(ids), self.prefix, dtype=torch.bool)
        return ids, torch.cat([prompt, own], dim=1)[None, None], positions


def tree_forward(
    model: Any,
    cache: Any,
    keyword: str,
    ids: list[int],
    mask: torch.Tensor,
    position_ids: list[int],
) -> tuple[torch.Tensor, Any]:
    """One pass of a packed step (`CandidateTree.step`) over `cache`: the float logits of
    every fed token, and the cache that now holds them too."""
    device = next(model.parameters()).device
    out = model(
        input_ids=torch.tensor([ids], dtype=torch.long, device=device),
        attention_mask=mask.to(device),
        position_ids=torch.tensor([position_ids], dtype=torch.long, device=device),
        use_cache=True,
        logits_to_keep=len(ids),
        **{keyword: cache},
    )
    grown = getattr(out, "cache", None)
    return out.logits[0].float(), grown if grown is not None else out.past_key_values


def _record_step(
    live: list[tuple[int, list[int]]],
    logits: torch.Tensor,
    next_logits: torch.Tensor,
    tokens: list[list[int]],
    logprobs: list[list[float]],
) -> None:
    """Append each candidate's chunk and its logprobs (its rows of the packed `logits`,
    in `live` order); `next_logits[r]` becomes the logits after candidate r's chunk."""
    offset = 0
    for r, chunk in live:
        rows = logits[offset : offset + len(chunk)]
        offset += len(chunk)
        first = _logprob(next_logits[r], chunk[0])
        scored = torch.log_softmax(rows[:-1], dim=-1)
        rest = torch.tensor(chunk[1:], dtype=torch.long, device=scored.device)
        tokens[r].extend(chunk)
        logprobs[r].append(first)
        logprobs[r].extend(scored.gather(1, rest[:, None])[:, 0].tolist())
        next_logits[r] = rows[-1]


def _completions(
    grammar: ToolCallGrammar,
    tokens: list[list[int]],
    logprobs: list[list[float]],
    forced: list[int],
    eos: set[int],
    seconds: float,
) -> list[Completion]:
    return [
        Completion(
            tokens=row,
            logprobs=lps,
            text=_completion_text(grammar, row, eos),
            forced=f,
            seconds=seconds,
        )
        for row, lps, f in zip(tokens, logprobs, forced, strict=True)
    ]
