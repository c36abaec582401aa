// A small unified-diff parser and applier (the format of `diff -u`, git and Python's difflib).
// Hunks are located at their stated line first, then at the nearest offset where the old
// side matches (as `patch` does without fuzz); a hunk that matches nowhere is an error.
// No `vscode` import.

import { joinLines, splitLines } from "./text";

export interface HunkLine {
  kind: " " | "-" | "+";
  text: string;
  /** Followed by "\ No newline at end of file". */
  noEol: boolean;
}

export interface Hunk {
  oldStart: number;
  oldLines: number;
  newStart: number;
  newLines: number;
  lines: HunkLine[];
}

export interface FilePatch {
  oldPath?: string;
  newPath?: string;
  hunks: Hunk[];
}

export class PatchError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "PatchError";
  }
}

const HUNK_HEADER = /^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@/;

function headerPath(line: string): string | undefined {
  const raw = line.slice(4).split("\t")[0].trim();
  if (raw === "/dev/null") return undefined;
  return raw.replace(/^[ab]\//, "");
}

/** Parse every file section of a unified diff. */
export function parseUnifiedDiff(diff: string): FilePatch[] {
  const rows = diff.split("\n").map((row) => (row.endsWith("\r") ? row.slice(0, -1) : row));
  if (rows.length > 0 && rows[rows.length - 1] === "") rows.pop();
  const files: FilePatch[] = [];
  let file: FilePatch | undefined;
  let hunk: Hunk | undefined;
  let oldLeft = 0;
  let newLeft = 0;

  for (let i = 0; i < rows.length; i++) {
    const row = rows[i];
    if (hunk && (oldLeft > 0 || newLeft > 0)) {
      const kind = row === "" ? " " : row[0];
      if (kind === "\\") {
        markNoEol(hunk);
        continue;
      }
      if (kind !== " " && kind !== "-" && kind !== "+") {
        throw new PatchError(`line ${i + 1}: hunk ends early (expected ${oldLeft} old and ${newLeft} new lines)`);
      }
      hunk.lines.push({ kind, text: row.slice(1), noEol: false });
      if (kind !== "+") oldLeft--;
      if (kind !== "-") newLeft--;
      if (oldLeft < 0 || newLeft < 0) throw new PatchError(`line ${i + 1}: hunk longer than its header says`);
      continue;
    }
    if (row.startsWith("\\")) {
      if (hunk) markNoEol(hunk);
      continue;
    }
    if (row.startsWith("--- ")) {
      file = { oldPath: headerPath(row), hunks: [] };
      files.push(file);
      hunk = undefined;
      continue;
    }
    if (row.startsWith("+++ ") && file && file.hunks.length === 0) {
      file.newPath = headerPath(row);
      continue;
    }
    const header = HUNK_HEADER.exec(row);
    if (header) {
      if (!file) {
        file = { hunks: [] };
        files.push(file);
      }
      hunk = {
        oldStart: Number(header[1]),
        oldLines: header[2] === undefined ? 1 : Number(header[2]),
        newStart: Number(header[3]),
        newLines: header[4] === undefined ? 1 : Number(header[4]),
        lines: [],
      };
      oldLeft = hunk.oldLines;
      newLeft = hunk.newLines;
      file.hunks.push(hunk);
      continue;
    }
    // Anything else (diff --git, index, mode lines, prose) is a header we do not need.
    hunk = undefined;
  }
  if (hunk && (oldLeft > 0 || newLeft > 0)) throw new PatchError("diff ends inside a hunk");
  return files;
}

function markNoEol(hunk: Hunk): void {
  const last = hunk.lines[hunk.lines.length - 1];
  if (last) last.noEol = true;
}

function matchesAt(lines: string[], at: number, block: string[], loose: boolean): boolean {
  if (at < 0 || at + block.length > lines.length) return false;
  for (let k = 0; k < block.length; k++) {
    const a = lines[at + k];
    const b = block[k];
    if (loose ? a.trimEnd() !== b.trimEnd() : a !== b) return false;
  }
  return true;
}

function locate(lines: string[], from: number, expected: number, block: string[]): number {
  const last = lines.length - block.length;
  for (const loose of [false, true]) {
    const span = Math.max(expected - from, last - expected, 0);
    for (let offset = 0; offset <= span; offset++) {
      for (const at of offset === 0 ? [expected] : [expected - offset, expected + offset]) {
        if (at >= from && at <= last && matchesAt(lines, at, block, loose)) return at;
      }
    }
  }
  return -1;
}

/** Apply one file's hunks to `original`; throws PatchError when a hunk does not apply. */
export function applyFilePatch(original: string, patch: FilePatch): string {
  const source = splitLines(original);
  const out: string[] = [];
  let pos = 0;
  let finalNewline = source.finalNewline;
  let endFromHunk = false;

  patch.hunks.forEach((hunk, index) => {
    const oldBlock = hunk.lines.filter((l) => l.kind !== "+").map((l) => l.text);
    const expected = hunk.oldLines === 0 ? hunk.oldStart : hunk.oldStart - 1;
    const at = locate(source.lines, pos, Math.min(Math.max(expected, pos), source.lines.length), oldBlock);
    if (at < 0) {
      throw new PatchError(`hunk ${index + 1} (@@ -${hunk.oldStart},${hunk.oldLines}) does not match the file`);
    }
    out.push(...source.lines.slice(pos, at));
    const kept = hunk.lines.filter((l) => l.kind !== "-");
    out.push(...kept.map((l) => l.text));
    pos = at + oldBlock.length;
    endFromHunk = pos === source.lines.length;
    if (endFromHunk) {
      const lastKept = kept[kept.length - 1];
      // The hunk reaches the end of the old file: its last kept line decides the final newline.
      // When it deleted the tail, the new last line was an inner line and so had a newline.
      finalNewline = lastKept ? !lastKept.noEol : true;
    }
  });
  out.push(...source.lines.slice(pos));
  if (!endFromHunk || pos < source.lines.length) finalNewline = source.finalNewline;
  return joinLines({ lines: out, eol: source.eol, finalNewline });
}

/**
 * Apply a unified diff that touches one file. With several file sections, the one whose
 * path ends with `path` is used, else the first.
 */
export function applyUnifiedDiff(original: string, diff: string, path?: string): string {
  const files = parseUnifiedDiff(diff).filter((f) => f.hunks.length > 0);
  if (files.length === 0) {
    if (diff.trim() === "") return original;
    throw new PatchError("the diff has no hunks");
  }
  const wanted = path?.replace(/\\/g, "/");
  const chosen =
    (wanted && files.find((f) => [f.newPath, f.oldPath].some((p) => p && (wanted.endsWith(p) || p.endsWith(wanted))))) ||
    files[0];
  return applyFilePatch(original, chosen);
}
