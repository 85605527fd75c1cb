import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Logger } from '../log/logger';

export interface RetentionOptions {
  /** Per-run logs, `<fetcher>-<runId>.log` (QUANTILICA_LOG_DIR). */
  logDir: string;
  /** Exit-status files, `<runId>.exit` (QUANTILICA_HOME/runs). */
  statusDir: string;
  /** Files older than this are removed (QUANTILICA_RETENTION_DAYS). */
  days: number;
  /** At most this many of each kind are kept, the newest (QUANTILICA_RETENTION_RUNS). */
  runs: number;
  /** Run ids whose files must stay: every run still waiting or running, of any process. */
  activeRunIds(): Set<string>;
  /** The run store's rows of ended runs, pruned by the same age and count (telemetry stays). */
  runRows?: { pruneEnded(olderThan: Date, keep: number, active: ReadonlySet<string>): number };
  logger: Logger;
}

/** Once an hour: retention is about days, and a pass reads two directories. */
const RETENTION_INTERVAL_MS = 3600_000;

/** Only files the agent made are touched: a run id is `<base36 time>-<8 hex>` (newRunId). */
const LOG_FILE = /-([0-9a-z]+-[0-9a-f]{8})\.log$/;
const STATUS_FILE = /^([0-9a-z]+-[0-9a-f]{8})(?:\.\d+)?\.exit$/;

/**
 * Keeps the history of ended runs bounded: their log files, exit-status files and rows in the run
 * store are removed when older than the retention age or beyond the newest `runs` of their kind.
 * Runs still waiting or running are never touched (their status file is how a later agent learns
 * their exit code). Telemetry events are not: they leave the spool once flushed.
 * Applied at start and then periodically.
 */
export class Retention {
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly options: RetentionOptions) {}

  start(): void {
    this.applyQuietly();
    this.timer = setInterval(() => this.applyQuietly(), RETENTION_INTERVAL_MS);
    this.timer.unref();
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** One pass; returns how many files and run rows were removed. */
  apply(now = Date.now()): { logs: number; statusFiles: number; runRows: number } {
    const active = this.options.activeRunIds();
    return {
      logs: this.prune(this.options.logDir, LOG_FILE, active, now),
      statusFiles: this.prune(this.options.statusDir, STATUS_FILE, active, now),
      runRows: this.options.runRows?.pruneEnded(new Date(now - this.options.days * 86400_000), this.options.runs, active) ?? 0,
    };
  }

  private applyQuietly(): void {
    try {
      const removed = this.apply();
      if (removed.logs + removed.statusFiles + removed.runRows > 0) {
        this.options.logger.info(
          { event: 'retention', ...removed, days: this.options.days, runs: this.options.runs },
          `retention removed ${removed.logs} run logs, ${removed.statusFiles} exit-status files and ${removed.runRows} ended runs`,
        );
      }
    } catch (err) {
      this.options.logger.warn({ event: 'retention', err: String(err) }, 'retention pass failed; it is tried again later');
    }
  }

  private prune(dir: string, pattern: RegExp, active: Set<string>, now: number): number {
    let names: string[];
    try {
      names = fs.readdirSync(dir);
    } catch {
      return 0;
    }
    const files: Array<{ file: string; mtime: number }> = [];
    for (const name of names) {
      const runId = pattern.exec(name)?.[1];
      if (runId === undefined || active.has(runId)) continue;
      const file = path.join(dir, name);
      try {
        const st = fs.lstatSync(file);
        if (st.isFile()) files.push({ file, mtime: st.mtimeMs });
      } catch {
        // Removed meanwhile.
      }
    }
    files.sort((a, b) => b.mtime - a.mtime);
    const oldest = now - this.options.days * 86400_000;
    let removed = 0;
    files.forEach(({ file, mtime }, i) => {
      if (i < this.options.runs && mtime >= oldest) return;
      try {
        fs.unlinkSync(file);
        removed++;
      } catch {
        // Gone already, or not ours to remove: left for the next pass.
      }
    });
    return removed;
  }
}
