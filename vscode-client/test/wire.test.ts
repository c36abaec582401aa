import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { generateWire, OUTPUT } from "../scripts/wire.mjs";

describe("wire types", () => {
  it("are what json-schema-to-typescript makes of the pydantic models' schema", async () => {
    // On failure: run `bash vscode-client/scripts/protocol.sh` and commit the result.
    expect(await readFile(OUTPUT, "utf8")).toBe(await generateWire());
  });
});
