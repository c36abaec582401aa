// Entry point: wires the client, the proposal UI, the ledger, the status bar and the commands.

import * as vscode from "vscode";
import { ContinualClient } from "./client";
import { ProposalCodeLens } from "./codeLens";
import { EDIT_SCHEME, PROPOSAL_SCHEME } from "./core/proposalUri";
import { EditDocuments } from "./editDocuments";
import { LedgerTree, promoteLedgerItem, revertLedgerItem } from "./ledgerView";
import { ProposalController } from "./proposalController";
import { ProposalDocuments } from "./proposalDocuments";
import { StatusBar } from "./statusBar";

let client: ContinualClient | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const output = vscode.window.createOutputChannel("Continual", { log: true });
  const continual = new ContinualClient(output);
  client = continual;
  const docs = new ProposalDocuments();
  const edits = new EditDocuments();
  const proposals = new ProposalController(continual, docs, edits, output, context.globalState);
  const lenses = new ProposalCodeLens(
    proposals.pending,
    (p) => proposals.targetUri(p),
    (id) => proposals.hunkVerdicts(id),
  );
  const ledger = new LedgerTree(continual);
  const status = new StatusBar(continual);
  const ledgerView = vscode.window.createTreeView("continual.ledger", { treeDataProvider: ledger, showCollapseAll: true });

  context.subscriptions.push(
    output,
    continual,
    docs,
    edits,
    proposals,
    lenses,
    ledger,
    status,
    ledgerView,
    vscode.workspace.registerTextDocumentContentProvider(PROPOSAL_SCHEME, docs),
    vscode.workspace.registerFileSystemProvider(EDIT_SCHEME, edits, { isCaseSensitive: true }),
    vscode.languages.registerCodeLensProvider([{ scheme: "file" }, { scheme: PROPOSAL_SCHEME }], lenses),
  );

  // -- events ----------------------------------------------------------------------------------
  context.subscriptions.push(
    continual.onProposal.event((p) => void proposals.receive(p)),
    continual.onLearned.event((note) => {
      status.learned(note);
      void ledger.refresh();
    }),
    continual.onRouted.event((note) => {
      output.info(`Routed ${note.itemId} → ${note.lane}: ${note.reason}`);
      void ledger.refresh();
      status.poll();
    }),
    continual.onTaskDone.event((note) => {
      proposals.taskDone(note.taskId, note.summary);
      status.poll();
    }),
    continual.onConnection.event((state) => {
      status.setConnection(state);
      if (state === "running") {
        void proposals.resync();
        void ledger.refresh();
      }
    }),
    proposals.onDidChange(() => {
      status.setPending(proposals.pending.size);
      lenses.refresh();
    }),
    proposals.onDecision((event) => {
      if (event.decision !== "approve") status.setTraining(event.result === undefined && event.error === undefined);
      if (event.result?.learned) {
        status.learned({ proposalId: event.proposal.proposalId, ...event.result.learned });
      }
      if (event.result) void ledger.refresh();
      status.poll();
    }),
    vscode.workspace.onDidSaveTextDocument((doc) => void proposals.fileSaved(doc.uri)),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (["serverCommand", "pythonPath", "serverArgs", "model", "backend", "storePath"].some((k) => e.affectsConfiguration(`continual.${k}`))) {
        void vscode.window
          .showInformationMessage("Continual: server settings changed.", "Restart Server")
          .then((choice) => choice && vscode.commands.executeCommand("continual.restartServer"));
      }
    }),
  );

  // The server's plain-LSP commands (code actions on its diagnostics) go through the same UI.
  continual.interceptCommand = async (command, args) => {
    const id = typeof args[0] === "string" ? args[0] : undefined;
    switch (command) {
      case "continual.approve":
        await proposals.approve(id);
        return undefined;
      case "continual.override":
        await proposals.override(id);
        return undefined;
      case "continual.deny":
        await proposals.deny(id, typeof args[1] === "string" ? args[1] : undefined);
        return undefined;
      case "continual.edit":
        await proposals.edit(id);
        return undefined;
      case "continual.showDiff":
        await proposals.showDiff(id);
        return undefined;
      case "continual.hunk":
        await proposals.decideHunk(id, args[1], args[2] === true);
        return undefined;
      case "continual.undo":
        await proposals.undo(id);
        return undefined;
      case "continual.allow":
        await proposals.allowAlways(id);
        return undefined;
      default:
        return args;
    }
  };

  // -- commands --------------------------------------------------------------------------------
  const register = (name: string, run: (...args: unknown[]) => unknown) =>
    context.subscriptions.push(vscode.commands.registerCommand(name, run));

  // The file the reviewer is looking at starts the task in view, when it is in the folder
  // the server serves: a small model that has read the file edits it instead of hunting.
  const fileInView = (): string[] => {
    const uri = vscode.window.activeTextEditor?.document.uri;
    if (uri?.scheme !== "file" || vscode.workspace.getWorkspaceFolder(uri)?.index !== 0) return [];
    return [vscode.workspace.asRelativePath(uri, false)]; // the server's root is that folder
  };
  register("continual.startTask", async (preset?: unknown) => {
    const text =
      typeof preset === "string"
        ? preset
        : await vscode.window.showInputBox({
            title: "Continual: start a task",
            prompt: "What should the agent do? It proposes one tool call at a time for you to review.",
            placeHolder: "e.g. fix the failing test in tests/test_ops.py",
            ignoreFocusOut: true,
          });
    if (!text?.trim()) return;
    try {
      const result = await vscode.window.withProgress(
        { location: vscode.ProgressLocation.Notification, title: "Continual: thinking about the first step…" },
        () => continual.startTask(text.trim(), fileInView()),
      );
      output.info(`Task ${result.taskId} started: ${text.trim()}`);
      status.poll();
    } catch (error) {
      void vscode.window.showErrorMessage(`Continual: ${error instanceof Error ? error.message : String(error)}`);
    }
  });
  register("continual.addNote", async () => {
    const text = await vscode.window.showInputBox({
      title: "Continual: add a note",
      prompt: "A standing instruction for the agent (it is routed like a correction)",
      ignoreFocusOut: true,
    });
    if (!text?.trim()) return;
    try {
      await continual.note(text.trim());
      void ledger.refresh();
    } catch (error) {
      void vscode.window.showErrorMessage(`Continual: ${error instanceof Error ? error.message : String(error)}`);
    }
  });
  register("continual.openLedger", async () => {
    await vscode.commands.executeCommand("continual.ledger.focus");
    await ledger.refresh();
  });
  register("continual.refreshLedger", () => ledger.refresh());
  register("continual.revertItem", (node) => revertLedgerItem(continual, ledger, node));
  register("continual.promoteItem", (node) => promoteLedgerItem(continual, ledger, node));
  register("continual.overrideProposal", (target) => proposals.override(target));
  register("continual.showStatus", async () => {
    status.poll();
    const choice = await vscode.window.showInformationMessage(
      "Continual",
      { modal: true, detail: status.tooltip },
      "Show Proposal",
      "Open Ledger",
      "Show Server Log",
    );
    if (choice === "Show Proposal") await proposals.showDiff();
    else if (choice === "Open Ledger") await vscode.commands.executeCommand("continual.openLedger");
    else if (choice === "Show Server Log") output.show(true);
  });
  register("continual.showProposal", (target) => proposals.showDiff(target));
  register("continual.approveProposal", (target) => proposals.approve(target));
  register("continual.denyProposal", (target) => proposals.deny(target));
  register("continual.editProposal", (target) => proposals.edit(target));
  register("continual.submitEdit", (target) => proposals.submitEdit(target));
  register("continual.discardEdit", (target) => proposals.discardEdit(target));
  register("continual.acceptHunk", (target, index) => proposals.decideHunk(target, index, true));
  register("continual.rejectHunk", (target, index) => proposals.decideHunk(target, index, false));
  register("continual.allowProposal", (target) => proposals.allowAlways(target));
  // Not `continual.undo`: that name is the server's command, which the language client registers.
  register("continual.undoChange", async (target) => {
    await proposals.undo(target);
    void ledger.refresh();
  });
  register("continual.showLog", () => output.show(true));
  register("continual.restartServer", async () => {
    try {
      await continual.restart();
    } catch (error) {
      void vscode.window.showErrorMessage(`Continual: the server did not start: ${String(error)}`, "Show Log").then((c) => c && output.show(true));
    }
  });

  void vscode.commands.executeCommand("setContext", "continual.hasProposal", false);
  void vscode.commands.executeCommand("setContext", "continual.editing", false);

  // Not awaited: the server may take a while to load its model; the UI reports its state.
  continual.start().catch((error: unknown) => {
    void vscode.window
      .showErrorMessage(`Continual: the server did not start (${String(error)}). Check continual.pythonPath.`, "Show Log")
      .then((choice) => choice && output.show(true));
  });
}

export async function deactivate(): Promise<void> {
  await client?.stop();
  client = undefined;
}
