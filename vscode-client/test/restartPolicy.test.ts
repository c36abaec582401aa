import { describe, expect, it } from "vitest";
import { RestartPolicy } from "../src/core/restartPolicy";

describe("RestartPolicy", () => {
  it("restarts up to the limit within the window, then stops", () => {
    const policy = new RestartPolicy(2, 1000);
    expect(policy.onCrash(0)).toBe(true);
    expect(policy.onCrash(10)).toBe(true);
    expect(policy.onCrash(20)).toBe(false);
  });

  it("forgets crashes older than the window, and on reset", () => {
    const policy = new RestartPolicy(1, 1000);
    expect(policy.onCrash(0)).toBe(true);
    expect(policy.onCrash(2000)).toBe(true);
    expect(policy.onCrash(2500)).toBe(false);
    policy.reset();
    expect(policy.onCrash(2600)).toBe(true);
  });
});
