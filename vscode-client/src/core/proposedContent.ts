// What a file-changing proposal would make of the file: the server's unified diff applied to
// the current text, or, when that fails (the file moved on, or no diff was sent), the tool's
// own semantics replayed from its arguments. No `vscode` import.

import type { ProposalNotification } from "./protocol";
import { joinLines, splitLines } from "./text";
import { applyUnifiedDiff } from "./unifiedDiff";

export type Proposed =
  | { ok: true; content: string; source: "diff" | "arguments" }
  | { ok: false; error: string };

function str(args: Record<string, unknown>, key: string): string | undefined {
  const value = args[key];
  return typeof value === "string" ? value : undefined;
}

function int(args: Record<string, unknown>, key: string): number | undefined {
  const value = args[key];
  return typeof value === "number" && Number.isInteger(value) ? value : undefined;
}

/** The path a file-changing call targets, as the model wrote it (workspace-relative). */
export function proposalPath(proposal: ProposalNotification): string | undefined {
  return str(proposal.arguments, "path");
}

/** Replay write / edit / edit_lines on `current` (undefined: the file does not exist). */
export function simulateTool(tool: string, args: Record<string, unknown>, current: string | undefined): Proposed {
  switch (tool) {
    case "write": {
      const content = str(args, "content");
      return content === undefined ? { ok: false, error: "write without content" } : { ok: true, content, source: "arguments" };
    }
    case "edit": {
      const oldText = str(args, "old");
      const newText = str(args, "new");
      if (current === undefined) return { ok: false, error: "edit of a file that does not exist" };
      if (!oldText || newText === undefined) return { ok: false, error: "edit needs old and new" };
      const first = current.indexOf(oldText);
      if (first < 0) return { ok: false, error: "the text to replace is not in the file" };
      if (args.all === true) return { ok: true, content: current.split(oldText).join(newText), source: "arguments" };
      if (current.indexOf(oldText, first + 1) >= 0) {
        return { ok: false, error: "the text to replace occurs more than once" };
      }
      return { ok: true, content: current.slice(0, first) + newText + current.slice(first + oldText.length), source: "arguments" };
    }
    case "edit_lines": {
      const start = int(args, "start");
      const end = int(args, "end");
      const content = str(args, "content");
      if (start === undefined || end === undefined || content === undefined) {
        return { ok: false, error: "edit_lines needs start, end and content" };
      }
      const file = splitLines(current ?? "");
      if (start < 1 || end < start - 1 || start > file.lines.length + 1) {
        return { ok: false, error: `lines ${start}..${end} are outside the file (${file.lines.length} lines)` };
      }
      const replacement = splitLines(content).lines;
      const lines = [...file.lines.slice(0, start - 1), ...replacement, ...file.lines.slice(Math.min(end, file.lines.length))];
      const finalNewline = file.lines.length === 0 ? true : file.finalNewline;
      return { ok: true, content: joinLines({ lines, eol: file.eol, finalNewline }), source: "arguments" };
    }
    default:
      return { ok: false, error: `${tool} does not change a file` };
  }
}

/** The proposed content of the file, preferring the server's diff. */
export function proposedContent(proposal: ProposalNotification, current: string | undefined): Proposed {
  let diffError: string | undefined;
  if (proposal.diff !== undefined && proposal.diff.trim() !== "") {
    try {
      return { ok: true, content: applyUnifiedDiff(current ?? "", proposal.diff, proposalPath(proposal)), source: "diff" };
    } catch (error) {
      diffError = error instanceof Error ? error.message : String(error);
    }
  }
  const simulated = simulateTool(proposal.tool, proposal.arguments, current);
  if (simulated.ok || diffError === undefined) return simulated;
  return { ok: false, error: `${diffError}; ${simulated.error}` };
}
