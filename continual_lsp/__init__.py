"""continual-lsp: a coding agent behind a language server that learns from its reviewer."""

__version__ = "0.1.0"
