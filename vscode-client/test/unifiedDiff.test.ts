import { describe, expect, it } from "vitest";
import { applyUnifiedDiff, parseUnifiedDiff, PatchError } from "../src/core/unifiedDiff";

const OPS = [
  "def add(a, b):",
  "    return a + b",
  "",
  "",
  "def mean(values):",
  "    # BUG: integer division truncates the mean",
  "    return sum(values) // len(values)",
  "",
].join("\n");

// Produced by Python's difflib.unified_diff, as the server does.
const DIFFLIB =
  "--- a/src/calc/ops.py\n+++ b/src/calc/ops.py\n@@ -4,4 +4,4 @@\n \n def mean(values):\n" +
  "     # BUG: integer division truncates the mean\n-    return sum(values) // len(values)\n" +
  "+    return sum(values) / len(values)\n";

describe("parseUnifiedDiff", () => {
  it("reads paths and hunk headers", () => {
    const [file] = parseUnifiedDiff(DIFFLIB);
    expect(file.oldPath).toBe("src/calc/ops.py");
    expect(file.newPath).toBe("src/calc/ops.py");
    expect(file.hunks).toHaveLength(1);
    expect(file.hunks[0]).toMatchObject({ oldStart: 4, oldLines: 4, newStart: 4, newLines: 4 });
    expect(file.hunks[0].lines.map((l) => l.kind).join("")).toBe("   -+");
  });

  it("treats /dev/null as no path and defaults omitted counts to 1", () => {
    const [file] = parseUnifiedDiff("--- /dev/null\n+++ b/x.txt\n@@ -0,0 +1 @@\n+hello\n");
    expect(file.oldPath).toBeUndefined();
    expect(file.newPath).toBe("x.txt");
    expect(file.hunks[0]).toMatchObject({ oldStart: 0, oldLines: 0, newLines: 1 });
  });

  it("does not mistake a removed '-- ' line for a file header", () => {
    const diff = "--- a/q.sql\n+++ b/q.sql\n@@ -1,2 +1,2 @@\n--- a comment\n+-- the comment\n select 1;\n";
    const [file] = parseUnifiedDiff(diff);
    expect(file.hunks[0].lines).toEqual([
      { kind: "-", text: "-- a comment", noEol: false },
      { kind: "+", text: "-- the comment", noEol: false },
      { kind: " ", text: "select 1;", noEol: false },
    ]);
  });

  it("reads several files and git headers", () => {
    const diff =
      "diff --git a/a.txt b/a.txt\nindex 1..2 100644\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a\n+A\n" +
      "diff --git a/b.txt b/b.txt\n--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-b\n+B\n";
    expect(parseUnifiedDiff(diff).map((f) => f.newPath)).toEqual(["a.txt", "b.txt"]);
  });

  it("rejects a truncated hunk", () => {
    expect(() => parseUnifiedDiff("--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n")).toThrow(PatchError);
  });
});

describe("applyUnifiedDiff", () => {
  it("applies a difflib diff", () => {
    expect(applyUnifiedDiff(OPS, DIFFLIB)).toBe(OPS.replace("//", "/"));
  });

  it("creates a new file from an empty original", () => {
    const diff = "--- a/new.py\n+++ b/new.py\n@@ -0,0 +1,2 @@\n+x = 1\n+y = 2\n";
    expect(applyUnifiedDiff("", diff)).toBe("x = 1\ny = 2\n");
  });

  it("finds a hunk that moved (lines added above since the diff was made)", () => {
    const shifted = "import math\n\n\n" + OPS;
    expect(applyUnifiedDiff(shifted, DIFFLIB)).toBe(shifted.replace("//", "/"));
  });

  it("fails loudly when the context is gone", () => {
    expect(() => applyUnifiedDiff(OPS.replace("// len", "// length"), DIFFLIB)).toThrow(/does not match/);
  });

  it("applies several hunks in order", () => {
    const original = Array.from({ length: 20 }, (_, i) => `line ${i + 1}`).join("\n") + "\n";
    const diff =
      "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n-line 1\n+LINE 1\n line 2\n line 3\n" +
      "@@ -18,3 +18,4 @@\n line 18\n line 19\n line 20\n+line 21\n";
    const expected = original.replace("line 1\n", "LINE 1\n") + "line 21\n";
    expect(applyUnifiedDiff(original, diff)).toBe(expected);
  });

  it("honours 'No newline at end of file' on the new side", () => {
    const diff = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n\\ No newline at end of file\n";
    expect(applyUnifiedDiff("a\nb\n", diff)).toBe("a\nc");
  });

  it("adds the final newline when only the old side lacked it", () => {
    const diff = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n";
    expect(applyUnifiedDiff("a\nb", diff)).toBe("a\nc\n");
  });

  it("keeps the original's missing final newline when the hunk ends earlier", () => {
    const diff = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-a\n+A\n b\n";
    expect(applyUnifiedDiff("a\nb\nc", diff)).toBe("A\nb\nc");
  });

  it("deletes the tail of a file", () => {
    const diff = "--- a/f\n+++ b/f\n@@ -1,3 +1,1 @@\n a\n-b\n-c\n";
    expect(applyUnifiedDiff("a\nb\nc\n", diff)).toBe("a\n");
  });

  it("keeps CRLF line endings", () => {
    const diff = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n";
    expect(applyUnifiedDiff("a\r\nb\r\n", diff)).toBe("a\r\nB\r\n");
  });

  it("reads a CRLF diff", () => {
    const diff = "--- a/f\r\n+++ b/f\r\n@@ -1 +1 @@\r\n-a\r\n+b\r\n";
    expect(applyUnifiedDiff("a\n", diff)).toBe("b\n");
  });

  it("tolerates trailing whitespace stripped from context lines", () => {
    const diff = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n";
    expect(applyUnifiedDiff("a  \nb\n", diff)).toBe("a\nB\n");
  });

  it("accepts an empty context line written without its leading space", () => {
    const diff = "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n\n-c\n+C\n";
    expect(applyUnifiedDiff("a\n\nc\n", diff)).toBe("a\n\nC\n");
  });

  it("picks the section for the given path", () => {
    const diff =
      "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a\n+A\n--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-b\n+B\n";
    expect(applyUnifiedDiff("b\n", diff, "b.txt")).toBe("B\n");
  });

  it("returns the original for an empty diff and rejects one without hunks", () => {
    expect(applyUnifiedDiff("same\n", "")).toBe("same\n");
    expect(() => applyUnifiedDiff("x\n", "--- a/x\n+++ b/x\n")).toThrow(PatchError);
  });
});
