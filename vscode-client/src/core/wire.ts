// Generated from continual_lsp/protocol.py by vscode-client/scripts/protocol.sh: do not edit.

/**
 * Every payload of the continual/* methods, one definition each.
 */
export interface Wire {
  [k: string]: unknown;
}
/**
 * The reviewer approved calls of this class before: offer "always allow".
 *
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "AllowOffer".
 */
export interface AllowOffer {
  rule: string;
  approvals: number;
}
/**
 * "Always allow calls like this one" (the proposal's command prefix or path class).
 *
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "AllowParams".
 */
export interface AllowParams {
  proposalId: string;
}
/**
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "AllowResult".
 */
export interface AllowResult {
  ok: boolean;
  itemId: string;
  rule: string;
}
/**
 * With `hunks`, the decision follows from them: every hunk accepted is an approve,
 * none a deny (their reasons are the correction), some an edit whose editedArguments
 * hold the accepted hunks and whose correction is the rejected hunks' reasons.
 *
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "DecideParams".
 */
export interface DecideParams {
  proposalId: string;
  decision: "approve" | "deny" | "edit" | "override";
  correction?: string;
  editedArguments?: {
    [k: string]: unknown;
  };
  /**
   * @minItems 1
   */
  hunks?: [HunkDecision, ...HunkDecision[]];
}
/**
 * The reviewer's verdict on one hunk of a file proposal (`Hunk.index`).
 *
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "HunkDecision".
 */
export interface HunkDecision {
  index: number;
  accept: boolean;
  reason?: string;
}
/**
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "DecideResult".
 */
export interface DecideResult {
  ok: boolean;
  learned?: Learned;
  nextProposalId?: string;
  nextProposal?: ProposalNotification;
}
/**
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "Learned".
 */
export interface Learned {
  step: number;
  loss: number;
  seconds: number;
}
/**
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "ProposalNotification".
 */
export interface ProposalNotification {
  proposalId: string;
  taskId: string;
  tool: string;
  arguments: {
    [k: string]: unknown;
  };
  readOnly: boolean;
  uri?: string;
  range?: Range;
  diff?: string;
  note?: string;
  adapterVersion?: string;
  hunks?: Hunk[];
  allowOffer?: AllowOffer;
  blockedBy?: string;
  checked?: string;
}
/**
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "Range".
 */
export interface Range {
  start: Position;
  end: Position;
}
/**
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "Position".
 */
export interface Position {
  line: number;
  character: number;
}
/**
 * One contiguous change of a file proposal, numbered from 0; lines 1-based as in a
 * unified diff header (`oldLines` 0: a pure insertion after `oldStart - 1`).
 *
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "Hunk".
 */
export interface Hunk {
  index: number;
  oldStart: number;
  oldLines: number;
  newStart: number;
  newLines: number;
}
/**
 * A WEIGHTS item's held-out compliance (mean log-prob margin of the compliant over
 * the violating call) under the incumbent adapter and under its consolidation.
 *
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "GateCompliance".
 */
export interface GateCompliance {
  before: number;
  after: number;
  promoted: boolean;
}
/**
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "LearnedNotification".
 */
export interface LearnedNotification {
  proposalId: string;
  step: number;
  loss: number;
  adapterVersion?: string;
  seconds: number;
}
/**
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "LedgerItem".
 */
export interface LedgerItem {
  id: string;
  text: string;
  lane: "CODE" | "WEIGHTS" | "CONTEXT" | "NONE";
  reason: string;
  recurrence: number;
  createdAt: number;
  active: boolean;
  fired?: number;
  recurredAfter?: number;
  gate?: GateCompliance;
  approvals?: string[];
  overridden?: number;
  taskScoped?: boolean;
}
/**
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "LedgerParams".
 */
export interface LedgerParams {}
/**
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "LedgerResult".
 */
export interface LedgerResult {
  items: LedgerItem[];
  contextTokens: number;
  notesOnlyTokens: number;
}
/**
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "NoteParams".
 */
export interface NoteParams {
  text: string;
}
/**
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "OkResult".
 */
export interface OkResult {
  ok: boolean;
}
/**
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "PendingParams".
 */
export interface PendingParams {}
/**
 * What waits for the reviewer in this session: a resync after a reconnect or a lost
 * notification.
 *
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "PendingResult".
 */
export interface PendingResult {
  proposals: ProposalNotification[];
}
/**
 * Make a task-scoped correction (`LedgerItem.taskScoped`) a standing one: routed again
 * through the lanes, it may become a guard, a bullet or a WEIGHTS item.
 *
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "PromoteParams".
 */
export interface PromoteParams {
  itemId: string;
}
/**
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "PromoteResult".
 */
export interface PromoteResult {
  ok: boolean;
  itemId: string;
  lane: "CODE" | "WEIGHTS" | "CONTEXT" | "NONE";
  reason: string;
}
/**
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "RevertParams".
 */
export interface RevertParams {
  itemId: string;
}
/**
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "RoutedNotification".
 */
export interface RoutedNotification {
  itemId: string;
  lane: "CODE" | "WEIGHTS" | "CONTEXT" | "NONE";
  reason: string;
}
/**
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "StartTaskParams".
 */
export interface StartTaskParams {
  text: string;
  /**
   * @maxItems 4
   */
  files?: [] | [string] | [string, string] | [string, string, string] | [string, string, string, string];
}
/**
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "StartTaskResult".
 */
export interface StartTaskResult {
  taskId: string;
  proposal?: ProposalNotification;
}
/**
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "StatusParams".
 */
export interface StatusParams {}
/**
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "StatusResult".
 */
export interface StatusResult {
  backend: string;
  model: string;
  adapterVersion?: string;
  trainingSteps: number;
  queueDepth: number;
  pendingProposalId?: string;
  starter?: string;
  autonomy?: "manual" | "read_only" | "allow_rules" | "workspace_edits";
}
/**
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "TaskDoneNotification".
 */
export interface TaskDoneNotification {
  taskId: string;
  summary: string;
}
/**
 * Undo an applied change (the latest when no id): a late denial; `reason` is its
 * correction.
 *
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "UndoParams".
 */
export interface UndoParams {
  proposalId?: string;
  reason?: string;
}
/**
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "UndoResult".
 */
export interface UndoResult {
  ok: boolean;
  proposalId: string;
  restored: string[];
}
