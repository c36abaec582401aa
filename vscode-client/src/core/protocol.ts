// The continual/* methods and what arrives from the server, checked before use. The payload
// types come from continual_lsp/protocol.py through JSON Schema (./wire.ts); the method
// names are held to it by tests/test_protocol.py. No `vscode` import here.

import type {
  AllowResult,
  DecideParams,
  DecideResult,
  Hunk,
  LearnedNotification,
  LedgerItem,
  LedgerResult,
  PendingResult,
  Position,
  PromoteResult,
  ProposalNotification,
  Range,
  RoutedNotification,
  StartTaskResult,
  StatusResult,
  TaskDoneNotification,
  UndoResult,
} from "./wire";

export const METHOD_START_TASK = "continual/startTask";
export const METHOD_DECIDE = "continual/decide";
export const METHOD_NOTE = "continual/note";
export const METHOD_LEDGER = "continual/ledger";
export const METHOD_REVERT = "continual/revert";
export const METHOD_STATUS = "continual/status";
export const METHOD_PENDING = "continual/pending";
export const METHOD_UNDO = "continual/undo";
export const METHOD_ALLOW = "continual/allow";
export const METHOD_PROMOTE = "continual/promote";
export const NOTIFY_PROPOSAL = "continual/proposal";
export const NOTIFY_LEARNED = "continual/learned";
export const NOTIFY_ROUTED = "continual/routed";
export const NOTIFY_TASK_DONE = "continual/taskDone";

// The payload types are generated from the pydantic models (./wire.ts, scripts/protocol.sh).
export type * from "./wire";

export type Decision = DecideParams["decision"];
export type Lane = LedgerItem["lane"];
export const LANES: readonly Lane[] = ["CODE", "WEIGHTS", "CONTEXT", "NONE"];
export type Autonomy = NonNullable<StatusResult["autonomy"]>;
export const AUTONOMY: readonly Autonomy[] = ["manual", "read_only", "allow_rules", "workspace_edits"];
export type HunkVerdict = { accept: boolean; reason?: string };

export const FILE_CHANGING_TOOLS: ReadonlySet<string> = new Set(["write", "edit", "edit_lines"]);

export function isFileChanging(tool: string): boolean {
  return FILE_CHANGING_TOOLS.has(tool);
}

// -- validation of what arrives from the server (a malformed notification must not crash the UI) --

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function isPosition(value: unknown): value is Position {
  return isRecord(value) && typeof value.line === "number" && typeof value.character === "number";
}

function isRange(value: unknown): value is Range {
  return isRecord(value) && isPosition(value.start) && isPosition(value.end);
}

export function parseProposal(value: unknown): ProposalNotification | undefined {
  if (!isRecord(value)) return undefined;
  const { proposalId, taskId, tool, readOnly, uri, range, diff, note, hunks, allowOffer, blockedBy } = value;
  const args = value.arguments;
  if (typeof proposalId !== "string" || typeof taskId !== "string" || typeof tool !== "string") {
    return undefined;
  }
  if (!isRecord(args) || typeof readOnly !== "boolean") return undefined;
  const proposal: ProposalNotification = { proposalId, taskId, tool, arguments: args, readOnly };
  if (typeof uri === "string") proposal.uri = uri;
  if (isRange(range)) proposal.range = range;
  if (typeof diff === "string") proposal.diff = diff;
  if (typeof note === "string") proposal.note = note;
  // A guard blocks the call: the UI offers Override guard, never Approve.
  if (typeof blockedBy === "string") proposal.blockedBy = blockedBy;
  if (Array.isArray(hunks)) {
    const valid = hunks.filter(
      (h): h is Hunk =>
        isRecord(h) && ["index", "oldStart", "oldLines", "newStart", "newLines"].every((k) => typeof h[k] === "number"),
    );
    if (valid.length === hunks.length && valid.length > 1) proposal.hunks = valid;
  }
  if (isRecord(allowOffer) && typeof allowOffer.rule === "string" && typeof allowOffer.approvals === "number") {
    proposal.allowOffer = { rule: allowOffer.rule, approvals: allowOffer.approvals };
  }
  return proposal;
}

export function parseLearned(value: unknown): LearnedNotification | undefined {
  if (!isRecord(value)) return undefined;
  const { proposalId, step, loss, seconds, adapterVersion } = value;
  if (typeof proposalId !== "string" || typeof step !== "number") return undefined;
  if (typeof loss !== "number" || typeof seconds !== "number") return undefined;
  const learned: LearnedNotification = { proposalId, step, loss, seconds };
  if (typeof adapterVersion === "string") learned.adapterVersion = adapterVersion;
  return learned;
}

export function parseRouted(value: unknown): RoutedNotification | undefined {
  if (!isRecord(value)) return undefined;
  const { itemId, lane, reason } = value;
  if (typeof itemId !== "string" || typeof reason !== "string") return undefined;
  if (typeof lane !== "string" || !(LANES as readonly string[]).includes(lane)) return undefined;
  return { itemId, lane: lane as Lane, reason };
}

export function parseTaskDone(value: unknown): TaskDoneNotification | undefined {
  if (!isRecord(value)) return undefined;
  const { taskId, summary } = value;
  if (typeof taskId !== "string" || typeof summary !== "string") return undefined;
  return { taskId, summary };
}

export function parseLedger(value: unknown): LedgerResult {
  const empty: LedgerResult = { items: [], contextTokens: 0, notesOnlyTokens: 0 };
  if (!isRecord(value)) return empty;
  const items: LedgerItem[] = [];
  for (const raw of Array.isArray(value.items) ? value.items : []) {
    if (!isRecord(raw) || typeof raw.id !== "string") continue;
    const lane = typeof raw.lane === "string" && (LANES as readonly string[]).includes(raw.lane) ? (raw.lane as Lane) : "NONE";
    items.push({
      id: raw.id,
      text: typeof raw.text === "string" ? raw.text : "",
      lane,
      reason: typeof raw.reason === "string" ? raw.reason : "",
      recurrence: typeof raw.recurrence === "number" ? raw.recurrence : 1,
      createdAt: typeof raw.createdAt === "number" ? raw.createdAt : 0,
      active: raw.active !== false,
      ...(typeof raw.fired === "number" ? { fired: raw.fired } : {}),
      ...(typeof raw.recurredAfter === "number" ? { recurredAfter: raw.recurredAfter } : {}),
      ...(isRecord(raw.gate) && typeof raw.gate.before === "number" && typeof raw.gate.after === "number"
        ? { gate: { before: raw.gate.before, after: raw.gate.after, promoted: raw.gate.promoted === true } }
        : {}),
      ...(Array.isArray(raw.approvals) ? { approvals: raw.approvals.filter((a): a is string => typeof a === "string") } : {}),
      ...(typeof raw.overridden === "number" ? { overridden: raw.overridden } : {}),
      ...(raw.taskScoped === true ? { taskScoped: true } : {}),
    });
  }
  return {
    items,
    contextTokens: typeof value.contextTokens === "number" ? value.contextTokens : 0,
    notesOnlyTokens: typeof value.notesOnlyTokens === "number" ? value.notesOnlyTokens : 0,
  };
}

export function parseStatus(value: unknown): StatusResult | undefined {
  if (!isRecord(value)) return undefined;
  const { backend, model, adapterVersion, trainingSteps, queueDepth, pendingProposalId, starter } = value;
  if (typeof backend !== "string" || typeof model !== "string") return undefined;
  const status: StatusResult = {
    backend,
    model,
    trainingSteps: typeof trainingSteps === "number" ? trainingSteps : 0,
    queueDepth: typeof queueDepth === "number" ? queueDepth : 0,
  };
  if (typeof adapterVersion === "string") status.adapterVersion = adapterVersion;
  if (typeof pendingProposalId === "string") status.pendingProposalId = pendingProposalId;
  if (typeof starter === "string") status.starter = starter;
  if (typeof value.autonomy === "string" && AUTONOMY.includes(value.autonomy as Autonomy)) status.autonomy = value.autonomy as Autonomy;
  return status;
}

export function parseDecideResult(value: unknown): DecideResult {
  if (!isRecord(value)) return { ok: false };
  const result: DecideResult = { ok: value.ok === true };
  const learned = value.learned;
  if (isRecord(learned) && typeof learned.step === "number" && typeof learned.loss === "number" && typeof learned.seconds === "number") {
    result.learned = { step: learned.step, loss: learned.loss, seconds: learned.seconds };
  }
  if (typeof value.nextProposalId === "string") result.nextProposalId = value.nextProposalId;
  const next = parseProposal(value.nextProposal);
  if (next) result.nextProposal = next;
  return result;
}

export function parseStartTaskResult(value: unknown): StartTaskResult {
  if (!isRecord(value)) return { taskId: "" };
  const result: StartTaskResult = { taskId: typeof value.taskId === "string" ? value.taskId : "" };
  const proposal = parseProposal(value.proposal);
  if (proposal) result.proposal = proposal;
  return result;
}

export function parseUndoResult(value: unknown): UndoResult {
  if (!isRecord(value) || typeof value.proposalId !== "string") return { ok: false, proposalId: "", restored: [] };
  const restored = Array.isArray(value.restored) ? value.restored.filter((p): p is string => typeof p === "string") : [];
  return { ok: value.ok === true, proposalId: value.proposalId, restored };
}

export function parseAllowResult(value: unknown): AllowResult {
  if (!isRecord(value) || typeof value.itemId !== "string") return { ok: false, itemId: "", rule: "" };
  return { ok: value.ok === true, itemId: value.itemId, rule: typeof value.rule === "string" ? value.rule : "" };
}

export function parsePromoteResult(value: unknown): PromoteResult {
  const lane = isRecord(value) && typeof value.lane === "string" && (LANES as readonly string[]).includes(value.lane) ? (value.lane as Lane) : "NONE";
  if (!isRecord(value) || typeof value.itemId !== "string") return { ok: false, itemId: "", lane, reason: "" };
  return { ok: value.ok === true, itemId: value.itemId, lane, reason: typeof value.reason === "string" ? value.reason : "" };
}

export function parsePending(value: unknown): PendingResult {
  const raw = isRecord(value) && Array.isArray(value.proposals) ? value.proposals : [];
  return { proposals: raw.map(parseProposal).filter((p): p is ProposalNotification => p !== undefined) };
}
