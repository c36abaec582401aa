// The status bar item: backend, adapter version, training in progress, last step's loss and
// time. Polls `continual/status` when something changed, and every few seconds while training.

import * as vscode from "vscode";
import type { ContinualClient } from "./client";
import type { LearnedNotification } from "./core/protocol";
import { formatStatus, type StatusState } from "./core/status";

const POLL_MS = 3000;

export class StatusBar implements vscode.Disposable {
  private readonly item = vscode.window.createStatusBarItem("continual.status", vscode.StatusBarAlignment.Left, 10);
  private readonly state: StatusState = { connection: "stopped", training: false, pendingCount: 0 };
  private timer: ReturnType<typeof setTimeout> | undefined;
  private polling = false;

  constructor(private readonly client: ContinualClient) {
    this.item.name = "Continual";
    this.item.command = "continual.showStatus";
    this.render();
    this.item.show();
  }

  get tooltip(): string {
    return formatStatus(this.state).tooltip;
  }

  setConnection(connection: StatusState["connection"]): void {
    this.state.connection = connection;
    if (connection !== "running") this.state.training = false;
    this.render();
    if (connection === "running") this.poll();
  }

  setPending(count: number): void {
    this.state.pendingCount = count;
    this.render();
  }

  setTraining(training: boolean): void {
    this.state.training = training;
    this.render();
    this.poll();
  }

  learned(note: LearnedNotification): void {
    this.state.lastLearned = note;
    this.state.training = false;
    this.render();
    this.poll();
  }

  /** Ask the server for its status now (coalesced), and again shortly while it trains. */
  poll(): void {
    if (this.polling || this.state.connection !== "running") return;
    this.polling = true;
    this.client
      .status()
      .then((status) => {
        if (status) this.state.status = status;
      })
      .catch(() => undefined)
      .finally(() => {
        this.polling = false;
        this.render();
        if (this.timer) clearTimeout(this.timer);
        this.timer = undefined;
        if (this.state.training || (this.state.status?.queueDepth ?? 0) > 0) {
          this.timer = setTimeout(() => this.poll(), POLL_MS);
        }
      });
  }

  private render(): void {
    const view = formatStatus(this.state);
    this.item.text = view.text;
    this.item.tooltip = view.tooltip;
    this.item.backgroundColor = view.warning ? new vscode.ThemeColor("statusBarItem.warningBackground") : undefined;
  }

  dispose(): void {
    if (this.timer) clearTimeout(this.timer);
    this.item.dispose();
  }
}
