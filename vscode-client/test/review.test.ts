import { describe, expect, it } from "vitest";
import { itemDescription, itemTooltip } from "../src/core/ledger";
import { parseAllowResult, parseLedger, parseProposal, parseStatus, parseUndoResult } from "../src/core/protocol";
import { formatStatus } from "../src/core/status";

const base = { proposalId: "p1", taskId: "t1", tool: "write", arguments: { path: "a.py" }, readOnly: false };
const hunk = (index: number) => ({ index, oldStart: index * 5 + 1, oldLines: 1, newStart: index * 5 + 1, newLines: 2 });

describe("issue 19 payloads", () => {
  it("keeps a proposal's hunks and allow offer, and drops a malformed hunk list whole", () => {
    const proposal = parseProposal({ ...base, hunks: [hunk(0), hunk(1)], allowOffer: { rule: "bash: `pytest -q …`", approvals: 2 } });
    expect(proposal?.hunks?.map((h) => h.index)).toEqual([0, 1]);
    expect(proposal?.allowOffer).toEqual({ rule: "bash: `pytest -q …`", approvals: 2 });
    expect(parseProposal({ ...base, hunks: [hunk(0), { index: "1" }] })?.hunks).toBeUndefined();
    expect(parseProposal({ ...base, hunks: [hunk(0)] })?.hunks).toBeUndefined(); // one hunk: decided whole
  });

  it("reads undo and allow results", () => {
    expect(parseUndoResult({ ok: true, proposalId: "p1", restored: ["a.py", 3] })).toEqual({ ok: true, proposalId: "p1", restored: ["a.py"] });
    expect(parseAllowResult({ ok: true, itemId: "item-1", rule: "bash: `git status …`" }).itemId).toBe("item-1");
    expect(parseAllowResult(null).ok).toBe(false);
  });

  it("shows the ledger's evidence: fires, recurrences, the gate, the approvals", () => {
    const { items } = parseLedger({
      items: [
        { id: "g", text: "Never rm -rf", lane: "CODE", reason: "guard", recurrence: 2, createdAt: 1, active: true, fired: 3, recurredAfter: 1 },
        { id: "w", text: "Use pnpm", lane: "WEIGHTS", reason: "w", recurrence: 3, createdAt: 1, active: true, gate: { before: 0.1, after: 0.4, promoted: true } },
        { id: "a", text: "Always allow", lane: "CODE", reason: "allow", recurrence: 1, createdAt: 1, active: true, approvals: ["p1", "p2"] },
      ],
    });
    expect(itemDescription(items[0])).toContain("fired 3");
    expect(itemDescription(items[0])).toContain("came back 1×");
    expect(itemTooltip(items[1])).toContain("0.100 → 0.400 (promoted)");
    expect(itemTooltip(items[2])).toContain("Learned from approvals: p1, p2");
  });

  it("puts the autonomy in the status bar", () => {
    const status = parseStatus({ backend: "local", model: "m", trainingSteps: 0, queueDepth: 0, autonomy: "allow_rules" });
    expect(status?.autonomy).toBe("allow_rules");
    const view = formatStatus({ connection: "running", status, training: false, pendingCount: 0 });
    expect(view.text).toContain("allow rules");
    expect(view.tooltip).toContain("your allow rules");
    expect(parseStatus({ backend: "local", model: "m", autonomy: "everything" })?.autonomy).toBeUndefined();
  });
});
