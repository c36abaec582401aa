"""`continual-lsp` — the console script."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from continual_lsp import __version__
from continual_lsp.agent.scenarios import ScenarioFileError, check_held_out, load_scenario_file
from continual_lsp.agent.training_jobs import TrainingJobs
from continual_lsp.config import Settings, default_store_path
from continual_lsp.demo import run_demo
from continual_lsp.lanes.rules_import import import_rules, routing_stats
from continual_lsp.policy.factory import make_policy
from continual_lsp.server.main import serve
from continual_lsp.server.review import run_review
from continual_lsp.store import Store


def _settings(args: argparse.Namespace) -> Settings:
    return Settings.load(
        args.config,
        model=args.model,
        backend=args.backend,
        store_path=args.store,
        enable_training=False if args.no_training else None,
    )


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="a TOML settings file")
    parser.add_argument("--model", help="embedded:SmolLM2-135M-Instruct, a model dir or a .gguf")
    parser.add_argument("--backend", choices=["local", "tinker", "vllm"])
    parser.add_argument("--store", help="the SQLite store (default: the user's data dir)")
    parser.add_argument("--no-training", action="store_true", help="never train (deny = retry)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="continual-lsp",
        allow_abbrev=False,  # `--token X` must not silently become `--token-file X`
        description="A coding agent behind a language server that learns from its reviewer.",
    )
    parser.add_argument("--version", action="version", version=f"continual-lsp {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser(
        "serve", help="run the language server (stdio by default)", allow_abbrev=False
    )
    _common(serve)
    serve.add_argument("--tcp", metavar="HOST:PORT", help="serve over TCP (loopback by default)")
    serve.add_argument(
        "--token-file", help="TCP tokens: a file with one token, or JSON {token: user}"
    )
    # Named so that a token given on the command line is refused without echoing it.
    serve.add_argument("--token", help=argparse.SUPPRESS)

    demo = sub.add_parser("demo", help="the main job: watch the agent propose, learn and retry")
    _common(demo)
    demo.add_argument("--workspace", help="default: a fresh copy of the sample workspace")
    demo.add_argument(
        "--task", default="Fix the bug in src/calc/ops.py: mean() must use true division."
    )

    review = sub.add_parser("review", help="headless review for CI bots")
    _common(review)
    review.add_argument("--task", required=True)
    review.add_argument("--workspace", required=True)
    review.add_argument("--decisions", required=True, help="JSON lines file, or - for stdin")
    review.add_argument("--out", help="proposals as JSON lines (default: stdout)")
    review.add_argument(
        "--file",
        action="append",
        default=[],
        dest="files",
        help="a workspace file the task starts with in view (read first); repeatable",
    )

    rules = sub.add_parser(
        "import-rules", help="route an AGENTS.md / CLAUDE.md / .cursorrules file"
    )
    _common(rules)
    rules.add_argument("file")

    stats = sub.add_parser("routing-stats", help="export lane decisions and features, no text")
    _common(stats)

    check = sub.add_parser(
        "check", help="a scenario file's held-out situations against the current adapter"
    )
    _common(check)
    check.add_argument("file", nargs="+", help="scenario files (.json or .toml)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # argparse would echo them, and a mistyped flag's value may be a token.
        flags = " ".join(a.split("=", 1)[0] for a in unknown if a.startswith("-"))
        parser.error(f"unrecognized arguments: {flags or 'a value'} (values not shown)")
    # CONTINUAL_LSP_LOG: the level where no flag says it (a server started by an editor)
    level = "INFO" if args.verbose else os.environ.get("CONTINUAL_LSP_LOG", "WARNING").upper()
    if level not in logging.getLevelNamesMapping():
        print(f"continual-lsp: CONTINUAL_LSP_LOG={level!r} is not a level; using WARNING",
              file=sys.stderr)  # fmt: skip
        level = "WARNING"
    logging.basicConfig(
        level=level,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        settings = _settings(args)
    except Exception as exc:  # a bad config file or flag: say which, exit 2
        print(f"continual-lsp: invalid settings: {exc}", file=sys.stderr)
        return 2
    if args.command == "serve":
        if args.token is not None:
            print(
                "continual-lsp serve: --token is not accepted: every local user can read a "
                "command line; put the token in a file (--token-file) or $CONTINUAL_LSP_TOKEN",
                file=sys.stderr,
            )
            return 2
        return serve(settings, tcp=args.tcp, token_file=args.token_file) or 0
    if args.command == "demo":
        return run_demo(settings, task=args.task, workspace=args.workspace)
    if args.command == "review":
        return run_review(
            settings, args.task, Path(args.workspace), args.decisions, args.out, files=args.files
        )
    if args.command == "import-rules":
        store = Store(settings.store_path or default_store_path(settings.user))
        items = import_rules(store, Path(args.file), settings)
        for item in items:
            print(f"{item.lane:8} {item.text[:70]!r}  ({item.reason})")
        return 0
    if args.command == "routing-stats":
        store = Store(settings.store_path or default_store_path(settings.user))
        print(json.dumps(routing_stats(store), indent=2))
        return 0
    if args.command == "check":
        return _check(settings, args.file)
    return 2


def _check(settings: Settings, files: list[str]) -> int:
    """Print each held-out situation's verdict and the compliance; exit 1 when a file
    cannot be used (the error names its field)."""
    try:
        scenarios = [load_scenario_file(f) for f in files]
    except ScenarioFileError as exc:
        print(f"continual-lsp check: {exc}", file=sys.stderr)
        return 1
    store = Store(settings.store_path or default_store_path(settings.user))
    jobs = TrainingJobs(store, settings)
    policy = make_policy(settings)
    jobs.sync_sampler(policy)
    version = jobs.current_version_name() or "base model"
    for scenario in scenarios:
        results = check_held_out(policy, scenario, seed=settings.seed)
        for r in results:
            print(f"{'ok  ' if r.complied else 'FAIL'} {r.situation}: {r.proposal[:100]}")
        kept = sum(r.complied for r in results)
        print(
            f"{scenario.name}: {kept}/{len(results)} held-out situations comply "
            f"({kept / len(results):.0%}) with {version} — check: {scenario.check.doc}"
        )
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
