// Editable in-memory documents (scheme `continual-edit`) where the reviewer rewrites a
// proposal before submitting it. A file system provider, so the editor treats them like files
// (undo, save, language by extension) without touching the workspace on disk.

import * as vscode from "vscode";
import { EDIT_SCHEME, parseProposalDocPath, proposalDocPath } from "./core/proposalUri";

export class EditDocuments implements vscode.FileSystemProvider, vscode.Disposable {
  private readonly files = new Map<string, { data: Uint8Array; mtime: number; ctime: number }>();
  private readonly emitter = new vscode.EventEmitter<vscode.FileChangeEvent[]>();
  readonly onDidChangeFile = this.emitter.event;

  static uri(proposalId: string, filePath: string): vscode.Uri {
    return vscode.Uri.from({ scheme: EDIT_SCHEME, path: proposalDocPath(proposalId, filePath) });
  }

  static proposalId(uri: vscode.Uri): string | undefined {
    return uri.scheme === EDIT_SCHEME ? parseProposalDocPath(uri.path)?.proposalId : undefined;
  }

  create(proposalId: string, filePath: string, content: string): vscode.Uri {
    const uri = EditDocuments.uri(proposalId, filePath);
    const now = Date.now();
    this.files.set(uri.path, { data: new TextEncoder().encode(content), ctime: now, mtime: now });
    this.emitter.fire([{ type: vscode.FileChangeType.Changed, uri }]);
    return uri;
  }

  remove(uri: vscode.Uri): void {
    if (this.files.delete(uri.path)) this.emitter.fire([{ type: vscode.FileChangeType.Deleted, uri }]);
  }

  uris(): vscode.Uri[] {
    return [...this.files.keys()].map((path) => vscode.Uri.from({ scheme: EDIT_SCHEME, path }));
  }

  // -- FileSystemProvider --------------------------------------------------------------------

  watch(): vscode.Disposable {
    return new vscode.Disposable(() => undefined);
  }

  stat(uri: vscode.Uri): vscode.FileStat {
    const file = this.files.get(uri.path);
    if (file) return { type: vscode.FileType.File, ctime: file.ctime, mtime: file.mtime, size: file.data.byteLength };
    if ([...this.files.keys()].some((path) => path.startsWith(`${uri.path.replace(/\/$/, "")}/`))) {
      return { type: vscode.FileType.Directory, ctime: 0, mtime: 0, size: 0 };
    }
    throw vscode.FileSystemError.FileNotFound(uri);
  }

  readDirectory(): [string, vscode.FileType][] {
    return [];
  }

  createDirectory(): void {
    throw vscode.FileSystemError.NoPermissions("continual-edit holds files only");
  }

  readFile(uri: vscode.Uri): Uint8Array {
    const file = this.files.get(uri.path);
    if (!file) throw vscode.FileSystemError.FileNotFound(uri);
    return file.data;
  }

  writeFile(uri: vscode.Uri, content: Uint8Array): void {
    const file = this.files.get(uri.path);
    if (!file) throw vscode.FileSystemError.NoPermissions("this proposal is no longer being edited");
    file.data = content;
    file.mtime = Date.now();
    this.emitter.fire([{ type: vscode.FileChangeType.Changed, uri }]);
  }

  delete(uri: vscode.Uri): void {
    this.remove(uri);
  }

  rename(): void {
    throw vscode.FileSystemError.NoPermissions("continual-edit files cannot be renamed");
  }

  dispose(): void {
    this.emitter.dispose();
    this.files.clear();
  }
}
