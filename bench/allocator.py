"""Score the offline detector + allocator on the dev set, validated by repository.

    python bench/allocator.py [--data PATH] [--folds 5] [--seed 0] [--repeats 3] [--export]

Headline: repository-grouped cross-validation. Rows are grouped by their source
repository and whole repositories are dealt to folds, so no repository is on both sides of
a fold (rules of one project share words: a random split would let the heads memorise a
project's vocabulary). In each fold the learned heads (logistic regression over MiniLM
embeddings + handcrafted features) are trained on the other folds only, then the full
pipeline (detector -> guard compiler -> heads -> ordered policy) labels the held-out rows.
The rules-only pipeline (no learned heads) is scored on every row too.

Second estimate: leave one source kind out (AGENTS.md, CLAUDE.md, .cursorrules and
.cursor/rules, copilot-instructions.md, other rules files, task lists and plans, issues):
the heads are trained without any row of the held-out kind, as for a user whose rules file
is of a kind the dev set does not hold. The gap between the two estimates is printed.

Honesty notes, printed with the results: the guard compiler's phrase patterns and the
detector's cue lists were written by people who had read the 84-row starting set (`origin:
corrections-dev`); the detector's task-list verbs and standing triggers ("on every commit",
"when adding …") were extended after reading which of the 390 added rows it misread. The rule shapes of `lanes/shapes/` (the guard kinds issue #17 lists)
were written after reading which of the 390 added rows the compiler missed (twice: the
second round added language and framework conventions, package managers, command
wrappers, file placement, read-first files, commit-message language and "make sure `X`
passes"), and so were `lanes/shapes/conventions.py` and `lanes/shapes/repo_policy.py` (a third
round: lines a file must keep, append-only files, co-required tokens, dependencies added
by their tool or with approval, identifier case, boolean prefixes, line formatting,
assignment operators, expression bodies, relative imports, libraries kept out of a kind
of folder, debug builds, "no commits", commit subject length, lockfiles), so the
rules-only figures and CODE recall are optimistic on those rows too; every shape is also
tested on paraphrases that are not in the dev set (tests/lanes/test_guard_kinds.py,
shapes/test_conventions.py, shapes/test_repo_policy.py), and CODE precision says whether a
shape fires on a row no function can keep. The eight handcrafted features that tell a project fact from a way of working
(identifier spans, proper nouns, "we use", glossary lines, descriptive starts, words
about the user, digits, non-command code spans) and the detector's rules-file entry
heading were added after reading the grouped CV's misrouted rows (2026-12-04), measured
once as a set, not picked one by one. The learned heads are cross-validated by repository, but their two
training settings (steps, l2) were picked by this same grouped CV (no nested CV), a small
optimism of its own; the real check is the held-out set from other repositories. The rule
patterns are reviewed for over-fitting below: every literal word in them (module
constants and the regexes inside the shape functions) is looked up in the dev set, and a
word that occurs in exactly one repository's rows is listed.

Recurrence: the dev labels mark WEIGHTS for behavioural rules that plausibly recur,
without counts (see bench/data/README.md), so this bench calls the allocator with
`recurrence_met=True`. In use, the same rule goes to CONTEXT until its cluster recurs.

Writes bench/results/allocator.json. `--export` trains the heads on every row and writes
continual_lsp/data/router_heads.json (numbers only, no text).
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from continual_lsp.lanes import compile as guard_compile  # noqa: E402
from continual_lsp.lanes import features, prose_actions, shapes  # noqa: E402
from continual_lsp.lanes.reading import read  # noqa: E402
from continual_lsp.lanes.routing import allocator as allocator_module  # noqa: E402
from continual_lsp.lanes.routing import detector, learned  # noqa: E402
from continual_lsp.lanes.routing.allocator import allocate  # noqa: E402
from continual_lsp.lanes.routing.detector import detect_offline  # noqa: E402
from continual_lsp.lanes.routing.learned import HEADS_FILE, Heads, featurize  # noqa: E402
from continual_lsp.lanes.shapes import (  # noqa: E402
    content,
    conventions,
    dependencies,
    git,
    idioms,
    kit,
    paths,
    repo_policy,
    sequence,
)

LANES = ["CODE", "WEIGHTS", "CONTEXT", "NONE"]
DEFAULT_DATA = REPO / "bench/data/rules-dev.jsonl"
WRITTEN = REPO / "bench/data/rules-written.jsonl"
RESULTS = REPO / "bench/results/allocator.json"


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def repository(source: str) -> str:
    """`owner/repo:path` or a web address -> the group a row belongs to."""
    s = source.removeprefix("https://github.com/")
    if "://" in s:
        return s.split("://", 1)[1].split("/", 1)[0]  # one group per site
    return "/".join(s.split(":")[0].split("/")[:2]).lower()


def source_kind(row: dict) -> str:
    """The kind of file (or channel) a row was written in: the second split's groups."""
    source = row["source"]
    if row.get("origin") == "task-list":
        return "task lists and plans"
    if "://" in source or "/issues/" in source:
        return "issues"
    name = source.split(":", 1)[-1].lower()
    for kind, marker in (
        ("AGENTS.md", "agents.md"),
        ("CLAUDE.md", "claude.md"),
        (".cursorrules / .cursor/rules", "cursor"),
        ("copilot-instructions.md", "copilot"),
    ):
        if marker in name:
            return kind
    # .clinerules, .windsurfrules, .kiro/steering, CONTRIBUTING and other rules files
    return "other rules files"


def predict_lane(text: str) -> tuple[str, bool]:
    reading = read(text)
    det = detect_offline(reading)
    if not det.is_correction:
        return "NONE", False
    decision = allocate(reading, 1, recurrence_met=True, use_llm=False)
    return decision.lane, True


def grouped_folds(groups: list[str], k: int, seed: int) -> list[int]:
    """Whole groups to folds, largest first onto the smallest fold (shuffled ties)."""
    rng = np.random.default_rng(seed)
    sizes = Counter(groups)
    names = list(sizes)
    rng.shuffle(names)
    names.sort(key=lambda g: -sizes[g])
    load_ = [0] * k
    where: dict[str, int] = {}
    for g in names:
        f = int(np.argmin(load_))
        where[g] = f
        load_[f] += sizes[g]
    return [where[g] for g in groups]


def scores(gold: list[str], pred: list[str], det: list[bool]) -> dict:
    n = len(gold)
    per = {}
    for lane in LANES:
        tp = sum(g == lane and p == lane for g, p in zip(gold, pred, strict=True))
        fp = sum(g != lane and p == lane for g, p in zip(gold, pred, strict=True))
        fn = sum(g == lane and p != lane for g, p in zip(gold, pred, strict=True))
        prec = tp / (tp + fp) if tp + fp else 0.0
        rec = tp / (tp + fn) if tp + fn else 0.0
        per[lane] = {"precision": prec, "recall": rec, "n": tp + fn}
    gold_c = [g != "NONE" for g in gold]
    tp = sum(a and b for a, b in zip(gold_c, det, strict=True))
    fp = sum((not a) and b for a, b in zip(gold_c, det, strict=True))
    fn = sum(a and not b for a, b in zip(gold_c, det, strict=True))
    prec = tp / (tp + fp) if tp + fp else 0.0
    rec = tp / (tp + fn) if tp + fn else 0.0
    return {
        "accuracy": sum(g == p for g, p in zip(gold, pred, strict=True)) / n,
        "per_lane": per,
        "detector_precision": prec,
        "detector_recall": rec,
        "detector_f1": 2 * prec * rec / (prec + rec) if prec + rec else 0.0,
    }


def report(name: str, gold: list[str], pred: list[str], det: list[bool]) -> dict:
    s = scores(gold, pred, det)
    print(f"\n== {name} ==")
    print(f"lane accuracy: {s['accuracy']:.3f} ({round(s['accuracy'] * len(gold))}/{len(gold)})")
    print(f"{'lane':8} {'prec':>6} {'recall':>6} {'n':>4}")
    for lane in LANES:
        p = s["per_lane"][lane]
        print(f"{lane:8} {p['precision']:6.3f} {p['recall']:6.3f} {p['n']:4d}")
    print("confusion (rows = gold, cols = predicted):")
    print(" " * 9 + " ".join(f"{lane:>8}" for lane in LANES))
    for g in LANES:
        counts = Counter(p for gg, p in zip(gold, pred, strict=True) if gg == g)
        print(f"{g:8} " + " ".join(f"{counts.get(p, 0):8d}" for p in LANES))
    print(
        f"detector (correction vs request): precision {s['detector_precision']:.3f} "
        f"recall {s['detector_recall']:.3f} F1 {s['detector_f1']:.3f}"
    )
    return s


# -- over-fitting review -----------------------------------------------------------------------

_REVIEWED_MODULES = (
    features,
    guard_compile,
    detector,
    shapes,
    kit,
    content,
    idioms,
    dependencies,
    git,
    sequence,
    paths,
    conventions,
    repo_policy,
    prose_actions,
    allocator_module,
)


def pattern_words() -> set[str]:
    """Every literal word (3+ letters) the rule patterns and lexicons name."""
    words: set[str] = set()

    def add(text: str) -> None:
        # Regex syntax (\b, \s, (?:…)) is not vocabulary: drop escapes, keep letter runs.
        plain = re.sub(r"\\[a-zA-Z]", " ", text)
        words.update(w.lower() for w in re.findall(r"[A-Za-z][A-Za-z_-]{2,}", plain))

    def visit(value: object) -> None:
        if isinstance(value, re.Pattern):
            add(value.pattern)
        elif isinstance(value, str):
            add(value)
        elif isinstance(value, dict):
            for k, v in value.items():
                visit(k)
                visit(v)
        elif isinstance(value, (list, tuple, frozenset, set)):
            for v in value:
                visit(v)

    for module in _REVIEWED_MODULES:
        for name, value in vars(module).items():
            if name.isupper() or (name.startswith("_") and name[1:].isupper()):
                visit(value)
        # The regexes written inline in the shape functions: every string literal but
        # the docstrings.
        tree = ast.parse(inspect.getsource(module))
        docs = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docs
            ):
                add(node.value)
    return words


def overfit_review(rows: list[dict]) -> list[tuple[str, str]]:
    """(word, repository) for each pattern word found in exactly one dev repository."""
    by_word: dict[str, set[str]] = {}
    texts = [(r["text"].lower(), repository(r["source"])) for r in rows]
    for w in sorted(pattern_words()):
        rx = re.compile(r"(?<![a-z])" + re.escape(w) + r"(?![a-z])")
        by_word[w] = {repo for t, repo in texts if rx.search(t)}
    return [(w, next(iter(repos))) for w, repos in by_word.items() if len(repos) == 1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3, help="grouped-CV repeats (seeds)")
    ap.add_argument("--export", action="store_true")
    ap.add_argument("--errors", action="store_true", help="list misrouted rows (ids only)")
    args = ap.parse_args()
    rows = load(args.data)
    texts = [r["text"] for r in rows]
    gold = [r["lane"] for r in rows]
    groups = [repository(r["source"]) for r in rows]
    t0 = time.time()
    x = featurize(texts)
    print(
        f"{len(rows)} rows from {len(set(groups))} repositories ({args.data.name}); "
        f"embeddings in {time.time() - t0:.1f}s"
    )
    note = __doc__.split("Honesty notes, printed with the results: ")[1].split("Recurrence:")[0]
    print("NOTE: " + " ".join(note.split()))

    learned.set_heads(None)
    learned._loaded = True  # rules only: no heads at all
    learned._cached = None
    results = [predict_lane(t) for t in texts]
    rules = report(
        "rules only (no learned heads), every row",
        gold,
        [lane for lane, _ in results],
        [det for _, det in results],
    )

    def run_cv(seed: int, fold: list[int] | None = None) -> tuple[list[str], list[bool]]:
        fold = fold or grouped_folds(groups, args.folds, seed)
        pred = [""] * len(rows)
        det = [False] * len(rows)
        for f in sorted(set(fold)):
            train = [i for i in range(len(rows)) if fold[i] != f]
            learned.set_heads(Heads.fit(x[train], [gold[i] for i in train]))
            for i in range(len(rows)):
                if fold[i] == f:
                    pred[i], det[i] = predict_lane(texts[i])
        return pred, det

    runs = [run_cv(seed) for seed in range(args.seed, args.seed + args.repeats)]
    report(
        f"rules + learned heads, {args.folds}-fold CV grouped by repository (seed {args.seed})",
        gold,
        *runs[0],
    )
    if args.errors:
        for r, p in zip(rows, runs[0][0], strict=True):
            if r["lane"] != p:
                print(f"  {r['id']}: gold {r['lane']:8} predicted {p:8} {r['text'][:90]}")
    # Second split: leave one source kind out (AGENTS.md, CLAUDE.md, cursor rules, copilot
    # instructions, other rules files, task lists, issues): the heads never see how that
    # kind of file is written.
    kinds = [source_kind(r) for r in rows]
    names = sorted(set(kinds))
    print("\nsource kinds: " + ", ".join(f"{k} {kinds.count(k)}" for k in names))
    by_kind = run_cv(args.seed, [names.index(k) for k in kinds])
    kind_scores = report("rules + learned heads, leave one source kind out", gold, *by_kind)
    for k in names:
        idx = [i for i in range(len(rows)) if kinds[i] == k]
        code = [i for i in idx if gold[i] == "CODE"]
        acc = sum(gold[i] == by_kind[0][i] for i in idx) / len(idx)
        rec = sum(by_kind[0][i] == "CODE" for i in code) / len(code) if code else float("nan")
        print(f"  held out {k:30} n {len(idx):3d}  accuracy {acc:.3f}  CODE recall {rec:.3f}")
    all_scores = [scores(gold, p, d) for p, d in runs]
    mean = {
        "grouped_cv_accuracy": float(np.mean([s["accuracy"] for s in all_scores])),
        "code_recall": float(np.mean([s["per_lane"]["CODE"]["recall"] for s in all_scores])),
        "none_precision": float(np.mean([s["per_lane"]["NONE"]["precision"] for s in all_scores])),
        "detector_f1": float(np.mean([s["detector_f1"] for s in all_scores])),
        "source_kind_cv_accuracy": kind_scores["accuracy"],
        "source_kind_code_recall": kind_scores["per_lane"]["CODE"]["recall"],
    }
    gap = mean["grouped_cv_accuracy"] - mean["source_kind_cv_accuracy"]
    print(
        f"\ngap between the estimates: grouped by repository {mean['grouped_cv_accuracy']:.3f}"
        f" - grouped by source kind {mean['source_kind_cv_accuracy']:.3f} = {gap:+.3f}"
        f" (CODE recall {mean['code_recall']:.3f} vs {mean['source_kind_code_recall']:.3f})"
    )
    print(
        f"\nmean over {args.repeats} grouped splits: "
        + ", ".join(f"{k} {v:.3f}" for k, v in mean.items())
        + f"; rules-only accuracy (baseline, same run) {rules['accuracy']:.3f}, "
        f"ratio {mean['grouped_cv_accuracy'] / rules['accuracy']:.2f}"
    )

    # Prohibitions on identifiers, paths and commands of many ecosystems (written for
    # issue 31, not taken from repositories, so not in the CV): routed by the pipeline with
    # heads trained on every dev row, as written and with the backticks taken out.
    if WRITTEN.is_file():
        written = load(WRITTEN)
        learned.set_heads(Heads.fit(x, gold))
        for label, strip in (("as written", False), ("without backticks", True)):
            preds = [
                predict_lane(r["text"].replace("`", "") if strip else r["text"])[0] for r in written
            ]
            hits = sum(p == r["lane"] for p, r in zip(preds, written, strict=True))
            key = "written_code_recall" + ("_no_backticks" if strip else "")
            mean[key] = hits / len(written)
            print(
                f"written prohibitions ({len(written)} CODE rows, {label}): CODE recall {mean[key]:.3f}"
            )
            for p_, r in zip(preds, written, strict=True):
                if p_ != r["lane"]:
                    shown = r["text"].replace("`", "") if strip else r["text"]
                    print(f"  {r['id']}: predicted {p_:8} {shown[:90]}")

    flagged = overfit_review(rows)
    print(
        f"\nover-fitting review: {len(pattern_words())} literal words in the rule patterns "
        f"and lexicons; {len(flagged)} occur in exactly one dev repository:"
    )
    print(f"  {' '.join(w for w, _ in flagged)}")
    print(
        "  Read by hand (2026-12-03, again after the second round of shapes, with the "
        "regexes inside the shape functions now reviewed too): general vocabulary of "
        "software work (languages, tools, file kinds, conventions such as docstrings, jsdoc, "
        "arrow, crate) and English that is rare in this set. The project names an earlier "
        "review found (airflow, breeze, silo, scheduler) were removed; structlog is only "
        "the compliant example a logging shape synthesises, never matched against a rule. "
        "No pattern names a project, library or folder of a dev row: shapes take those "
        "from the rule's own text. Read again after the third round (2026-12-04): its new "
        "words are software vocabulary (getters, expression, assignments, trailing, todo, "
        "columns, crates, pub, sdk) and English (deep, parent, third, party, usage, stay); "
        "github, com and requests only occur in the examples a shape synthesises. The "
        "detector's task-list verbs (bump, enhance, connect, migrate, rename, …) were added "
        "after reading the requests it took for rules: general verbs of work items, but "
        "chosen with those rows in view, so NONE precision is optimistic by as much."
    )

    if args.export:
        heads = Heads.fit(x, gold)
        out = REPO / "continual_lsp" / HEADS_FILE
        out.write_text(heads.to_json())
        print(f"\nexported heads trained on all {len(rows)} rows to {out.relative_to(REPO)}")
    learned.set_heads(None)
    evidence = {
        "rows": len(rows),
        "repositories": len(set(groups)),
        **{k: round(v, 3) for k, v in mean.items()},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(evidence, indent=2) + "\n")
    print(f"\nsummary ({RESULTS.relative_to(REPO)}): {json.dumps(evidence)}")
    print(
        "targets: grouped_cv_accuracy >= 0.85, source_kind_cv_accuracy >= 0.80, code_recall"
        " and source_kind_code_recall >= 0.85, none_precision >= 0.90"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
