// Read-only virtual documents (scheme `continual-proposal`) holding both sides of a proposal's
// diff: the file as it was when the proposal arrived (a snapshot, empty for a new file) and
// the proposed content. Snapshots keep the real file closed, so the server writes it on disk
// instead of editing a buffer the reviewer never asked to open.

import * as vscode from "vscode";
import { parseProposalDocPath, PROPOSAL_SCHEME, proposalDocPath, type Side } from "./core/proposalUri";

export class ProposalDocuments implements vscode.TextDocumentContentProvider, vscode.Disposable {
  private readonly contents = new Map<string, { original: string; proposed: string }>();
  private readonly changed = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.changed.event;

  static uri(proposalId: string, filePath: string, side: Side = "proposed"): vscode.Uri {
    return vscode.Uri.from({
      scheme: PROPOSAL_SCHEME,
      path: proposalDocPath(proposalId, filePath),
      query: side === "original" ? "original" : "",
    });
  }

  set(proposalId: string, filePath: string, original: string, proposed: string): void {
    this.contents.set(proposalId, { original, proposed });
    this.changed.fire(ProposalDocuments.uri(proposalId, filePath, "original"));
    this.changed.fire(ProposalDocuments.uri(proposalId, filePath));
  }

  get(proposalId: string): string | undefined {
    return this.contents.get(proposalId)?.proposed;
  }

  delete(proposalId: string): void {
    this.contents.delete(proposalId);
  }

  provideTextDocumentContent(uri: vscode.Uri): string {
    const ref = parseProposalDocPath(uri.path, uri.query);
    const entry = ref && this.contents.get(ref.proposalId);
    if (!entry) return "(this proposal was decided or withdrawn)\n";
    return ref.side === "original" ? entry.original : entry.proposed;
  }

  dispose(): void {
    this.changed.dispose();
    this.contents.clear();
  }
}
