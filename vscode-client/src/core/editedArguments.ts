// Turn the reviewer's edited file back into arguments for the SAME tool the agent chose, so
// the server learns from a demonstration in the agent's own action space:
//   write      → {path, content: the whole edited file}
//   edit       → {path, old, new}: the smallest changed block of lines, widened until `old`
//                occurs once in the file
//   edit_lines → {path, start, end, content}: the smallest changed block of lines
// When the tool cannot express the change (a new or empty file, an `edit` whose text is not
// unique, a block over the tool's limits) the call becomes a whole-file write through the
// `tool` key of editedArguments, which the server's Agent accepts (server/edits.py does the
// same for its own edit files).
// Non-file tools: bash → {cmd}; anything else → the edited JSON object. No `vscode` import.

import { splitKeepEnds } from "./text";

export const EDIT_OLD_MAX = 2000;
export const EDIT_NEW_MAX = 2000;
export const CONTENT_MAX = 4000;

export class EditError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "EditError";
  }
}

interface Block {
  /** Index of the first changed line, 0-based. */
  start: number;
  /** Exclusive end in the original. */
  oldEnd: number;
  /** Exclusive end in the edited text. */
  newEnd: number;
}

/** The smallest block of whole lines that differs between `a` and `b` (undefined: equal). */
export function changedBlock(a: string[], b: string[]): Block | undefined {
  let prefix = 0;
  while (prefix < a.length && prefix < b.length && a[prefix] === b[prefix]) prefix++;
  if (prefix === a.length && prefix === b.length) return undefined;
  let suffix = 0;
  while (
    suffix < a.length - prefix &&
    suffix < b.length - prefix &&
    a[a.length - 1 - suffix] === b[b.length - 1 - suffix]
  ) {
    suffix++;
  }
  return { start: prefix, oldEnd: a.length - suffix, newEnd: b.length - suffix };
}

/** Widen a block by one line, before it if possible, else after it. */
function widen(block: Block, oldLength: number, preferBefore: boolean): Block | undefined {
  const canBefore = block.start > 0;
  const canAfter = block.oldEnd < oldLength;
  if (canBefore && (preferBefore || !canAfter)) return { ...block, start: block.start - 1 };
  if (canAfter) return { ...block, oldEnd: block.oldEnd + 1, newEnd: block.newEnd + 1 };
  return undefined;
}

function occurrences(haystack: string, needle: string): number {
  let count = 0;
  for (let at = haystack.indexOf(needle); at >= 0; at = haystack.indexOf(needle, at + 1)) count++;
  return count;
}

export function editArgumentsFor(
  tool: string,
  args: Record<string, unknown>,
  original: string | undefined,
  edited: string,
): Record<string, unknown> {
  const path = args.path;
  if (tool !== "write" && tool !== "edit" && tool !== "edit_lines") throw new EditError(`${tool} does not change a file`);
  if (original !== undefined && edited === original) {
    throw new EditError("the edited file is the same as the file on disk: deny the proposal instead");
  }
  const whole = (): Record<string, unknown> => {
    if (edited.length > CONTENT_MAX) throw new EditError(`a whole-file write is limited to ${CONTENT_MAX} characters`);
    return tool === "write" ? { path, content: edited } : { tool: "write", path, content: edited };
  };
  if (tool === "write" || !original) return whole();

  const a = splitKeepEnds(original);
  const b = splitKeepEnds(edited);
  let block = changedBlock(a, b) as Block; // defined: the texts differ

  if (tool === "edit_lines") {
    // A pure insertion replaces no line, but edit_lines needs one: take in a neighbour.
    if (block.start === block.oldEnd) block = widen(block, a.length, false) ?? block;
    const content = b.slice(block.start, block.newEnd).join("");
    if (content.length > CONTENT_MAX) return whole();
    return { path, start: block.start + 1, end: block.oldEnd, content };
  }

  // edit: `old` must be non-empty and occur exactly once in the original; widen by whole
  // lines until it does, else fall back to a whole-file write.
  let preferBefore = true;
  for (;;) {
    const oldText = a.slice(block.start, block.oldEnd).join("");
    if (oldText !== "" && occurrences(original, oldText) === 1) {
      const newText = b.slice(block.start, block.newEnd).join("");
      if (oldText.length > EDIT_OLD_MAX || newText.length > EDIT_NEW_MAX) return whole();
      return { path, old: oldText, new: newText };
    }
    const wider = widen(block, a.length, preferBefore);
    if (!wider) return whole();
    block = wider;
    preferBefore = !preferBefore;
  }
}

/** Arguments for a non-file call from the text the reviewer edited. */
export function editNonFileArguments(tool: string, args: Record<string, unknown>, edited: string): Record<string, unknown> {
  if (tool === "bash") {
    const cmd = edited.trim();
    if (cmd === "") throw new EditError("the command is empty");
    return { ...args, cmd };
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(edited);
  } catch {
    throw new EditError("the edited arguments are not valid JSON");
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    throw new EditError("the edited arguments must be a JSON object");
  }
  return parsed as Record<string, unknown>;
}

/** What the reviewer edits for a non-file call: the command for bash, else the JSON arguments. */
export function editableText(tool: string, args: Record<string, unknown>): string {
  if (tool === "bash" && typeof args.cmd === "string") return args.cmd;
  return JSON.stringify(args, null, 2);
}
