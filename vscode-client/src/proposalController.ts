// Proposals awaiting a decision: show each one (diff for file changes, a dialog for commands),
// and send the reviewer's approve / deny / edit to the server.

import * as path from "node:path";
import * as vscode from "vscode";
import type { ContinualClient } from "./client";
import { askCorrection } from "./correctionInput";
import { approveLabel, callDocument, describeProposal, proposalDetail, rememberCorrection } from "./core/describe";
import { editableText, editArgumentsFor, editNonFileArguments } from "./core/editedArguments";
import { PendingProposals } from "./core/pendingProposals";
import { EDIT_SCHEME, parseProposalDocPath, PROPOSAL_SCHEME } from "./core/proposalUri";
import { proposalPath, proposedContent } from "./core/proposedContent";
import {
  isFileChanging,
  type DecideParams,
  type DecideResult,
  type Decision,
  type HunkDecision,
  type HunkVerdict,
  type ProposalNotification,
} from "./core/protocol";
import { EditDocuments } from "./editDocuments";
import { ProposalDocuments } from "./proposalDocuments";

const RECENT_KEY = "continual.recentCorrections";

export interface DecisionEvent {
  proposal: ProposalNotification;
  decision: Decision;
  /** undefined while the request is in flight. */
  result?: DecideResult;
  error?: string;
}

export class ProposalController implements vscode.Disposable {
  readonly pending = new PendingProposals();
  private readonly editing = new Map<string, vscode.Uri>();
  /** Hunk verdicts given so far, per proposal: sent together once every hunk has one. */
  private readonly hunkVotes = new Map<string, Map<number, HunkVerdict>>();
  private readonly changed = new vscode.EventEmitter<void>();
  private readonly decided = new vscode.EventEmitter<DecisionEvent>();
  readonly onDidChange = this.changed.event;
  readonly onDecision = this.decided.event;

  constructor(
    private readonly client: ContinualClient,
    private readonly docs: ProposalDocuments,
    private readonly edits: EditDocuments,
    private readonly output: vscode.LogOutputChannel,
    private readonly memento: vscode.Memento,
  ) {}

  // -- incoming -----------------------------------------------------------------------------

  async receive(proposal: ProposalNotification): Promise<void> {
    this.output.info(`Proposal ${proposal.proposalId} (task ${proposal.taskId}): ${describeProposal(proposal)}`);
    if (proposal.note) this.output.info(`  note: ${proposal.note}`);
    if (proposal.readOnly && !(await this.serverWaitsFor(proposal.proposalId))) {
      this.output.info("  read-only: approved by the server");
      return;
    }
    for (const id of this.pending.add(proposal)) await this.forget(id);
    this.output.info(`Awaiting a decision on ${proposal.proposalId} (${proposal.tool})`);
    await this.refreshContent(proposal);
    this.fireChanged();
    const autoOpen = vscode.workspace.getConfiguration("continual").get<boolean>("autoOpenDiff", true);
    if (autoOpen) await this.showDiff(proposal.proposalId);
    if (isFileChanging(proposal.tool)) {
      if (!autoOpen) this.notify(proposal);
    } else {
      void this.askNonFile(proposal);
    }
  }

  taskDone(taskId: string, summary: string): void {
    this.output.info(`Task ${taskId} done: ${summary}`);
    for (const id of this.pending.removeTask(taskId)) void this.forget(id);
    this.fireChanged();
    void vscode.window.showInformationMessage(`Continual: task finished — ${summary}`);
  }

  /** After a (re)start: keep what the server still waits for, show what is missing. */
  async resync(): Promise<void> {
    try {
      const waiting = await this.client.pending();
      for (const id of this.pending.retain(waiting.map((p) => p.proposalId))) await this.forget(id);
      this.fireChanged();
      for (const proposal of waiting) if (!this.pending.has(proposal.proposalId)) await this.receive(proposal);
    } catch (error) {
      this.output.warn(`Pending proposals after start: ${String(error)}`);
    }
  }

  /** A file changed on disk: recompute the proposed side of the proposals that target it. */
  async fileSaved(uri: vscode.Uri): Promise<void> {
    for (const proposal of this.pending.all()) {
      if (this.targetUri(proposal)?.toString() === uri.toString()) await this.refreshContent(proposal);
    }
  }

  private async serverWaitsFor(proposalId: string): Promise<boolean> {
    try {
      return (await this.client.status())?.pendingProposalId === proposalId;
    } catch {
      return false;
    }
  }

  // -- showing -------------------------------------------------------------------------------

  targetUri(proposal: ProposalNotification): vscode.Uri | undefined {
    if (proposal.uri) return vscode.Uri.parse(proposal.uri);
    const rel = proposalPath(proposal);
    const folder = vscode.workspace.workspaceFolders?.[0];
    if (!rel || !folder) return undefined;
    return path.isAbsolute(rel) ? vscode.Uri.file(rel) : vscode.Uri.joinPath(folder.uri, rel);
  }

  private displayPath(proposal: ProposalNotification): string {
    const target = this.targetUri(proposal);
    if (target) return vscode.workspace.asRelativePath(target, false);
    return proposalPath(proposal) ?? proposal.tool;
  }

  private async readCurrent(uri: vscode.Uri | undefined): Promise<string | undefined> {
    if (!uri) return undefined;
    try {
      return new TextDecoder().decode(await vscode.workspace.fs.readFile(uri));
    } catch {
      return undefined;
    }
  }

  private async refreshContent(proposal: ProposalNotification): Promise<void> {
    if (!isFileChanging(proposal.tool)) {
      const doc = callDocument(proposal);
      this.docs.set(proposal.proposalId, doc.name, "", doc.content);
      return;
    }
    const current = await this.readCurrent(this.targetUri(proposal));
    const proposed = proposedContent(proposal, current);
    if (proposed.ok) {
      if (proposed.source === "arguments" && proposal.diff) {
        this.output.warn(`  the diff did not apply to the current file; showing the call replayed from its arguments`);
      }
      this.docs.set(proposal.proposalId, this.displayPath(proposal), current ?? "", proposed.content);
    } else {
      this.output.error(`  cannot show the proposed content: ${proposed.error}`);
      const shown = `(cannot show this proposal: ${proposed.error})\n\n${proposal.diff ?? ""}`;
      this.docs.set(proposal.proposalId, this.displayPath(proposal), current ?? "", shown);
    }
  }

  private notify(proposal: ProposalNotification): void {
    void vscode.window
      .showInformationMessage(
        `Continual proposes: ${describeProposal(proposal)}${proposal.checked ? ` (${proposal.checked})` : ""}`,
        "Show Diff",
        approveLabel(proposal),
        "Deny…",
      )
      .then((choice) => {
        if (choice === "Show Diff") void this.showDiff(proposal.proposalId);
        else if (choice === approveLabel(proposal)) void this.approve(proposal.proposalId);
        else if (choice === "Deny…") void this.deny(proposal.proposalId);
      });
  }

  async showDiff(target?: unknown): Promise<void> {
    const proposal = this.resolve(target);
    if (!proposal) return;
    if (this.docs.get(proposal.proposalId) === undefined) await this.refreshContent(proposal);
    if (!isFileChanging(proposal.tool)) {
      const uri = ProposalDocuments.uri(proposal.proposalId, callDocument(proposal).name);
      await vscode.window.showTextDocument(uri, { preview: false });
      return;
    }
    const rel = this.displayPath(proposal);
    const exists = (await this.readCurrent(this.targetUri(proposal))) !== undefined;
    const left = ProposalDocuments.uri(proposal.proposalId, rel, "original");
    const right = ProposalDocuments.uri(proposal.proposalId, rel);
    const title = `${path.basename(rel)} ↔ proposed ${proposal.tool}${exists ? "" : " (new file)"}`;
    await vscode.commands.executeCommand("vscode.diff", left, right, title, { preview: false });
  }

  /** A call with no diff (bash and friends) also gets a notification with the three decisions.
   * Not modal: the agent's next step must not steal the keyboard. */
  private async askNonFile(proposal: ProposalNotification): Promise<void> {
    const detail = proposalDetail(proposal).replace(/\s*\n\s*/g, "  ");
    const done = proposal.tool === "done";
    const message = done ? `Continual says the task is done: ${detail}` : `Continual proposes ${proposal.tool}: ${detail}`;
    const show = proposal.tool === "bash" ? vscode.window.showWarningMessage : vscode.window.showInformationMessage;
    const always = proposal.allowOffer ? `Always Allow (approved ${proposal.allowOffer.approvals}×)` : "Always Allow";
    const approve = approveLabel(proposal);
    // Finishing is never "always allowed": each task's end is the reviewer's call; nor is a
    // call a guard blocks.
    const choice =
      done || proposal.blockedBy ? await show(message, approve, "Deny…", "Edit…") : await show(message, approve, always, "Deny…", "Edit…");
    if (!this.pending.has(proposal.proposalId)) return;
    if (choice === approve) await this.approve(proposal.proposalId);
    else if (choice === always) await this.allowAlways(proposal.proposalId);
    else if (choice === "Deny…") await this.deny(proposal.proposalId);
    else if (choice === "Edit…") await this.edit(proposal.proposalId);
  }

  // -- deciding ------------------------------------------------------------------------------

  /** The proposal a command means: an id, a proposal/edit document URI, the active editor, or the newest. */
  resolve(target?: unknown): ProposalNotification | undefined {
    let id: string | undefined;
    if (typeof target === "string") id = target;
    else if (target instanceof vscode.Uri) id = this.idFromUri(target);
    id ??= this.idFromActiveEditor();
    const proposal = id ? this.pending.get(id) : this.pending.current();
    if (!proposal) {
      void vscode.window.showInformationMessage(
        id ? "Continual: that proposal was already decided or withdrawn." : "Continual: no proposal awaits a decision.",
      );
    }
    return proposal;
  }

  private idFromUri(uri: vscode.Uri): string | undefined {
    if (uri.scheme === PROPOSAL_SCHEME || uri.scheme === EDIT_SCHEME) return parseProposalDocPath(uri.path)?.proposalId;
    return this.pending.forUri(uri.toString())[0]?.proposalId ?? this.pending.all().find((p) => this.targetUri(p)?.toString() === uri.toString())?.proposalId;
  }

  private idFromActiveEditor(): string | undefined {
    const uri = vscode.window.activeTextEditor?.document.uri;
    if (!uri || (uri.scheme !== PROPOSAL_SCHEME && uri.scheme !== EDIT_SCHEME)) return undefined;
    return parseProposalDocPath(uri.path)?.proposalId;
  }

  async approve(target?: unknown): Promise<void> {
    const proposal = this.resolve(target);
    if (!proposal) return;
    // The server refuses to approve a call a guard blocks: Approve (a key, a title button)
    // on one asks whether to override the guard instead.
    if (proposal.blockedBy) {
      const choice = await vscode.window.showWarningMessage(
        `Continual: a guard blocks ${describeProposal(proposal)}`,
        { modal: true, detail: `${proposal.blockedBy}\n\nOverride runs it anyway and counts against the guard (a guard overridden twice retires to Context).` },
        "Override guard",
        "Edit…",
      );
      if (choice === "Override guard") await this.override(proposal.proposalId);
      else if (choice === "Edit…") await this.edit(proposal.proposalId);
      return;
    }
    await this.send(proposal, { proposalId: proposal.proposalId, decision: "approve" }, `Approving ${describeProposal(proposal)}…`);
  }

  /** Run a call a guard blocks: the reviewer knows better; the override counts against it. */
  async override(target?: unknown): Promise<void> {
    const proposal = this.resolve(target);
    if (proposal) await this.send(proposal, { proposalId: proposal.proposalId, decision: "override" }, `Overriding the guard: ${describeProposal(proposal)}…`);
  }

  /** "Always allow calls like this one" (a rule in the CODE lane), then approve this one. */
  async allowAlways(target?: unknown): Promise<void> {
    const proposal = this.resolve(target);
    if (!proposal) return;
    try {
      const result = await this.client.allow(proposal.proposalId);
      this.output.info(`Allow rule ${result.itemId}: ${result.rule}`);
      void vscode.window.showInformationMessage(`Continual: always allowed ${result.rule} (revert it in the ledger).`);
    } catch (error) {
      void vscode.window.showErrorMessage(`Continual: ${error instanceof Error ? error.message : String(error)}`);
      return;
    }
    await this.approve(proposal.proposalId);
  }

  hunkVerdicts(id: string): ReadonlyMap<number, HunkVerdict> | undefined {
    return this.hunkVotes.get(id);
  }

  /** One hunk's verdict (a reason asked for on reject); the decision goes once all have one. */
  async decideHunk(target: unknown, index: unknown, accept: boolean): Promise<void> {
    const proposal = this.resolve(target);
    if (!proposal?.hunks || typeof index !== "number" || !proposal.hunks.some((h) => h.index === index)) return;
    let reason: string | undefined;
    if (!accept) {
      reason = await vscode.window.showInputBox({
        title: `Reject hunk ${index + 1} of ${proposal.hunks.length}`,
        prompt: "Why? The agent learns from it (optional: the rest of the change is kept either way)",
        ignoreFocusOut: true,
      });
      if (reason === undefined) return;
    }
    const votes = this.hunkVotes.get(proposal.proposalId) ?? new Map<number, HunkVerdict>();
    votes.set(index, { accept, ...(reason?.trim() ? { reason: reason.trim() } : {}) });
    this.hunkVotes.set(proposal.proposalId, votes);
    this.fireChanged();
    if (votes.size < proposal.hunks.length) return;
    const hunks = proposal.hunks.map((h): HunkDecision => ({ index: h.index, ...(votes.get(h.index) as HunkVerdict) }));
    const accepted = hunks.filter((h) => h.accept).length;
    const decision: Decision = accepted === hunks.length ? "approve" : accepted === 0 ? "deny" : "edit";
    const params: DecideParams = { proposalId: proposal.proposalId, decision, hunks: hunks as [HunkDecision, ...HunkDecision[]] };
    await this.send(proposal, params, `Applying ${accepted} of ${hunks.length} hunks…`);
  }

  /** Put back what an applied change replaced (the latest when no id): a late denial. */
  async undo(target?: unknown): Promise<void> {
    const proposalId = typeof target === "string" ? target : undefined;
    const reason = await vscode.window.showInputBox({
      title: proposalId ? `Undo ${proposalId}` : "Undo the last change the agent applied",
      prompt: "Why? The agent learns from it like a denial (optional)",
      ignoreFocusOut: true,
    });
    if (reason === undefined) return;
    try {
      const result = await this.client.undo(proposalId, reason.trim() || undefined);
      this.output.info(`Undo ${result.proposalId}: restored ${result.restored.join(", ")}`);
      void vscode.window.showInformationMessage(`Continual: undid ${result.proposalId}; restored ${result.restored.join(", ") || "nothing"}.`);
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      this.output.error(`Undo failed: ${message}`);
      void vscode.window.showErrorMessage(`Continual: ${message}`);
    }
  }

  async deny(target?: unknown, given?: string): Promise<void> {
    const proposal = this.resolve(target);
    if (!proposal) return;
    const correction = given?.trim() || (await askCorrection(proposal, this.recent()));
    if (!correction) return;
    await this.memento.update(RECENT_KEY, rememberCorrection(this.recent(), correction));
    await this.send(proposal, { proposalId: proposal.proposalId, decision: "deny", correction }, "Learning from your correction…");
  }

  async edit(target?: unknown): Promise<void> {
    const proposal = this.resolve(target);
    if (!proposal) return;
    if (!isFileChanging(proposal.tool)) {
      const text = await vscode.window.showInputBox({
        title: `Edit ${describeProposal(proposal)}`,
        prompt: proposal.tool === "bash" ? "The command to run instead" : "The call's arguments (JSON)",
        value: editableText(proposal.tool, proposal.arguments),
        ignoreFocusOut: true,
      });
      if (text === undefined) return;
      try {
        const editedArguments = editNonFileArguments(proposal.tool, proposal.arguments, text);
        await this.send(proposal, { proposalId: proposal.proposalId, decision: "edit", editedArguments }, "Running your edit…");
      } catch (error) {
        void vscode.window.showErrorMessage(`Continual: ${error instanceof Error ? error.message : String(error)}`);
      }
      return;
    }
    if (this.docs.get(proposal.proposalId) === undefined) await this.refreshContent(proposal);
    const rel = this.displayPath(proposal);
    const editUri = this.edits.create(proposal.proposalId, rel, this.docs.get(proposal.proposalId) ?? "");
    this.editing.set(proposal.proposalId, editUri);
    this.fireChanged();
    await closeTabs((uri) => uri.scheme === PROPOSAL_SCHEME && parseProposalDocPath(uri.path)?.proposalId === proposal.proposalId);
    const left = ProposalDocuments.uri(proposal.proposalId, rel, "original");
    await vscode.commands.executeCommand("vscode.diff", left, editUri, `${path.basename(rel)} ↔ your edit (Submit when done)`, {
      preview: false,
    });
  }

  async submitEdit(target?: unknown): Promise<void> {
    const id = this.editingId(target);
    const proposal = id ? this.pending.get(id) : undefined;
    const editUri = id ? this.editing.get(id) : undefined;
    if (!proposal || !editUri) {
      void vscode.window.showInformationMessage("Continual: no edit in progress.");
      return;
    }
    const doc = vscode.workspace.textDocuments.find((d) => d.uri.toString() === editUri.toString());
    const edited = doc ? doc.getText() : new TextDecoder().decode(this.edits.readFile(editUri));
    const original = await this.readCurrent(this.targetUri(proposal));
    let editedArguments: Record<string, unknown>;
    try {
      editedArguments = editArgumentsFor(proposal.tool, proposal.arguments, original, edited);
    } catch (error) {
      void vscode.window.showErrorMessage(`Continual: ${error instanceof Error ? error.message : String(error)}`);
      return;
    }
    await this.send(proposal, { proposalId: proposal.proposalId, decision: "edit", editedArguments }, "Running your edit…");
  }

  async discardEdit(target?: unknown): Promise<void> {
    const id = this.editingId(target);
    if (!id) return;
    await this.closeEdit(id);
    this.fireChanged();
    if (this.pending.has(id)) await this.showDiff(id);
  }

  private editingId(target?: unknown): string | undefined {
    if (typeof target === "string" && this.editing.has(target)) return target;
    if (target instanceof vscode.Uri) {
      const id = EditDocuments.proposalId(target);
      if (id) return id;
    }
    const active = vscode.window.activeTextEditor?.document.uri;
    const fromActive = active ? EditDocuments.proposalId(active) : undefined;
    if (fromActive) return fromActive;
    return this.editing.size === 1 ? [...this.editing.keys()][0] : undefined;
  }

  private recent(): string[] {
    return this.memento.get<string[]>(RECENT_KEY, []);
  }

  private async send(proposal: ProposalNotification, params: DecideParams, title: string): Promise<void> {
    this.output.info(`Decide ${proposal.proposalId}: ${params.decision}${params.correction ? ` — ${params.correction}` : ""}`);
    if (params.editedArguments) this.output.info(`  editedArguments: ${JSON.stringify(params.editedArguments)}`);
    // The reviewer is done with it: close its editors now; the server may take a while (training, retry).
    this.pending.remove(proposal.proposalId);
    await this.forget(proposal.proposalId);
    this.fireChanged();
    this.decided.fire({ proposal, decision: params.decision });
    const location = params.decision === "approve" ? vscode.ProgressLocation.Window : vscode.ProgressLocation.Notification;
    try {
      const result = await vscode.window.withProgress({ location, title: `Continual: ${title}` }, () => this.client.decide(params));
      this.output.info(`  → ${JSON.stringify(result)}`);
      this.decided.fire({ proposal, decision: params.decision, result });
      if (!result.ok) void vscode.window.showWarningMessage(`Continual: the server did not accept the ${params.decision}. See the log.`);
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      this.output.error(`  failed: ${message}`);
      this.decided.fire({ proposal, decision: params.decision, error: message });
      if (await this.serverWaitsFor(proposal.proposalId)) {
        this.pending.add(proposal);
        this.fireChanged();
      }
      const again = await vscode.window.showErrorMessage(`Continual: ${params.decision} failed: ${message}`, "Show Log");
      if (again === "Show Log") this.output.show(true);
    }
  }

  private async closeEdit(id: string): Promise<void> {
    const editUri = this.editing.get(id);
    if (!editUri) return;
    this.editing.delete(id);
    const doc = vscode.workspace.textDocuments.find((d) => d.uri.toString() === editUri.toString());
    if (doc?.isDirty) await doc.save(); // the in-memory file accepts it; closing then asks nothing
    await closeTabs((uri) => uri.toString() === editUri.toString());
    this.edits.remove(editUri);
  }

  /** Close a proposal's editors and drop its documents. */
  private async forget(id: string): Promise<void> {
    this.hunkVotes.delete(id);
    await this.closeEdit(id);
    await closeTabs((uri) => uri.scheme === PROPOSAL_SCHEME && parseProposalDocPath(uri.path)?.proposalId === id);
    this.docs.delete(id);
  }

  private fireChanged(): void {
    void vscode.commands.executeCommand("setContext", "continual.hasProposal", this.pending.size > 0);
    void vscode.commands.executeCommand("setContext", "continual.editing", this.editing.size > 0);
    this.changed.fire();
  }

  dispose(): void {
    this.changed.dispose();
    this.decided.dispose();
  }
}

async function closeTabs(match: (uri: vscode.Uri) => boolean): Promise<void> {
  const tabs = vscode.window.tabGroups.all
    .flatMap((group) => group.tabs)
    .filter((tab) => {
      const input = tab.input;
      if (input instanceof vscode.TabInputTextDiff) return match(input.modified) || match(input.original);
      if (input instanceof vscode.TabInputText) return match(input.uri);
      return false;
    });
  if (tabs.length > 0) await vscode.window.tabGroups.close(tabs, true);
}
