// The language client: starts `python -m continual_lsp serve` over stdio, restarts it when it
// crashes, logs to an output channel, and exposes the custom methods of DESIGN §7.

import * as fs from "node:fs";
import * as os from "node:os";
import * as vscode from "vscode";
import {
  CloseAction,
  ErrorAction,
  LanguageClient,
  State,
  type LanguageClientOptions,
  type ServerOptions,
} from "vscode-languageclient/node";
import {
  METHOD_ALLOW,
  METHOD_DECIDE,
  METHOD_LEDGER,
  METHOD_NOTE,
  METHOD_PENDING,
  METHOD_PROMOTE,
  METHOD_REVERT,
  METHOD_START_TASK,
  METHOD_STATUS,
  METHOD_UNDO,
  NOTIFY_LEARNED,
  NOTIFY_PROPOSAL,
  NOTIFY_ROUTED,
  NOTIFY_TASK_DONE,
  parseAllowResult,
  parseDecideResult,
  parseLearned,
  parseLedger,
  parsePending,
  parsePromoteResult,
  parseProposal,
  parseStartTaskResult,
  parseRouted,
  parseStatus,
  parseTaskDone,
  parseUndoResult,
  type AllowResult,
  type DecideParams,
  type DecideResult,
  type LearnedNotification,
  type LedgerResult,
  type PromoteResult,
  type ProposalNotification,
  type RoutedNotification,
  type StartTaskResult,
  type StatusResult,
  type TaskDoneNotification,
  type UndoResult,
} from "./core/protocol";
import { RestartPolicy } from "./core/restartPolicy";
import { resolveServerCommand, type ServerSettings } from "./core/serverCommand";
import type { Connection } from "./core/status";

export type CommandInterceptor = (command: string, args: unknown[]) => Promise<unknown[] | undefined> | unknown[] | undefined;

export function readServerSettings(): ServerSettings {
  const config = vscode.workspace.getConfiguration("continual");
  return {
    serverCommand: config.get<string[]>("serverCommand", []),
    pythonPath: config.get<string>("pythonPath", ""),
    serverArgs: config.get<string[]>("serverArgs", []),
    model: config.get<string>("model", ""),
    backend: config.get<string>("backend", ""),
    storePath: config.get<string>("storePath", ""),
  };
}

export class ContinualClient implements vscode.Disposable {
  readonly onProposal = new vscode.EventEmitter<ProposalNotification>();
  private readonly offered = new Set<string>();
  readonly onLearned = new vscode.EventEmitter<LearnedNotification>();
  readonly onRouted = new vscode.EventEmitter<RoutedNotification>();
  readonly onTaskDone = new vscode.EventEmitter<TaskDoneNotification>();
  readonly onConnection = new vscode.EventEmitter<Connection>();

  private client: LanguageClient | undefined;
  private readonly restarts = new RestartPolicy();
  private connection: Connection = "stopped";

  /** Lets the proposal UI take over the server's LSP commands (continual.deny without a correction…). */
  interceptCommand: CommandInterceptor | undefined;

  constructor(private readonly output: vscode.LogOutputChannel) {}

  get state(): Connection {
    return this.connection;
  }

  async start(): Promise<void> {
    const folder = vscode.workspace.workspaceFolders?.[0];
    const root = folder?.uri.scheme === "file" ? folder.uri.fsPath : undefined;
    const cmd = resolveServerCommand(readServerSettings(), root, (p) => fs.existsSync(p), os.homedir());
    this.output.info(`Starting server: ${cmd.command} ${cmd.args.join(" ")}${root ? ` (cwd ${root})` : ""}`);
    for (const [key, value] of Object.entries(cmd.env)) this.output.info(`  ${key}=${value}`);

    const serverOptions: ServerOptions = {
      command: cmd.command,
      args: cmd.args,
      // No `transport`: stdio without the `--stdio` flag that TransportKind.stdio would append.
      options: { cwd: cmd.cwd, env: { ...process.env, ...cmd.env } },
    };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [{ scheme: "file" }],
      outputChannel: this.output,
      // Tells the server that this client renders continual/proposal itself (no
      // showMessageRequest or showDocument fallbacks for it).
      initializationOptions: { continualProposals: true },
      errorHandler: {
        error: () => ({ action: ErrorAction.Continue }),
        closed: () => {
          if (this.restarts.onCrash(Date.now())) {
            this.output.warn("The server stopped; restarting it.");
            return { action: CloseAction.Restart, handled: true };
          }
          return {
            action: CloseAction.DoNotRestart,
            message: "The Continual server crashed 5 times in 3 minutes and was not restarted. See its log, then run “Continual: Restart Server”.",
          };
        },
      },
      middleware: {
        executeCommand: async (command, args, next) => {
          const replaced = this.interceptCommand ? await this.interceptCommand(command, args) : args;
          return replaced === undefined ? undefined : next(command, replaced);
        },
      },
    };

    const client = new LanguageClient("continual", "Continual", serverOptions, clientOptions);
    this.client = client;
    client.onDidChangeState((event) => {
      const next: Connection = event.newState === State.Running ? "running" : event.newState === State.Starting ? "starting" : "stopped";
      this.setConnection(next);
    });
    client.onNotification(NOTIFY_PROPOSAL, (raw: unknown) => this.dispatch(raw, parseProposal, { fire: (p) => this.offer(p) }, NOTIFY_PROPOSAL));
    client.onNotification(NOTIFY_LEARNED, (raw: unknown) => this.dispatch(raw, parseLearned, this.onLearned, NOTIFY_LEARNED));
    client.onNotification(NOTIFY_ROUTED, (raw: unknown) => this.dispatch(raw, parseRouted, this.onRouted, NOTIFY_ROUTED));
    client.onNotification(NOTIFY_TASK_DONE, (raw: unknown) => this.dispatch(raw, parseTaskDone, this.onTaskDone, NOTIFY_TASK_DONE));

    this.setConnection("starting");
    try {
      await client.start();
    } catch (error) {
      this.output.error(`The server did not start: ${String(error)}`);
      this.setConnection("stopped");
      throw error;
    }
  }

  async restart(): Promise<void> {
    this.restarts.reset();
    await this.stop();
    await this.start();
  }

  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (client) {
      try {
        await client.stop(5000);
      } catch (error) {
        this.output.warn(`Stopping the server: ${String(error)}`);
      }
      await client.dispose();
    }
    this.setConnection("stopped");
  }

  private setConnection(next: Connection): void {
    if (next !== this.connection) {
      this.connection = next;
      this.onConnection.fire(next);
    }
  }

  /** A proposal arrives in a response and as a notification: the UI sees it once. */
  private offer(proposal: ProposalNotification | undefined): void {
    if (!proposal || this.offered.has(proposal.proposalId)) return;
    this.offered.add(proposal.proposalId);
    this.onProposal.fire(proposal);
  }

  private dispatch<T>(raw: unknown, parse: (v: unknown) => T | undefined, emitter: Pick<vscode.EventEmitter<T>, "fire">, method: string): void {
    const parsed = parse(raw);
    if (parsed === undefined) {
      this.output.warn(`Ignoring a malformed ${method} notification: ${JSON.stringify(raw)}`);
      return;
    }
    this.output.debug(`${method} ${JSON.stringify(raw)}`);
    emitter.fire(parsed);
  }

  private async request(method: string, params: object): Promise<unknown> {
    const client = this.client;
    if (!client || !client.isRunning()) throw new Error("The Continual server is not running.");
    return client.sendRequest(method, params);
  }

  /** `files`: paths the task starts with in view (read into the conversation first). */
  async startTask(text: string, files: string[] = []): Promise<StartTaskResult> {
    const result = parseStartTaskResult(await this.request(METHOD_START_TASK, { text, files }));
    this.offer(result.proposal);
    return result;
  }

  async decide(params: DecideParams): Promise<DecideResult> {
    const result = parseDecideResult(await this.request(METHOD_DECIDE, params));
    this.offer(result.nextProposal);
    return result;
  }

  /** What the server waits on: a resync after a restart or a lost notification. */
  async pending(): Promise<ProposalNotification[]> {
    return parsePending(await this.request(METHOD_PENDING, {})).proposals;
  }

  async note(text: string): Promise<void> {
    await this.request(METHOD_NOTE, { text });
  }

  async ledger(): Promise<LedgerResult> {
    return parseLedger(await this.request(METHOD_LEDGER, {}));
  }

  async revert(itemId: string): Promise<void> {
    await this.request(METHOD_REVERT, { itemId });
  }

  /** A task-scoped correction kept as a standing rule: the item it became. */
  async promote(itemId: string): Promise<PromoteResult> {
    return parsePromoteResult(await this.request(METHOD_PROMOTE, { itemId }));
  }

  async undo(proposalId?: string, reason?: string): Promise<UndoResult> {
    return parseUndoResult(await this.request(METHOD_UNDO, { ...(proposalId ? { proposalId } : {}), ...(reason ? { reason } : {}) }));
  }

  async allow(proposalId: string): Promise<AllowResult> {
    return parseAllowResult(await this.request(METHOD_ALLOW, { proposalId }));
  }

  async status(): Promise<StatusResult | undefined> {
    return parseStatus(await this.request(METHOD_STATUS, {}));
  }

  dispose(): void {
    void this.stop();
    for (const emitter of [this.onProposal, this.onLearned, this.onRouted, this.onTaskDone, this.onConnection]) emitter.dispose();
  }
}
