"""The language server (installed as `continual_lsp.server`): pygls on top of the Agent.

main.py       `serve()`: stdio (fd 1 kept for the protocol) and TCP (token per user)
transport.py  the message loop of one connection: framing, token gate, bad params
app.py        the pygls server object, raw JSON params for `continual/*`
session.py    per-connection state: agent, proposals ↔ documents, files, progress
agents.py     one Agent per (user, workspace), listener fan-out to connections
handlers/     one module per LSP method
review.py     `continual-lsp review`, headless, for CI bots
edits.py      a reviewer's edited file → editedArguments
text.py       line edits and one-line descriptions
nvim/         the Neovim module
"""
