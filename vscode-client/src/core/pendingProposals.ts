// Which proposals await a decision. The server proposes one call at a time per task, so a new
// proposal for a task supersedes that task's earlier one. No `vscode` import.

import type { ProposalNotification } from "./protocol";

export class PendingProposals {
  private readonly byId = new Map<string, ProposalNotification>();

  /** Add a proposal needing a decision; returns the ids it superseded. */
  add(proposal: ProposalNotification): string[] {
    const superseded: string[] = [];
    for (const [id, other] of this.byId) {
      if (other.taskId === proposal.taskId && id !== proposal.proposalId) superseded.push(id);
    }
    for (const id of superseded) this.byId.delete(id);
    this.byId.delete(proposal.proposalId); // re-adding moves it to the end (the newest)
    this.byId.set(proposal.proposalId, proposal);
    return superseded;
  }

  get(proposalId: string): ProposalNotification | undefined {
    return this.byId.get(proposalId);
  }

  has(proposalId: string): boolean {
    return this.byId.has(proposalId);
  }

  /** The newest pending proposal. */
  current(): ProposalNotification | undefined {
    let last: ProposalNotification | undefined;
    for (const proposal of this.byId.values()) last = proposal;
    return last;
  }

  remove(proposalId: string): boolean {
    return this.byId.delete(proposalId);
  }

  /** Drop every proposal of a task (it ended); returns the ids dropped. */
  removeTask(taskId: string): string[] {
    const dropped = [...this.byId.values()].filter((p) => p.taskId === taskId).map((p) => p.proposalId);
    for (const id of dropped) this.byId.delete(id);
    return dropped;
  }

  /** Keep only the ids the server still knows (after a restart or a status poll). */
  retain(proposalIds: Iterable<string>): string[] {
    const keep = new Set(proposalIds);
    const dropped = [...this.byId.keys()].filter((id) => !keep.has(id));
    for (const id of dropped) this.byId.delete(id);
    return dropped;
  }

  /** Pending proposals whose target is `uri`. */
  forUri(uri: string): ProposalNotification[] {
    return this.all().filter((p) => p.uri === uri);
  }

  all(): ProposalNotification[] {
    return [...this.byId.values()];
  }

  get size(): number {
    return this.byId.size;
  }

  clear(): void {
    this.byId.clear();
  }
}
