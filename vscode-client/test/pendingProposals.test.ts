import { describe, expect, it } from "vitest";
import { PendingProposals } from "../src/core/pendingProposals";
import type { ProposalNotification } from "../src/core/protocol";

const p = (proposalId: string, taskId = "t1", uri?: string): ProposalNotification => ({
  proposalId,
  taskId,
  tool: "write",
  arguments: { path: "a" },
  readOnly: false,
  ...(uri ? { uri } : {}),
});

describe("PendingProposals", () => {
  it("tracks the newest proposal as current", () => {
    const pending = new PendingProposals();
    pending.add(p("a", "t1"));
    pending.add(p("b", "t2"));
    expect(pending.current()?.proposalId).toBe("b");
    pending.remove("b");
    expect(pending.current()?.proposalId).toBe("a");
  });

  it("a new proposal supersedes its task's earlier one", () => {
    const pending = new PendingProposals();
    pending.add(p("a", "t1"));
    pending.add(p("x", "t2"));
    expect(pending.add(p("b", "t1"))).toEqual(["a"]);
    expect(pending.all().map((q) => q.proposalId)).toEqual(["x", "b"]);
  });

  it("re-adding moves a proposal to the end", () => {
    const pending = new PendingProposals();
    pending.add(p("a", "t1"));
    pending.add(p("b", "t2"));
    pending.add(p("a", "t1"));
    expect(pending.current()?.proposalId).toBe("a");
    expect(pending.size).toBe(2);
  });

  it("drops a finished task, retains known ids, and finds by uri", () => {
    const pending = new PendingProposals();
    pending.add(p("a", "t1", "file:///w/a.py"));
    pending.add(p("b", "t2", "file:///w/b.py"));
    pending.add(p("c", "t3", "file:///w/a.py"));
    expect(pending.forUri("file:///w/a.py").map((q) => q.proposalId)).toEqual(["a", "c"]);
    expect(pending.removeTask("t1")).toEqual(["a"]);
    expect(pending.retain(["c"])).toEqual(["b"]);
    expect(pending.has("c")).toBe(true);
    pending.clear();
    expect(pending.current()).toBeUndefined();
  });
});
