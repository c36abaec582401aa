"""bench/learning: does the agent learn from its reviewer's corrections, and at what cost?

`scenarios.py` holds the correction scenarios (training and held-out situations on the
sample workspaces in `examples/bench-workspaces/`, a scripted reviewer, a checker per
scenario); `suite.py` runs every method on them; `report.py` writes the markdown table
and the plots; `run.py` is the command line. See docs/evidence.md.
"""
