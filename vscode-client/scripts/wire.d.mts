/** The text of src/core/wire.ts as json-schema-to-typescript generates it. */
export function generateWire(): Promise<string>;
export const SCHEMA: URL;
export const OUTPUT: URL;
