// Flat config: recommended JS + typescript-eslint rules, plus a wall that keeps `vscode`
// out of src/core (pure logic, unit-tested without an editor).
import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["src/core/wire.ts", "dist/**", "out/**", "node_modules/**", ".e2e/**", "test-output/**"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ["**/*.ts"],
    rules: {
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_" }],
      "@typescript-eslint/consistent-type-imports": "error",
      eqeqeq: ["error", "always"],
      "no-console": "error",
    },
  },
  {
    files: ["src/core/**/*.ts"],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          paths: [
            { name: "vscode", message: "src/core is editor-free: keep vscode out." },
            { name: "vscode-languageclient", message: "src/core is editor-free." },
            { name: "vscode-languageclient/node", message: "src/core is editor-free." },
          ],
        },
      ],
    },
  },
  {
    files: ["**/*.mjs", "e2e/**"],
    languageOptions: {
      globals: { process: "readonly", console: "readonly", setTimeout: "readonly", clearTimeout: "readonly", URL: "readonly", fetch: "readonly", document: "readonly" },
    },
    rules: { "no-console": "off" },
  },
);
