// Human-readable words for a proposal, and the correction chips offered on deny.
// No `vscode` import.

import { isFileChanging, type ProposalNotification } from "./protocol";

function arg(proposal: ProposalNotification, key: string): string | undefined {
  const value = proposal.arguments[key];
  return typeof value === "string" ? value : typeof value === "number" ? String(value) : undefined;
}

/** One line: "edit_lines src/calc/ops.py:6-6", "bash: pytest -q", "grep TODO". */
export function describeProposal(proposal: ProposalNotification): string {
  const path = arg(proposal, "path");
  switch (proposal.tool) {
    case "bash":
      return `bash: ${arg(proposal, "cmd") ?? ""}`;
    case "done":
      return `done: ${arg(proposal, "summary") ?? ""}`;
    case "edit_lines":
      return `edit_lines ${path ?? "?"}:${arg(proposal, "start") ?? "?"}-${arg(proposal, "end") ?? "?"}`;
    case "glob":
    case "grep":
      return `${proposal.tool} ${arg(proposal, "pat") ?? ""}${path ? ` in ${path}` : ""}`;
    default:
      return `${proposal.tool} ${path ?? JSON.stringify(proposal.arguments)}`;
  }
}

/** The detail shown for a call that has no diff (bash and friends). */
export function proposalDetail(proposal: ProposalNotification): string {
  const lines: string[] = [];
  if (proposal.tool === "bash") lines.push(`$ ${arg(proposal, "cmd") ?? ""}`);
  else if (proposal.tool === "done") lines.push(arg(proposal, "summary") ?? "");
  else lines.push(JSON.stringify(proposal.arguments, null, 2));
  if (proposal.blockedBy) lines.push("", `Blocked by a guard: ${proposal.blockedBy}`);
  if (proposal.note) lines.push("", proposal.note);
  return lines.join("\n");
}

/** A read-only document showing a call that changes no file, under the same Approve / Deny /
 * Edit buttons as a diff: a shell script for bash, the JSON call for the others. */
export function callDocument(proposal: ProposalNotification): { name: string; content: string } {
  const note = proposal.note ? proposal.note.split("\n").map((line) => `# ${line}`) : [];
  if (proposal.tool === "bash") {
    const header = ["# Continual proposes a command; Approve runs it in the workspace.", ...note];
    return { name: "proposed-command.sh", content: `${header.join("\n")}\n\n${arg(proposal, "cmd") ?? ""}\n` };
  }
  if (proposal.tool === "done") {
    const header = ["# Continual says the task is done; Finish task ends it, Deny… says what is left.", ...note];
    return { name: "proposed-done.md", content: `${header.join("\n")}\n\n${arg(proposal, "summary") ?? ""}\n` };
  }
  const call = { tool: proposal.tool, arguments: proposal.arguments, ...(proposal.note ? { note: proposal.note } : {}) };
  return { name: `proposed-${proposal.tool}.json`, content: `${JSON.stringify(call, null, 2)}\n` };
}

/** What approving is called: "Finish task" for the model's `done` (approving ends the task);
 * "Override guard" for a call a guard blocks (a plain approve would be refused). */
export function approveLabel(proposal: ProposalNotification): string {
  if (proposal.blockedBy) return "Override guard";
  return proposal.tool === "done" ? "Finish task" : "Approve";
}

const GENERIC_CHIPS = [
  "Read the file before changing it.",
  "Run the tests first to see what fails.",
  "Keep the change minimal; don't touch unrelated code.",
];

const FILE_CHIPS: Record<string, string[]> = {
  write: ["Prefer edit_lines over rewriting a whole file with write."],
  edit: ["Wrong place: look at the failing test first."],
  edit_lines: ["Wrong lines: read the file to get the line numbers right."],
};

const BASH_CHIPS = ["Don't run a command for this; change the file instead.", "Don't run commands that need the network."];

/** Quick-pick chips for the correction: the reviewer's recent corrections first, then common ones. */
export function correctionChips(proposal: ProposalNotification, recent: readonly string[] = []): string[] {
  const path = arg(proposal, "path");
  const specific = [
    ...(FILE_CHIPS[proposal.tool] ?? []),
    ...(proposal.tool === "bash" ? BASH_CHIPS : []),
    ...(path && isFileChanging(proposal.tool) ? [`Don't change ${path}.`] : []),
  ];
  const seen = new Set<string>();
  const chips: string[] = [];
  for (const chip of [...recent, ...specific, ...GENERIC_CHIPS]) {
    const text = chip.trim();
    if (text && !seen.has(text)) {
      seen.add(text);
      chips.push(text);
    }
  }
  return chips;
}

/** Remember a correction, most recent first, without duplicates. */
export function rememberCorrection(recent: readonly string[], correction: string, max = 5): string[] {
  const text = correction.trim();
  if (!text) return [...recent];
  return [text, ...recent.filter((r) => r !== text)].slice(0, max);
}
