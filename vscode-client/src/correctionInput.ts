// Ask the reviewer why a proposal is wrong: type a correction, or pick a chip (recent
// corrections first, then common ones). Resolves to undefined when dismissed.

import * as vscode from "vscode";
import { correctionChips, describeProposal } from "./core/describe";
import type { ProposalNotification } from "./core/protocol";

interface Choice extends vscode.QuickPickItem {
  correction: string;
}

export function askCorrection(proposal: ProposalNotification, recent: readonly string[]): Promise<string | undefined> {
  const chips: Choice[] = correctionChips(proposal, recent).map((text) => ({
    label: text,
    correction: text,
    description: recent.includes(text) ? "recent" : "",
  }));
  const pick = vscode.window.createQuickPick<Choice>();
  pick.title = `Deny ${describeProposal(proposal)}`;
  pick.placeholder = "Type what the agent should do instead (Enter sends it), or pick a common correction";
  pick.ignoreFocusOut = true;
  pick.matchOnDescription = false;
  pick.items = chips;

  const typed = (value: string): Choice => ({
    label: value,
    correction: value,
    description: "your correction",
    iconPath: new vscode.ThemeIcon("comment"),
    alwaysShow: true,
  });

  return new Promise((resolve) => {
    let settled = false;
    const finish = (value: string | undefined) => {
      if (settled) return;
      settled = true;
      resolve(value);
      pick.dispose();
    };
    pick.onDidChangeValue((value) => {
      const text = value.trim();
      pick.items = text ? [typed(text), ...chips.filter((chip) => chip.correction !== text)] : chips;
      if (text) pick.activeItems = [pick.items[0]];
    });
    pick.onDidAccept(() => {
      const chosen = pick.activeItems[0] ?? pick.selectedItems[0];
      const text = (chosen?.correction ?? pick.value).trim();
      if (text) finish(text);
    });
    pick.onDidHide(() => finish(undefined));
    pick.show();
  });
}
