// Paths of the virtual documents that show a proposal: `/<proposalId>/<workspace path>`, so the
// tab shows the file name and the language is detected from its extension. No `vscode` import.

export const PROPOSAL_SCHEME = "continual-proposal";
export const EDIT_SCHEME = "continual-edit";

/** Which side of the diff a virtual document holds. */
export type Side = "proposed" | "original";

export interface ProposalDocRef {
  proposalId: string;
  filePath: string;
  side: Side;
}

export function proposalDocPath(proposalId: string, filePath: string): string {
  const clean = filePath.replace(/\\/g, "/").replace(/^\/+/, "");
  return `/${encodeURIComponent(proposalId)}/${clean}`;
}

export function parseProposalDocPath(path: string, query = ""): ProposalDocRef | undefined {
  const match = /^\/([^/]+)\/(.+)$/.exec(path);
  if (!match) return undefined;
  const side: Side = query === "original" ? "original" : "proposed";
  return { proposalId: decodeURIComponent(match[1]), filePath: match[2], side };
}
