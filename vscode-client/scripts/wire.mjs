// src/core/wire.ts from src/core/wire.schema.json, the JSON Schema of the pydantic wire
// models (continual_lsp/protocol.py). `bash scripts/protocol.sh` runs both steps;
// test/wire.test.ts fails when the committed file is not what this generates.
import { readFile, writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { compile } from "json-schema-to-typescript";

const root = new URL("../src/core/", import.meta.url);
export const SCHEMA = new URL("wire.schema.json", root);
export const OUTPUT = new URL("wire.ts", root);
const BANNER =
  "// Generated from continual_lsp/protocol.py by vscode-client/scripts/protocol.sh: do not edit.";

export async function generateWire() {
  const schema = JSON.parse(await readFile(SCHEMA, "utf8"));
  return compile(schema, "Wire", {
    bannerComment: BANNER,
    unreachableDefinitions: true,
    unknownAny: true,
    additionalProperties: false,
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  await writeFile(OUTPUT, await generateWire());
  console.log(`wrote ${fileURLToPath(OUTPUT)}`);
}
