"""The starter curriculum shares no paths, names or phrasing with what it is judged on:
bench/learning's held-out cases, the agent-skill bench, the README demo's workspace
and the tests' scenarios (issue 13, "disjoint by construction")."""

from __future__ import annotations

import ast
import json
import random
import re
from pathlib import Path

from continual_lsp.curriculum.exercises import Builder, load_vocab

REPO = Path(__file__).resolve().parents[2]
# Word 5-grams: a 4-gram such as "use edit_lines on line" is the tool's own vocabulary
# (tests and rules must name the tool), not a shared phrasing.
N = 5
MAX_OVERLAP = 0.25  # of a held-out text's n-grams found in the curriculum's phrasing


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9_]+", re.sub(r"\{[a-z_]+\}", " ", text.lower()))


def ngrams(text: str) -> set[tuple[str, ...]]:
    w = words(text)
    return {tuple(w[i : i + N]) for i in range(len(w) - N + 1)}


def curriculum_phrasing() -> list[str]:
    v = load_vocab()
    texts = [t for group in v["task_templates"].values() for t in group]
    texts += [t for group in v["corrections"].values() for t in group]
    texts += [t for group in v["notes"].values() for t in group]
    return texts + list(v["doc_sentences"])


def curriculum_names() -> set[str]:
    v = load_vocab()
    return set(v["functions"]) | set(v["renames"]) | set(v["stems"]) | set(v["constants"])


def curriculum_paths() -> set[str]:
    paths: set[str] = set()
    for seed in range(3):
        builder = Builder(load_vocab(), random.Random(seed))
        for kind in (Builder.KINDS + Builder.MULTI_STEP_KINDS) * 4:
            paths |= set(builder.exercise(kind).files)
    return paths


def learning_held_out() -> list[str]:
    from bench.learning.scenarios import SCENARIOS

    texts = []
    for scenario in SCENARIOS:
        texts.append(scenario.rule)
        for s in [*scenario.train, *scenario.held_out]:
            texts += [s.task, s.correction]
    return texts


BENCH_VOCABS = ("agent_skill_vocab.json", "agent_skill_dev_vocab.json")  # held-out, dev


def bench_phrasing(name: str) -> list[str]:
    v = json.loads((REPO / "bench" / name).read_text())
    texts = [t for group in v["task_templates"].values() for t in group]
    return texts + [t for group in v["corrections"].values() for t in group]


def scenario_strings() -> list[str]:
    """String literals of the tests outside this package (their tasks and corrections)."""
    out = []
    for path in (REPO / "tests").rglob("*.py"):
        if "curriculum" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and len(words(node.value)) >= N + 2
            ):
                out.append(node.value)
    return out


def demo_texts() -> list[str]:
    from continual_lsp import demo

    return [
        demo.WRONG_CHANGE,
        *(text for text, _ in demo.PREFERENCES.values()),
        demo.FIXED,
        "Fix the bug in src/calc/ops.py: mean() must use true division.",
    ]


def overlap(text: str, reference: set[tuple[str, ...]]) -> float:
    grams = ngrams(text)
    return len(grams & reference) / len(grams) if grams else 0.0


def test_phrasing_overlap_is_under_the_threshold() -> None:
    cur = set().union(*(ngrams(t) for t in curriculum_phrasing()))
    held = {
        "bench/learning": learning_held_out(),
        "agent-skill bench": bench_phrasing(BENCH_VOCABS[0]),
        "agent-skill dev draw": bench_phrasing(BENCH_VOCABS[1]),
        "tests": scenario_strings(),
        "demo": demo_texts(),
    }
    worst = {
        name: max(((overlap(t, cur), t) for t in texts), default=(0.0, ""))
        for name, texts in held.items()
    }
    too_close = {k: v for k, v in worst.items() if v[0] > MAX_OVERLAP}
    assert not too_close, too_close
    assert len(held["bench/learning"]) > 10 and len(held["tests"]) > 10  # found something


def test_no_shared_paths_or_names() -> None:
    paths = curriculum_paths()
    names = curriculum_names()
    examples = {
        str(p.relative_to(root))
        for root in (REPO / "examples").iterdir()
        if root.is_dir()
        for p in root.rglob("*")
        if p.is_file()
    } | {
        str(p.relative_to(ws))
        for ws in (REPO / "examples" / "bench-workspaces").iterdir()
        if ws.is_dir()
        for p in ws.rglob("*")
        if p.is_file()
    }
    # Source files only: README.md, package.json and friends are conventions, not content.
    code = {p for p in examples if p.endswith((".py", ".ts", ".js", ".go", ".rs", ".sh"))}
    assert not (paths & code), sorted(paths & code)
    assert not {Path(p).stem for p in paths if p.endswith(".py")} & {Path(p).stem for p in code} - {
        "__init__"
    }
    example_words = set()
    for root in (REPO / "examples").rglob("*"):
        if root.is_file() and root.suffix in (".py", ".ts", ".js", ".md", ".json"):
            example_words |= set(words(root.read_text(encoding="utf-8", errors="replace")))
    assert not {n.lower() for n in names} & example_words

    for name in BENCH_VOCABS:
        bench = json.loads((REPO / "bench" / name).read_text())
        bench_names = set(bench["functions"]) | set(bench["stems"]) | set(bench["renames"])
        assert not names & bench_names, name
        assert not set(load_vocab()["dirs"]) & set(bench["dirs"]), name


def test_the_check_can_fail() -> None:
    """The overlap measure flags a copied phrase (so the threshold test can fail)."""
    cur = set().union(*(ngrams(t) for t in curriculum_phrasing()))
    copied = load_vocab()["corrections"]["wrong_file"][1].format(path="lib/x.py")
    assert overlap(copied, cur) > MAX_OVERLAP
