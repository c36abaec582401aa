// Generated from continual_lsp/protocol.py by vscode-client/scripts/protocol.sh: do not edit.

/**
 * Every payload of the continual/* methods, one definition each.
 */
export interface Wire {
  [k: string]: unknown;
}
/**
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "DecideParams".
 */
export interface DecideParams {
  proposalId: string;
  decision: "approve" | "deny" | "edit";
  correction?: string;
  editedArguments?: {
    [k: string]: unknown;
  };
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
}
/**
 * This interface was referenced by `Wire`'s JSON-Schema
 * via the `definition` "TaskDoneNotification".
 */
export interface TaskDoneNotification {
  taskId: string;
  summary: string;
}
