"""One-line tasks on `examples/sample-workspace` that between them call for every tool.

Shared by `bench/propose.py` (time to a proposal) and the sampling tests, so the numbers
the bench prints and the behaviour the tests check come from the same prompts.
"""

SAMPLE_TASKS = [
    "fix the failing test in tests/test_ops.py",
    "list every Python file in the repository",
    "find where the function add is defined",
    "run the test suite with pytest",
    "create hello.txt containing the word hi",
    "show me README.md",
    "replace 'a - b' with 'a + b' in src/calc/ops.py",
    "search for TODO comments under src",
    "replace lines 3 to 5 of notes.md with an empty line",
    "how many lines does package.json have?",
]
