// The ledger as the tree shows it: a header with the context tax, then one group per lane.
// No `vscode` import.

import type { Lane, LedgerItem, LedgerResult } from "./protocol";

export interface LaneGroup {
  lane: Lane;
  label: string;
  description: string;
  items: LedgerItem[];
}

export interface LedgerHeader {
  label: string;
  description: string;
  tooltip: string;
}

export interface LedgerView {
  header: LedgerHeader;
  groups: LaneGroup[];
}

const LANE_LABELS: Record<Lane, string> = {
  CODE: "Code",
  WEIGHTS: "Weights",
  CONTEXT: "Context",
  NONE: "Not routed",
};

const LANE_HELP: Record<Lane, string> = {
  CODE: "guards that run on every proposal",
  WEIGHTS: "distilled into the adapter",
  CONTEXT: "bullets injected when their cue matches",
  NONE: "kept in the log only",
};

export function laneLabel(lane: Lane): string {
  return LANE_LABELS[lane];
}

export function ledgerHeader(result: LedgerResult): LedgerHeader {
  const { contextTokens, notesOnlyTokens } = result;
  const saved = notesOnlyTokens > 0 ? Math.round((1 - contextTokens / notesOnlyTokens) * 100) : 0;
  return {
    label: `Context: ${contextTokens} tokens`,
    description: `notes-only: ${notesOnlyTokens}${notesOnlyTokens > 0 ? ` (${saved}% saved)` : ""}`,
    tooltip:
      `Tokens the context lane carries per call: ${contextTokens}.\n` +
      `A notes-only agent would carry ${notesOnlyTokens} for the same corrections.`,
  };
}

function byRecurrenceThenNewest(a: LedgerItem, b: LedgerItem): number {
  if (a.active !== b.active) return a.active ? -1 : 1;
  return b.recurrence - a.recurrence || b.createdAt - a.createdAt;
}

/** Code, Weights and Context always (possibly empty); "Not routed" only when it has items. */
export function groupLedger(result: LedgerResult): LedgerView {
  const lanes: Lane[] = ["CODE", "WEIGHTS", "CONTEXT", "NONE"];
  const groups = lanes
    .map((lane) => {
      const items = result.items.filter((item) => item.lane === lane).sort(byRecurrenceThenNewest);
      const active = items.filter((item) => item.active).length;
      return {
        lane,
        label: LANE_LABELS[lane],
        description: `${active} active${items.length > active ? `, ${items.length - active} reverted` : ""} — ${LANE_HELP[lane]}`,
        items,
      };
    })
    .filter((group) => group.lane !== "NONE" || group.items.length > 0);
  return { header: ledgerHeader(result), groups };
}

export function itemLabel(item: LedgerItem, max = 64): string {
  const oneLine = item.text.replace(/\s+/g, " ").trim();
  return oneLine.length > max ? `${oneLine.slice(0, max - 1)}…` : oneLine;
}

export function itemDescription(item: LedgerItem): string {
  const parts = [`×${item.recurrence}`];
  if (item.taskScoped) parts.push("task-scoped");
  if (item.fired !== undefined) parts.push(`fired ${item.fired}`);
  if (item.overridden) parts.push(`overridden ${item.overridden}×`);
  if (item.recurredAfter) parts.push(`came back ${item.recurredAfter}×`);
  if (!item.active) parts.push("reverted");
  if (item.reason) parts.push(item.reason);
  return parts.join(" · ");
}

export function itemTooltip(item: LedgerItem): string {
  const when = item.createdAt > 0 ? new Date(item.createdAt > 1e12 ? item.createdAt : item.createdAt * 1000).toISOString().replace("T", " ").slice(0, 19) : "";
  return [
    item.text,
    "",
    `Lane: ${LANE_LABELS[item.lane]}${item.active ? "" : " (reverted)"}`,
    `Why: ${item.reason || "—"}`,
    `Seen: ${item.recurrence} time${item.recurrence === 1 ? "" : "s"}`,
    item.fired !== undefined ? `Fired: ${item.fired} (guard hits, rewrites, blocks, cue matches, allowed calls)` : "",
    item.recurredAfter !== undefined ? `Recurred after it existed: ${item.recurredAfter}` : "",
    item.overridden !== undefined ? `Overridden: ${item.overridden} (a guard overridden twice retires to Context)` : "",
    item.taskScoped ? "Task-scoped: kept with its task, not a standing rule; Promote makes it one" : "",
    item.gate
      ? `Held-out compliance: ${item.gate.before.toFixed(3)} → ${item.gate.after.toFixed(3)} (${item.gate.promoted ? "promoted" : "discarded"})`
      : "",
    item.approvals?.length ? `Learned from approvals: ${item.approvals.join(", ")}` : "",
    when ? `Since: ${when} UTC` : "",
  ]
    .filter((line, index) => line !== "" || index === 1)
    .join("\n");
}
