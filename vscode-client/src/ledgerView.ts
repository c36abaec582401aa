// The ledger tree: where each correction went (CODE / WEIGHTS / CONTEXT), why, how often it
// recurred, and the context tax against a notes-only agent. Revert from the context menu.

import * as vscode from "vscode";
import type { ContinualClient } from "./client";
import { groupLedger, itemDescription, itemLabel, itemTooltip, type LaneGroup, type LedgerView } from "./core/ledger";
import type { Lane, LedgerItem } from "./core/protocol";

type Node =
  | { kind: "header"; view: LedgerView }
  | { kind: "lane"; group: LaneGroup }
  | { kind: "item"; item: LedgerItem }
  | { kind: "message"; text: string };

const LANE_ICONS: Record<Lane, string> = { CODE: "shield", WEIGHTS: "circuit-board", CONTEXT: "note", NONE: "circle-slash" };

export class LedgerTree implements vscode.TreeDataProvider<Node>, vscode.Disposable {
  private readonly changed = new vscode.EventEmitter<Node | undefined>();
  readonly onDidChangeTreeData = this.changed.event;
  private view: LedgerView | undefined;
  private error: string | undefined;

  constructor(private readonly client: ContinualClient) {}

  async refresh(): Promise<void> {
    if (this.client.state !== "running") {
      this.view = undefined;
      this.error = "The server is not running.";
    } else {
      try {
        this.view = groupLedger(await this.client.ledger());
        this.error = undefined;
      } catch (error) {
        this.error = `Could not load the ledger: ${error instanceof Error ? error.message : String(error)}`;
      }
    }
    this.changed.fire(undefined);
  }

  item(id: string): LedgerItem | undefined {
    return this.view?.groups.flatMap((g) => g.items).find((i) => i.id === id);
  }

  getChildren(node?: Node): Node[] {
    if (!node) {
      if (this.error) return [{ kind: "message", text: this.error }];
      if (!this.view || this.view.groups.every((g) => g.items.length === 0)) return [];
      return [{ kind: "header", view: this.view }, ...this.view.groups.map((group) => ({ kind: "lane" as const, group }))];
    }
    if (node.kind === "lane") return node.group.items.map((item) => ({ kind: "item" as const, item }));
    return [];
  }

  getTreeItem(node: Node): vscode.TreeItem {
    switch (node.kind) {
      case "message": {
        const item = new vscode.TreeItem(node.text);
        item.iconPath = new vscode.ThemeIcon("warning");
        return item;
      }
      case "header": {
        const { header } = node.view;
        const item = new vscode.TreeItem(header.label);
        item.id = "continual.ledger.header";
        item.description = header.description;
        item.tooltip = header.tooltip;
        item.iconPath = new vscode.ThemeIcon("dashboard");
        item.contextValue = "continual.ledgerHeader";
        return item;
      }
      case "lane": {
        const { group } = node;
        const state = group.items.length > 0 ? vscode.TreeItemCollapsibleState.Expanded : vscode.TreeItemCollapsibleState.None;
        const item = new vscode.TreeItem(`${group.label} (${group.items.length})`, state);
        item.id = `continual.ledger.lane.${group.lane}`;
        item.description = group.description;
        item.iconPath = new vscode.ThemeIcon(LANE_ICONS[group.lane]);
        item.contextValue = "continual.ledgerLane";
        return item;
      }
      case "item": {
        const ledgerItem = node.item;
        const item = new vscode.TreeItem(itemLabel(ledgerItem));
        item.id = `continual.ledger.item.${ledgerItem.id}`;
        item.description = itemDescription(ledgerItem);
        item.tooltip = new vscode.MarkdownString().appendText(itemTooltip(ledgerItem));
        item.iconPath = new vscode.ThemeIcon(ledgerItem.active ? "pass" : "history");
        // `.task`: a task-scoped correction, which the reviewer may promote to a standing rule.
        item.contextValue = ledgerItem.active
          ? `continual.ledgerItem.active${ledgerItem.taskScoped ? ".task" : ""}`
          : "continual.ledgerItem.reverted";
        return item;
      }
    }
  }

  dispose(): void {
    this.changed.dispose();
  }
}

/** The command behind Promote (a task-scoped item): routed again as a standing rule. */
export async function promoteLedgerItem(client: ContinualClient, tree: LedgerTree, node: unknown): Promise<void> {
  const item = typeof node === "object" && node !== null && "item" in node ? (node as { item: LedgerItem }).item : undefined;
  if (!item?.taskScoped) return;
  try {
    const result = await client.promote(item.id);
    void vscode.window.showInformationMessage(`Continual: promoted to ${result.lane}: ${result.reason}`);
  } catch (error) {
    void vscode.window.showErrorMessage(`Continual: promote failed: ${error instanceof Error ? error.message : String(error)}`);
  }
  await tree.refresh();
}

/** The command behind the Revert context-menu entry: the argument is the tree node. */
export async function revertLedgerItem(client: ContinualClient, tree: LedgerTree, node: unknown): Promise<void> {
  const item = typeof node === "object" && node !== null && "item" in node ? (node as { item: LedgerItem }).item : undefined;
  if (!item) return;
  const answer = await vscode.window.showWarningMessage(
    `Revert “${itemLabel(item, 60)}”?`,
    { modal: true, detail: `It leaves the ${item.lane} lane: ${item.reason}` },
    "Revert",
  );
  if (answer !== "Revert") return;
  try {
    await client.revert(item.id);
  } catch (error) {
    void vscode.window.showErrorMessage(`Continual: revert failed: ${error instanceof Error ? error.message : String(error)}`);
  }
  await tree.refresh();
}
