"""The starter curriculum: generated tool-use and correction-following episodes, and the
recipe that trains the starter adapter from them (`python -m continual_lsp.curriculum.train`)."""
