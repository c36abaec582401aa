import { describe, expect, it } from "vitest";
import { groupLedger, itemDescription, itemLabel, itemTooltip, ledgerHeader } from "../src/core/ledger";
import type { LedgerItem } from "../src/core/protocol";

const item = (id: string, lane: LedgerItem["lane"], recurrence = 1, active = true, createdAt = 1): LedgerItem => ({
  id,
  text: `rule ${id}`,
  lane,
  reason: `why ${id}`,
  recurrence,
  createdAt,
  active,
});

describe("groupLedger", () => {
  it("groups by lane in a fixed order, active and most recurrent first", () => {
    const view = groupLedger({
      items: [item("a", "CONTEXT"), item("b", "CODE"), item("c", "CONTEXT", 3), item("d", "CONTEXT", 5, false)],
      contextTokens: 12,
      notesOnlyTokens: 48,
    });
    expect(view.groups.map((g) => g.lane)).toEqual(["CODE", "WEIGHTS", "CONTEXT"]);
    expect(view.groups[2].items.map((i) => i.id)).toEqual(["c", "a", "d"]);
    expect(view.groups[2].description).toMatch(/^2 active, 1 reverted/);
    expect(view.groups[1].items).toEqual([]);
  });

  it("shows unrouted items only when there are some", () => {
    const view = groupLedger({ items: [item("n", "NONE")], contextTokens: 0, notesOnlyTokens: 0 });
    expect(view.groups.map((g) => g.label)).toEqual(["Code", "Weights", "Context", "Not routed"]);
  });
});

describe("ledger text", () => {
  it("header states the context tax against notes-only", () => {
    expect(ledgerHeader({ items: [], contextTokens: 12, notesOnlyTokens: 48 })).toMatchObject({
      label: "Context: 12 tokens",
      description: "notes-only: 48 (75% saved)",
    });
    expect(ledgerHeader({ items: [], contextTokens: 0, notesOnlyTokens: 0 }).description).toBe("notes-only: 0");
  });

  it("labels, descriptions and tooltips", () => {
    const long = { ...item("a", "CODE", 2, false, 1_700_000_000), text: "x ".repeat(100) };
    expect(itemLabel(long, 10)).toBe("x x x x x…");
    expect(itemDescription(long)).toBe("×2 · reverted · why a");
    expect(itemTooltip(long)).toMatch(/Lane: Code \(reverted\)\nWhy: why a\nSeen: 2 times\nSince: 2023-11-14 22:13:20 UTC/);
  });

  it("shows a guard's overrides and a task-scoped correction", () => {
    const guard = { ...item("g", "CODE"), fired: 2, overridden: 1 };
    expect(itemDescription(guard)).toBe("×1 · fired 2 · overridden 1× · why g");
    expect(itemTooltip(guard)).toContain("Overridden: 1 (a guard overridden twice retires to Context)");
    const scoped = { ...item("s", "NONE"), taskScoped: true };
    expect(itemDescription(scoped)).toBe("×1 · task-scoped · why s");
    expect(itemTooltip(scoped)).toContain("Promote makes it one");
  });
});
