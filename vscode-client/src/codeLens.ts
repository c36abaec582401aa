// Approve / Deny… / Edit… as CodeLens above the changed hunk: on the workspace file a
// proposal targets, and on the proposed side of its diff. A change of several hunks also
// gets Accept / Reject… above each hunk (the decision goes once every hunk has a verdict).

import * as vscode from "vscode";
import { approveLabel } from "./core/describe";
import type { PendingProposals } from "./core/pendingProposals";
import { parseProposalDocPath, PROPOSAL_SCHEME } from "./core/proposalUri";
import { parseUnifiedDiff } from "./core/unifiedDiff";
import type { HunkVerdict, ProposalNotification } from "./core/protocol";

function firstChangedLine(proposal: ProposalNotification, side: "old" | "new"): number {
  if (side === "old" && proposal.range) return proposal.range.start.line;
  try {
    const hunk = parseUnifiedDiff(proposal.diff ?? "")[0]?.hunks[0];
    if (hunk) {
      const offset = hunk.lines.findIndex((l) => l.kind !== " ");
      const start = side === "old" ? hunk.oldStart : hunk.newStart;
      return Math.max(0, start - 1 + Math.max(offset, 0));
    }
  } catch {
    // An unreadable diff: put the lenses at the top.
  }
  return 0;
}

export class ProposalCodeLens implements vscode.CodeLensProvider {
  private readonly changed = new vscode.EventEmitter<void>();
  readonly onDidChangeCodeLenses = this.changed.event;

  constructor(
    private readonly pending: PendingProposals,
    private readonly targetUri: (proposal: ProposalNotification) => vscode.Uri | undefined,
    private readonly verdicts: (proposalId: string) => ReadonlyMap<number, HunkVerdict> | undefined,
  ) {}

  refresh(): void {
    this.changed.fire();
  }

  provideCodeLenses(document: vscode.TextDocument): vscode.CodeLens[] {
    const lenses: vscode.CodeLens[] = [];
    if (document.uri.scheme === PROPOSAL_SCHEME) {
      const ref = parseProposalDocPath(document.uri.path, document.uri.query);
      const proposal = ref && ref.side === "proposed" ? this.pending.get(ref.proposalId) : undefined;
      if (proposal) {
        lenses.push(...this.lenses(proposal, firstChangedLine(proposal, "new"), document, false));
        lenses.push(...this.hunkLenses(proposal, "new", document));
      }
      return lenses;
    }
    for (const proposal of this.pending.all()) {
      if (this.targetUri(proposal)?.toString() === document.uri.toString()) {
        lenses.push(...this.lenses(proposal, firstChangedLine(proposal, "old"), document, true));
        lenses.push(...this.hunkLenses(proposal, "old", document));
      }
    }
    return lenses;
  }

  private lenses(proposal: ProposalNotification, line: number, document: vscode.TextDocument, withDiff: boolean): vscode.CodeLens[] {
    const at = Math.min(line, Math.max(document.lineCount - 1, 0));
    const range = new vscode.Range(at, 0, at, 0);
    const id = proposal.proposalId;
    const lens = (title: string, command: string, tooltip: string) =>
      new vscode.CodeLens(range, { title, command, arguments: [id], tooltip });
    const blocked = proposal.blockedBy;
    return [
      blocked
        ? lens("$(shield) Override guard", "continual.overrideProposal", `Blocked by a guard: ${blocked} Runs it anyway; counts against the guard`)
        : proposal.tool === "done"
        ? lens(`$(check) ${approveLabel(proposal)}`, "continual.approveProposal", "End the task with this summary")
        : lens(`$(check) Approve ${proposal.tool}`, "continual.approveProposal", "Run the proposed call"),
      lens("$(close) Deny…", "continual.denyProposal", "Deny with a correction; the agent learns from it and retries"),
      lens("$(edit) Edit…", "continual.editProposal", "Change the proposal yourself, then submit it"),
      ...(withDiff ? [lens("$(diff) Show diff", "continual.showProposal", "Open the proposal in the diff view")] : []),
    ];
  }

  private hunkLenses(proposal: ProposalNotification, side: "old" | "new", document: vscode.TextDocument): vscode.CodeLens[] {
    const hunks = proposal.hunks ?? [];
    const votes = this.verdicts(proposal.proposalId);
    const id = proposal.proposalId;
    return hunks.flatMap((h) => {
      const start = side === "old" ? h.oldStart : h.newStart;
      const at = Math.min(Math.max(start - 1, 0), Math.max(document.lineCount - 1, 0));
      const range = new vscode.Range(at, 0, at, 0);
      const n = `${h.index + 1}/${hunks.length}`;
      const vote = votes?.get(h.index);
      if (vote) {
        const title = vote.accept ? `$(check) hunk ${n} accepted` : `$(close) hunk ${n} rejected${vote.reason ? `: ${vote.reason}` : ""}`;
        return [new vscode.CodeLens(range, { title, command: "" })];
      }
      return [
        new vscode.CodeLens(range, { title: `$(check) Accept hunk ${n}`, command: "continual.acceptHunk", arguments: [id, h.index] }),
        new vscode.CodeLens(range, { title: `$(close) Reject hunk ${n}…`, command: "continual.rejectHunk", arguments: [id, h.index] }),
      ];
    });
  }

  dispose(): void {
    this.changed.dispose();
  }
}
