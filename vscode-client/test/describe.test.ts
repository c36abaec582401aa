import { describe, expect, it } from "vitest";
import { approveLabel, callDocument, correctionChips, describeProposal, proposalDetail, rememberCorrection } from "../src/core/describe";
import { parseProposalDocPath, proposalDocPath } from "../src/core/proposalUri";
import type { ProposalNotification } from "../src/core/protocol";

const p = (tool: string, args: Record<string, unknown>, note?: string): ProposalNotification => ({
  proposalId: "p",
  taskId: "t",
  tool,
  arguments: args,
  readOnly: false,
  ...(note ? { note } : {}),
});

describe("describeProposal", () => {
  it("names the call in one line", () => {
    expect(describeProposal(p("bash", { cmd: "pytest -q" }))).toBe("bash: pytest -q");
    expect(describeProposal(p("edit_lines", { path: "a.py", start: 6, end: 7 }))).toBe("edit_lines a.py:6-7");
    expect(describeProposal(p("grep", { pat: "TODO", path: "src" }))).toBe("grep TODO in src");
    expect(describeProposal(p("write", { path: "a.py" }))).toBe("write a.py");
  });

  it("details a command and its note", () => {
    expect(proposalDetail(p("bash", { cmd: "ls" }, "unsandboxed"))).toBe("$ ls\n\nunsandboxed");
  });
});

describe("callDocument", () => {
  it("shows a command as a shell script with its note", () => {
    expect(callDocument(p("bash", { cmd: "pytest -q" }, "unsandboxed"))).toEqual({
      name: "proposed-command.sh",
      content: "# Continual proposes a command; Approve runs it in the workspace.\n# unsandboxed\n\npytest -q\n",
    });
  });

  it("shows other calls as JSON", () => {
    const doc = callDocument(p("grep", { pat: "x" }));
    expect(doc.name).toBe("proposed-grep.json");
    expect(JSON.parse(doc.content)).toEqual({ tool: "grep", arguments: { pat: "x" } });
  });
});

describe("correction chips", () => {
  it("puts recent corrections first, then tool-specific, without duplicates", () => {
    const chips = correctionChips(p("write", { path: "a.py" }), ["Use pnpm, never npm.", "Read the file before changing it."]);
    expect(chips.slice(0, 4)).toEqual([
      "Use pnpm, never npm.",
      "Read the file before changing it.",
      "Prefer edit_lines over rewriting a whole file with write.",
      "Don't change a.py.",
    ]);
    expect(new Set(chips).size).toBe(chips.length);
  });

  it("remembers recent corrections", () => {
    expect(rememberCorrection(["a", "b"], " b ")).toEqual(["b", "a"]);
    expect(rememberCorrection(["a"], "  ")).toEqual(["a"]);
    expect(rememberCorrection(["1", "2", "3"], "4", 3)).toEqual(["4", "1", "2"]);
  });
});

describe("proposal document paths", () => {
  it("round-trips the proposal id and file path", () => {
    const path = proposalDocPath("p/1 x", "src/calc/ops.py");
    expect(path).toBe("/p%2F1%20x/src/calc/ops.py");
    expect(parseProposalDocPath(path)).toEqual({ proposalId: "p/1 x", filePath: "src/calc/ops.py", side: "proposed" });
    expect(parseProposalDocPath(path, "original")?.side).toBe("original");
    expect(parseProposalDocPath("/nofile")).toBeUndefined();
  });
});

describe("done", () => {
  const done = p("done", { summary: "mean() divides with / now." });

  it("shows the model's summary as the proposal, approved as Finish task", () => {
    expect(describeProposal(done)).toBe("done: mean() divides with / now.");
    expect(proposalDetail(done)).toBe("mean() divides with / now.");
    expect(callDocument(done)).toEqual({
      name: "proposed-done.md",
      content: "# Continual says the task is done; Finish task ends it, Deny… says what is left.\n\nmean() divides with / now.\n",
    });
    expect(approveLabel(done)).toBe("Finish task");
    expect(approveLabel(p("bash", { cmd: "ls" }))).toBe("Approve");
  });

  it("offers a call a guard blocks as Override guard, with the guard's reason", () => {
    const blocked = { ...p("bash", { cmd: "npm install" }), blockedBy: "Use pnpm, never npm." };
    expect(approveLabel(blocked)).toBe("Override guard");
    expect(proposalDetail(blocked)).toBe("$ npm install\n\nBlocked by a guard: Use pnpm, never npm.");
  });
});
