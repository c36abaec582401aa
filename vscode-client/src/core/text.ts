// Line model shared by the diff applier and the edit converter. No `vscode` import.

export interface Lines {
  /** Lines without their terminators. */
  lines: string[];
  /** The terminator the text uses ("\r\n" when any CRLF is present). */
  eol: string;
  /** Whether the last line ends with a terminator. */
  finalNewline: boolean;
}

export function splitLines(text: string): Lines {
  const eol = text.includes("\r\n") ? "\r\n" : "\n";
  if (text === "") return { lines: [], eol, finalNewline: false };
  const lines = text.split(/\r?\n/);
  const finalNewline = lines[lines.length - 1] === "";
  if (finalNewline) lines.pop();
  return { lines, eol, finalNewline };
}

export function joinLines({ lines, eol, finalNewline }: Lines): string {
  if (lines.length === 0) return "";
  return lines.join(eol) + (finalNewline ? eol : "");
}

/** Lines with their terminators kept, so that joining them gives back the text exactly. */
export function splitKeepEnds(text: string): string[] {
  return text.match(/[^\n]*\n|[^\n]+$/g) ?? [];
}
