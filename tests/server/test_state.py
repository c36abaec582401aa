"""Client capabilities are read once, at initialize, into the few flags the server uses."""

from __future__ import annotations

from lsprotocol import types as lsp

from continual_lsp.server.state import ClientCapabilities


def _params(capabilities: lsp.ClientCapabilities, options: object = None) -> lsp.InitializeParams:
    return lsp.InitializeParams(capabilities=capabilities, initialization_options=options)


def test_a_bare_client_gets_the_plain_paths() -> None:
    assert ClientCapabilities.resolve(_params(lsp.ClientCapabilities())) == ClientCapabilities()


def test_what_a_full_client_declares_is_read() -> None:
    capabilities = lsp.ClientCapabilities(
        window=lsp.WindowClientCapabilities(
            work_done_progress=True,
            show_document=lsp.ShowDocumentClientCapabilities(support=True),
        ),
        workspace=lsp.WorkspaceClientCapabilities(
            workspace_edit=lsp.WorkspaceEditClientCapabilities(document_changes=True)
        ),
    )
    resolved = ClientCapabilities.resolve(_params(capabilities, {"continualProposals": True}))
    assert resolved == ClientCapabilities(
        renders_proposals=True, show_document=True, work_done_progress=True, document_changes=True
    )


def test_proposals_may_be_declared_as_an_experimental_capability() -> None:
    capabilities = lsp.ClientCapabilities(experimental={"continualProposals": True})
    assert ClientCapabilities.resolve(_params(capabilities)).renders_proposals
    declined = lsp.ClientCapabilities(experimental={"continualProposals": False})
    assert not ClientCapabilities.resolve(_params(declined, "yes")).renders_proposals
