import { describe, expect, it } from "vitest";
import { formatLoss, formatStatus, shortModel } from "../src/core/status";

const status = { backend: "local", model: "embedded:SmolLM2-135M-Instruct", adapterVersion: "v3", trainingSteps: 3, queueDepth: 0 };

describe("formatStatus", () => {
  it("shows starting and stopped", () => {
    expect(formatStatus({ connection: "starting", training: false, pendingCount: 0 }).text).toMatch(/loading~spin/);
    expect(formatStatus({ connection: "starting", status, training: false, pendingCount: 0 }).text).toBe("$(loading~spin) Continual: starting…");
    expect(formatStatus({ connection: "stopped", training: false, pendingCount: 0 })).toMatchObject({ warning: true });
  });

  it("shows backend, adapter and the last step", () => {
    const view = formatStatus({
      connection: "running",
      status,
      training: false,
      pendingCount: 1,
      lastLearned: { proposalId: "p", step: 3, loss: 0.41234, seconds: 1.84, adapterVersion: "v3" },
    });
    expect(view.text).toBe("$(mortar-board) local · v3 · loss 0.412 (1.8s) · $(git-pull-request) 1");
    expect(view.tooltip).toContain("Model: embedded:SmolLM2-135M-Instruct");
    expect(view.tooltip).toContain("Last step: #3, loss 0.412, 1.8 s");
  });

  it("names the starter adapter when it is merged into the base", () => {
    const view = formatStatus({
      connection: "running",
      status: { ...status, adapterVersion: undefined, starter: "starter-0123abcd4567" },
      training: false,
      pendingCount: 0,
    });
    expect(view.text).toBe("$(mortar-board) local · starter");
    expect(view.tooltip).toContain("Starter: starter-0123abcd4567");
    expect(formatStatus({ connection: "running", status, training: false, pendingCount: 0 }).tooltip).toContain("Starter: off");
  });

  it("spins while training or while the queue is not empty", () => {
    expect(formatStatus({ connection: "running", status, training: true, pendingCount: 0 }).text).toBe(
      "$(sync~spin) local · v3 · training…",
    );
    expect(formatStatus({ connection: "running", status: { ...status, queueDepth: 2, adapterVersion: undefined }, training: false, pendingCount: 0 }).text).toBe(
      "$(sync~spin) local · base · training…",
    );
  });

  it("formats models and losses", () => {
    expect(shortModel("embedded:SmolLM2-135M-Instruct")).toBe("SmolLM2-135M-Instruct");
    expect(shortModel("/m/x.Q4.gguf")).toBe("x.Q4");
    expect(formatLoss(0.5)).toBe("0.500");
    expect(formatLoss(0.00001)).toBe("1.00e-5");
    expect(formatLoss(0)).toBe("0.000");
  });
});
