import { describe, expect, it } from "vitest";
import type { ProposalNotification } from "../src/core/protocol";
import { proposedContent, simulateTool } from "../src/core/proposedContent";

function proposal(tool: string, args: Record<string, unknown>, diff?: string): ProposalNotification {
  return { proposalId: "p1", taskId: "t1", tool, arguments: args, readOnly: false, ...(diff ? { diff } : {}) };
}

describe("simulateTool", () => {
  it("write gives the content", () => {
    expect(simulateTool("write", { path: "a", content: "x\n" }, undefined)).toEqual({ ok: true, content: "x\n", source: "arguments" });
  });

  it("edit replaces a unique occurrence and refuses an ambiguous one", () => {
    expect(simulateTool("edit", { path: "a", old: "b", new: "B" }, "abc")).toMatchObject({ ok: true, content: "aBc" });
    expect(simulateTool("edit", { path: "a", old: "a", new: "A" }, "aa")).toMatchObject({ ok: false });
    expect(simulateTool("edit", { path: "a", old: "a", new: "A", all: true }, "aa")).toMatchObject({ ok: true, content: "AA" });
    expect(simulateTool("edit", { path: "a", old: "z", new: "Z" }, "aa")).toMatchObject({ ok: false });
  });

  it("edit_lines replaces an inclusive 1-based range", () => {
    expect(simulateTool("edit_lines", { path: "a", start: 2, end: 3, content: "X" }, "1\n2\n3\n4\n")).toMatchObject({
      ok: true,
      content: "1\nX\n4\n",
    });
    expect(simulateTool("edit_lines", { path: "a", start: 9, end: 9, content: "X" }, "1\n")).toMatchObject({ ok: false });
  });

  it("non-file tools have no content", () => {
    expect(simulateTool("bash", { cmd: "ls" }, "")).toMatchObject({ ok: false });
  });
});

describe("proposedContent", () => {
  it("prefers the diff", () => {
    const diff = "--- a/a\n+++ b/a\n@@ -1 +1 @@\n-x\n+y\n";
    expect(proposedContent(proposal("edit", { path: "a", old: "x", new: "z" }, diff), "x\n")).toEqual({
      ok: true,
      content: "y\n",
      source: "diff",
    });
  });

  it("falls back to the arguments when the diff no longer applies", () => {
    const diff = "--- a/a\n+++ b/a\n@@ -1 +1 @@\n-old\n+new\n";
    expect(proposedContent(proposal("write", { path: "a", content: "new\n" }, diff), "changed\n")).toEqual({
      ok: true,
      content: "new\n",
      source: "arguments",
    });
  });

  it("reports both failures", () => {
    const diff = "--- a/a\n+++ b/a\n@@ -1 +1 @@\n-old\n+new\n";
    const result = proposedContent(proposal("edit", { path: "a", old: "old", new: "new" }, diff), "other\n");
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.error).toMatch(/does not match.*not in the file/);
  });
});
