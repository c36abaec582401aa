"""bench/learning: does the agent learn from its reviewer's corrections, and at what cost?

`scenarios.py` holds the correction scenarios (training and held-out situations on the
sample workspaces in `examples/bench-workspaces/`, a scripted reviewer, a checker per
scenario); `suite.py` runs every method on them; `report.py` writes the markdown table
and the plots; `run.py` is the command line. See docs/evidence.md.
"""

import os

# Offline and quiet for every command here, set before transformers or trl is imported.
for _name, _value in {
    "TRL_EXPERIMENTAL_SILENCE": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    os.environ.setdefault(_name, _value)
