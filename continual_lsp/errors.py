"""The one base of every error whose message is written for the reviewer.

The server answers any of them with LSP's RequestFailed and the message as it is (the
store, the tools, the policy and the agent raise them; the server sees only the agent).
"""


class ReviewerError(Exception):
    """An error whose message a reviewer can read and act on (a stale file, a call that
    cannot run, a model service that is down)."""
