import { describe, expect, it } from "vitest";
import { changedBlock, editArgumentsFor, EditError, editNonFileArguments, editableText } from "../src/core/editedArguments";
import { simulateTool } from "../src/core/proposedContent";

const ORIGINAL = "def f():\n    return 1\n\n\ndef g():\n    return 1\n";

describe("changedBlock", () => {
  it("finds the smallest differing block", () => {
    expect(changedBlock(["a", "b", "c"], ["a", "B", "c"])).toEqual({ start: 1, oldEnd: 2, newEnd: 2 });
    expect(changedBlock(["a", "c"], ["a", "b", "c"])).toEqual({ start: 1, oldEnd: 1, newEnd: 2 });
    expect(changedBlock(["a"], ["a"])).toBeUndefined();
  });
});

describe("editArgumentsFor", () => {
  it("write sends the whole edited file", () => {
    expect(editArgumentsFor("write", { path: "m.py", content: "x" }, ORIGINAL, "y\n")).toEqual({ path: "m.py", content: "y\n" });
  });

  it("edit_lines sends the changed lines, and replays to the edited file", () => {
    const edited = ORIGINAL.replace("def g():\n    return 1", "def g():\n    return 2");
    const args = editArgumentsFor("edit_lines", { path: "m.py", start: 1, end: 1, content: "" }, ORIGINAL, edited);
    expect(args).toEqual({ path: "m.py", start: 6, end: 6, content: "    return 2\n" });
    expect(simulateTool("edit_lines", args, ORIGINAL)).toMatchObject({ ok: true, content: edited });
  });

  it("edit_lines turns a pure insertion into a replacement of a neighbour", () => {
    const edited = ORIGINAL.replace("def f():\n", "def f():\n    # doc\n");
    const args = editArgumentsFor("edit_lines", { path: "m.py" }, ORIGINAL, edited);
    expect(args).toEqual({ path: "m.py", start: 2, end: 2, content: "    # doc\n    return 1\n" });
    expect(simulateTool("edit_lines", args, ORIGINAL)).toMatchObject({ ok: true, content: edited });
  });

  it("edit widens `old` until it is unique", () => {
    const edited = ORIGINAL.replace("def g():\n    return 1", "def g():\n    return 2");
    const args = editArgumentsFor("edit", { path: "m.py", old: "x", new: "y", all: true }, ORIGINAL, edited);
    expect(args).toEqual({ path: "m.py", old: "def g():\n    return 1\n", new: "def g():\n    return 2\n" });
    expect(simulateTool("edit", args, ORIGINAL)).toMatchObject({ ok: true, content: edited });
  });

  it("edit handles a deletion", () => {
    const edited = "def f():\n    return 1\n";
    const args = editArgumentsFor("edit", { path: "m.py" }, ORIGINAL, edited);
    expect(simulateTool("edit", args, ORIGINAL)).toMatchObject({ ok: true, content: edited });
  });

  it("edit_lines keeps a line that became blank", () => {
    const edited = ORIGINAL.replace("    return 1\n\n\ndef g", "\n\n\ndef g");
    const args = editArgumentsFor("edit_lines", { path: "m.py" }, ORIGINAL, edited);
    expect(args).toEqual({ path: "m.py", start: 2, end: 2, content: "\n" });
    expect(simulateTool("edit_lines", args, ORIGINAL)).toMatchObject({ ok: true, content: edited });
  });

  it("falls back to a whole-file write through the tool key", () => {
    expect(editArgumentsFor("edit_lines", { path: "n.py" }, undefined, "x\n")).toEqual({ tool: "write", path: "n.py", content: "x\n" });
    expect(editArgumentsFor("edit", { path: "n.py" }, "", "x\n")).toEqual({ tool: "write", path: "n.py", content: "x\n" });
    const big = "y".repeat(2500) + "\n";
    expect(editArgumentsFor("edit", { path: "n.py" }, "a\n", big)).toEqual({ tool: "write", path: "n.py", content: big });
  });

  it("refuses an unchanged file and non-file tools", () => {
    expect(() => editArgumentsFor("edit", { path: "m.py" }, ORIGINAL, ORIGINAL)).toThrow(EditError);
    expect(() => editArgumentsFor("bash", { cmd: "ls" }, "", "x")).toThrow(EditError);
  });

  it("refuses a write beyond the tool's content limit", () => {
    expect(() => editArgumentsFor("write", { path: "m.py" }, "", "x".repeat(4001))).toThrow(/4000/);
  });
});

describe("non-file edits", () => {
  it("bash edits the command and keeps other arguments", () => {
    expect(editableText("bash", { cmd: "npm test", timeout: 5 })).toBe("npm test");
    expect(editNonFileArguments("bash", { cmd: "npm test", timeout: 5 }, " pnpm test \n")).toEqual({ cmd: "pnpm test", timeout: 5 });
    expect(() => editNonFileArguments("bash", { cmd: "x" }, "  ")).toThrow(EditError);
  });

  it("other tools edit their JSON arguments", () => {
    expect(editableText("grep", { pat: "x" })).toBe('{\n  "pat": "x"\n}');
    expect(editNonFileArguments("grep", { pat: "x" }, '{"pat": "y"}')).toEqual({ pat: "y" });
    expect(() => editNonFileArguments("grep", {}, "[1]")).toThrow(EditError);
    expect(() => editNonFileArguments("grep", {}, "{")).toThrow(EditError);
  });
});
