"""Start the server for a test: `python -m tests.server.launch [--script NAME] [--tcp …]`.

With `--script`, the real Agent runs on the embedded model forced to a scripted list of calls
(see scripted.py); without, on the embedded model's own choices.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from continual_lsp.config import Settings
from continual_lsp.server.main import serve


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--script")
    parser.add_argument("--store", required=True)
    parser.add_argument("--tcp")
    parser.add_argument("--token")
    parser.add_argument("--training", action="store_true")
    parser.add_argument("--window", type=float, default=120.0)
    parser.add_argument("--sandbox", default="none", choices=["none", "bwrap"])
    parser.add_argument(
        "--review-reads", action="store_true", help="show read-only calls instead of running them"
    )
    parser.add_argument("--review", action="store_true", help="run `review` instead of `serve`")
    parser.add_argument("--task")
    parser.add_argument("--workspace")
    parser.add_argument("--decisions")
    parser.add_argument("--out")
    parser.add_argument("--file", action="append", default=[], dest="files")
    args = parser.parse_args()
    settings = Settings.load(
        store_path=args.store,
        enable_training=args.training,
        sandbox=args.sandbox,
        allow_unsandboxed=args.sandbox == "none",
        manual_edit_window_s=args.window,
        max_turns=8,
        autonomy="manual" if args.review_reads else None,
    )
    factory = None
    if args.script:
        from continual_lsp.agent.agent import Agent
        from continual_lsp.lanes.routing.embed import HashingEmbedder, set_embedder

        # Protocol tests: lexical clustering instead of loading MiniLM in every server.
        set_embedder(HashingEmbedder())
        from tests.server.scripted import SCRIPTS, ForcedCallPolicy

        calls = SCRIPTS[args.script]

        def factory(settings: Settings, workspace: Path, listener: Any) -> Agent:
            return Agent(
                settings, workspace, listener=listener, policy=ForcedCallPolicy(settings, calls)
            )

    if args.review:
        from continual_lsp.server.review import run_review

        code = run_review(
            settings,
            args.task,
            args.workspace,
            args.decisions,
            args.out,
            files=args.files,
            agent_factory=factory,
        )
        raise SystemExit(code)
    raise SystemExit(serve(settings, args.tcp, args.token, agent_factory=factory))


if __name__ == "__main__":
    main()
