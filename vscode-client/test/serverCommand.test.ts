import { describe, expect, it } from "vitest";
import { resolveServerCommand, type ServerSettings } from "../src/core/serverCommand";

const base: ServerSettings = { serverCommand: [], pythonPath: "", serverArgs: [], model: "", backend: "", storePath: "" };

describe("resolveServerCommand", () => {
  it("prefers the workspace venv, else python3", () => {
    const withVenv = resolveServerCommand(base, "/w", (p) => p === "/w/.venv/bin/python");
    expect(withVenv.command).toBe("/w/.venv/bin/python");
    expect(withVenv.args).toEqual(["-m", "continual_lsp", "serve"]);
    expect(withVenv.cwd).toBe("/w");
    expect(resolveServerCommand(base, "/w", () => false).command).toBe("python3");
    expect(resolveServerCommand(base, undefined, () => true).command).toBe("python3");
  });

  it("uses the configured python, relative to the workspace or from home", () => {
    expect(resolveServerCommand({ ...base, pythonPath: "/opt/py" }, "/w", () => true).command).toBe("/opt/py");
    expect(resolveServerCommand({ ...base, pythonPath: "./env/bin/python" }, "/w", () => true).command).toBe("/w/env/bin/python");
    expect(resolveServerCommand({ ...base, pythonPath: "~/py" }, "/w", () => true, "/home/u").command).toBe("/home/u/py");
    expect(resolveServerCommand({ ...base, pythonPath: "python3.11" }, "/w", () => true).command).toBe("python3.11");
  });

  it("passes settings as CONTINUAL_LSP_* and appends the extra args", () => {
    const cmd = resolveServerCommand(
      { serverCommand: [], pythonPath: "py", serverArgs: ["--log-level", "debug"], model: " m.gguf ", backend: "local", storePath: "~/s.db" },
      "/w",
      () => false,
      "/h",
    );
    expect(cmd.args).toEqual(["-m", "continual_lsp", "serve", "--log-level", "debug"]);
    expect(cmd.env).toEqual({
      PYTHONUNBUFFERED: "1",
      CONTINUAL_LSP_MODEL: "m.gguf",
      CONTINUAL_LSP_BACKEND: "local",
      CONTINUAL_LSP_STORE_PATH: "/h/s.db",
    });
  });

  it("a custom command replaces python -m continual_lsp serve", () => {
    const cmd = resolveServerCommand({ ...base, serverCommand: ["~/bin/uv", "run", "continual-lsp", "serve", ""], model: "m" }, "/w", () => true, "/h");
    expect(cmd.command).toBe("/h/bin/uv");
    expect(cmd.args).toEqual(["run", "continual-lsp", "serve"]);
    expect(cmd.env.CONTINUAL_LSP_MODEL).toBe("m");
  });
});
