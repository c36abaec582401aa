// When the server dies, restart it, unless it keeps dying: at most `maxRestarts` within
// `windowMs`. No `vscode` import.

export class RestartPolicy {
  private readonly crashes: number[] = [];

  constructor(
    readonly maxRestarts = 5,
    readonly windowMs = 3 * 60 * 1000,
  ) {}

  /** Record a crash at `now` (ms) and say whether to restart. */
  onCrash(now: number): boolean {
    this.crashes.push(now);
    while (this.crashes.length > 0 && now - this.crashes[0] > this.windowMs) this.crashes.shift();
    return this.crashes.length <= this.maxRestarts;
  }

  /** Forget past crashes (after a manual restart). */
  reset(): void {
    this.crashes.length = 0;
  }
}
