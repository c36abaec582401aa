// How to launch the server from the extension's settings. No `vscode` import.

export interface ServerSettings {
  /** Replaces the whole launch command when non-empty (uv, pipx, a wrapper script…). */
  serverCommand: string[];
  pythonPath: string;
  serverArgs: string[];
  model: string;
  backend: string;
  storePath: string;
}

export interface ServerCommand {
  command: string;
  args: string[];
  /** Variables added to the inherited environment (Settings reads CONTINUAL_LSP_*). */
  env: Record<string, string>;
  cwd?: string;
}

/** The workspace venv's python, for each platform's layout. */
export function venvPythonCandidates(workspaceRoot: string): string[] {
  const root = workspaceRoot.replace(/[\\/]+$/, "");
  return [`${root}/.venv/bin/python`, `${root}\\.venv\\Scripts\\python.exe`];
}

export function expandHome(path: string, home: string | undefined): string {
  if (home && (path === "~" || path.startsWith("~/"))) return home + path.slice(1);
  return path;
}

export function resolveServerCommand(
  settings: ServerSettings,
  workspaceRoot: string | undefined,
  exists: (path: string) => boolean,
  home?: string,
): ServerCommand {
  let python = expandHome(settings.pythonPath.trim(), home);
  if (python && workspaceRoot && !python.startsWith("/") && python.includes("/") && !/^[A-Za-z]:/.test(python)) {
    python = `${workspaceRoot.replace(/[\\/]+$/, "")}/${python.replace(/^\.\//, "")}`;
  }
  if (!python) {
    python = (workspaceRoot && venvPythonCandidates(workspaceRoot).find(exists)) || "python3";
  }
  const env: Record<string, string> = { PYTHONUNBUFFERED: "1" };
  if (settings.model.trim()) env.CONTINUAL_LSP_MODEL = settings.model.trim();
  if (settings.backend.trim()) env.CONTINUAL_LSP_BACKEND = settings.backend.trim();
  if (settings.storePath.trim()) env.CONTINUAL_LSP_STORE_PATH = expandHome(settings.storePath.trim(), home);
  const custom = settings.serverCommand.filter((part) => part.trim() !== "");
  const command: ServerCommand =
    custom.length > 0
      ? { command: expandHome(custom[0], home), args: custom.slice(1), env }
      : { command: python, args: ["-m", "continual_lsp", "serve", ...settings.serverArgs], env };
  if (workspaceRoot) command.cwd = workspaceRoot;
  return command;
}
