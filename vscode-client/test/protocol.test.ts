import { describe, expect, it } from "vitest";
import {
  isFileChanging,
  parseDecideResult,
  parseLearned,
  parseLedger,
  parsePending,
  parsePromoteResult,
  parseProposal,
  parseRouted,
  parseStartTaskResult,
  parseStatus,
  parseTaskDone,
} from "../src/core/protocol";

describe("payload parsing", () => {
  it("accepts a full proposal and drops unknown or malformed optional fields", () => {
    const proposal = parseProposal({
      proposalId: "p1",
      taskId: "t1",
      tool: "edit_lines",
      arguments: { path: "a.py", start: 1, end: 1, content: "x" },
      readOnly: false,
      uri: "file:///w/a.py",
      range: { start: { line: 0, character: 0 }, end: { line: 1, character: 0 } },
      diff: "--- a/a.py",
      note: "rewritten by a guard",
      extra: 1,
    });
    expect(proposal).toEqual({
      proposalId: "p1",
      taskId: "t1",
      tool: "edit_lines",
      arguments: { path: "a.py", start: 1, end: 1, content: "x" },
      readOnly: false,
      uri: "file:///w/a.py",
      range: { start: { line: 0, character: 0 }, end: { line: 1, character: 0 } },
      diff: "--- a/a.py",
      note: "rewritten by a guard",
    });
    expect(parseProposal({ proposalId: "p", taskId: "t", tool: "x", arguments: {}, readOnly: true, range: { start: 1 } })).not.toHaveProperty("range");
  });

  it("keeps a guard's block, the ledger's override count and task scope, and a promotion", () => {
    const blocked = parseProposal({ proposalId: "p", taskId: "t", tool: "bash", arguments: { cmd: "npm i" }, readOnly: false, blockedBy: "Use pnpm." });
    expect(blocked?.blockedBy).toBe("Use pnpm.");
    expect(parseProposal({ proposalId: "p", taskId: "t", tool: "x", arguments: {}, readOnly: true, blockedBy: 3 })).not.toHaveProperty("blockedBy");
    const ledger = parseLedger({
      items: [
        { id: "g", text: "t", lane: "CODE", reason: "r", recurrence: 1, createdAt: 1, active: true, overridden: 1 },
        { id: "s", text: "t", lane: "NONE", reason: "r", recurrence: 1, createdAt: 1, active: true, taskScoped: true },
      ],
    });
    expect(ledger.items.map((i) => [i.overridden, i.taskScoped])).toEqual([
      [1, undefined],
      [undefined, true],
    ]);
    expect(parsePromoteResult({ ok: true, itemId: "i2", lane: "CODE", reason: "r" })).toEqual({ ok: true, itemId: "i2", lane: "CODE", reason: "r" });
    expect(parsePromoteResult({ ok: true })).toEqual({ ok: false, itemId: "", lane: "NONE", reason: "" });
  });

  it("rejects proposals missing required fields", () => {
    expect(parseProposal(null)).toBeUndefined();
    expect(parseProposal({ proposalId: "p", taskId: "t", tool: "x", arguments: [], readOnly: false })).toBeUndefined();
    expect(parseProposal({ proposalId: "p", taskId: "t", tool: "x", arguments: {} })).toBeUndefined();
  });

  it("parses the other notifications", () => {
    expect(parseLearned({ proposalId: "p", step: 1, loss: 0.5, seconds: 2, adapterVersion: "v1" })).toEqual({
      proposalId: "p",
      step: 1,
      loss: 0.5,
      seconds: 2,
      adapterVersion: "v1",
    });
    expect(parseLearned({ proposalId: "p", step: 1 })).toBeUndefined();
    expect(parseRouted({ itemId: "i", lane: "CODE", reason: "r" })).toEqual({ itemId: "i", lane: "CODE", reason: "r" });
    expect(parseRouted({ itemId: "i", lane: "ELSEWHERE", reason: "r" })).toBeUndefined();
    expect(parseTaskDone({ taskId: "t", summary: "s" })).toEqual({ taskId: "t", summary: "s" });
    expect(parseTaskDone({ taskId: "t" })).toBeUndefined();
  });

  it("parses results leniently", () => {
    expect(parseLedger({ items: [{ id: "i", text: "t", lane: "WEIGHTS", reason: "r", recurrence: 3, createdAt: 5, active: false }, { nope: 1 }], contextTokens: 4, notesOnlyTokens: 9 })).toEqual({
      items: [{ id: "i", text: "t", lane: "WEIGHTS", reason: "r", recurrence: 3, createdAt: 5, active: false }],
      contextTokens: 4,
      notesOnlyTokens: 9,
    });
    expect(parseLedger(undefined)).toEqual({ items: [], contextTokens: 0, notesOnlyTokens: 0 });
    expect(parseStatus({ backend: "local", model: "m", trainingSteps: 2, queueDepth: 0, pendingProposalId: "p" })).toEqual({
      backend: "local",
      model: "m",
      trainingSteps: 2,
      queueDepth: 0,
      pendingProposalId: "p",
    });
    expect(parseStatus({})).toBeUndefined();
    expect(parseDecideResult({ ok: true, learned: { step: 1, loss: 0.1, seconds: 1 }, nextProposalId: "n" })).toEqual({
      ok: true,
      learned: { step: 1, loss: 0.1, seconds: 1 },
      nextProposalId: "n",
    });
    expect(parseDecideResult("x")).toEqual({ ok: false });
  });

  it("takes the proposal a response carries, and ignores a malformed one", () => {
    const proposal = { proposalId: "p2", taskId: "t", tool: "bash", arguments: { cmd: "ls" }, readOnly: false };
    expect(parseStartTaskResult({ taskId: "t", proposal })).toEqual({ taskId: "t", proposal });
    expect(parseStartTaskResult({ taskId: "t", proposal: { tool: "bash" } })).toEqual({ taskId: "t" });
    expect(parseDecideResult({ ok: true, nextProposalId: "p2", nextProposal: proposal })).toEqual({
      ok: true,
      nextProposalId: "p2",
      nextProposal: proposal,
    });
    expect(parsePending({ proposals: [proposal, { junk: 1 }] })).toEqual({ proposals: [proposal] });
    expect(parsePending(null)).toEqual({ proposals: [] });
  });

  it("knows the file-changing tools", () => {
    expect(["write", "edit", "edit_lines", "bash", "read"].filter(isFileChanging)).toEqual(["write", "edit", "edit_lines"]);
  });
});
