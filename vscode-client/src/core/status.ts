// The status bar's text and tooltip from what the client knows. No `vscode` import.

import type { Autonomy, LearnedNotification, StatusResult } from "./protocol";

export type Connection = "starting" | "running" | "stopped";

export interface StatusState {
  connection: Connection;
  status?: StatusResult;
  /** A denial or edit was sent and its training step has not landed yet. */
  training: boolean;
  lastLearned?: LearnedNotification;
  pendingCount: number;
}

export interface StatusView {
  text: string;
  tooltip: string;
  warning: boolean;
}

export function shortModel(model: string): string {
  const name = model.replace(/^embedded:/, "").split(/[\\/]/).pop() ?? model;
  return name.replace(/\.gguf$/i, "");
}

export function formatLoss(loss: number): string {
  return Math.abs(loss) >= 100 || (loss !== 0 && Math.abs(loss) < 0.001) ? loss.toExponential(2) : loss.toFixed(3);
}

const AUTONOMY_LABELS: Record<Autonomy, string> = {
  manual: "nothing (every call is asked)",
  read_only: "read-only calls",
  allow_rules: "read-only calls and your allow rules",
  workspace_edits: "read-only calls, your allow rules and file edits inside the workspace",
};

export function formatStatus(state: StatusState): StatusView {
  if (state.connection === "stopped") {
    return { text: "$(error) Continual: stopped", tooltip: "The server is not running. Click for details.", warning: true };
  }
  if (state.connection === "starting") {
    return { text: "$(loading~spin) Continual: starting…", tooltip: "Starting the server…", warning: false };
  }
  const status = state.status;
  const training = state.training || (status?.queueDepth ?? 0) > 0;
  const icon = training ? "$(sync~spin)" : "$(mortar-board)";
  const parts: string[] = [];
  parts.push(status ? status.backend : "Continual");
  parts.push(status?.adapterVersion ?? (status?.starter ? "starter" : "base"));
  const learned = state.lastLearned;
  if (training) parts.push("training…");
  else if (learned) parts.push(`loss ${formatLoss(learned.loss)} (${learned.seconds.toFixed(1)}s)`);
  if (state.pendingCount > 0) parts.push(`$(git-pull-request) ${state.pendingCount}`);
  if (status?.autonomy && status.autonomy !== "read_only") parts.push(status.autonomy === "manual" ? "ask all" : status.autonomy.replace("_", " "));

  const tooltip = [
    "Continual",
    status ? `Backend: ${status.backend}` : "",
    status ? `Model: ${status.model}` : "",
    `Adapter: ${status?.adapterVersion ?? "base (no adapter yet)"}`,
    status ? `Starter: ${status.starter ?? "off"}` : "",
    status ? `Training steps: ${status.trainingSteps}` : "",
    status ? `Queue depth: ${status.queueDepth}` : "",
    status?.autonomy ? `Runs without asking: ${AUTONOMY_LABELS[status.autonomy]}` : "",
    learned
      ? `Last step: #${learned.step}, loss ${formatLoss(learned.loss)}, ${learned.seconds.toFixed(1)} s`
      : "",
    state.pendingCount > 0 ? `Pending proposals: ${state.pendingCount}` : "",
  ]
    .filter(Boolean)
    .join("\n");
  return { text: `${icon} ${parts.join(" · ")}`, tooltip, warning: false };
}
