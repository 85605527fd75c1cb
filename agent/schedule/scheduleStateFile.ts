import * as fs from 'node:fs';
import * as path from 'node:path';
import { z } from 'zod';
import type { Logger } from '../log/logger';

/** What survives a restart: which schedules an operator paused. */
export interface PausedState {
  paused: boolean;
  /** May name fetchers no longer in the catalog: kept, so editing the catalog loses nothing. */
  pausedFetchers: string[];
}

const fileSchema = z
  .object({
    version: z.literal(1),
    paused: z.boolean(),
    pausedFetchers: z.array(z.string()),
  })
  .strict();

/** The schedule's pause state in QUANTILICA_HOME/schedule.json. */
export class ScheduleStateFile {
  readonly path: string;

  constructor(
    homeDir: string,
    private readonly logger: Logger,
  ) {
    this.path = path.join(homeDir, 'schedule.json');
  }

  /**
   * The saved state, or nothing paused when there is none. A corrupt file is not fatal: the
   * schedule runs with defaults, the error is logged once with the file name, and the file is
   * moved aside (not deleted) so what it held can still be read.
   */
  load(): PausedState {
    let text: string;
    try {
      text = fs.readFileSync(this.path, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { paused: false, pausedFetchers: [] };
      this.logger.error({ file: this.path, err: String(err) }, `cannot read the schedule state ${this.path}; nothing is paused`);
      return { paused: false, pausedFetchers: [] };
    }
    let problem: string;
    try {
      const parsed = fileSchema.safeParse(JSON.parse(text));
      if (parsed.success) return { paused: parsed.data.paused, pausedFetchers: parsed.data.pausedFetchers };
      problem = parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
    } catch (err) {
      problem = `not valid JSON (${(err as Error).message})`;
    }
    const aside = `${this.path}.corrupt-${Date.now()}`;
    let kept = `moved to ${aside}`;
    try {
      fs.renameSync(this.path, aside);
    } catch (err) {
      kept = `could not be moved aside (${String(err)})`;
    }
    this.logger.error(
      { file: this.path, problem, aside },
      `the schedule state ${this.path} is corrupt (${problem}); using defaults (nothing paused); the file was ${kept}`,
    );
    return { paused: false, pausedFetchers: [] };
  }

  /** Temp file, fsync, rename: a crash leaves the old state or the new one, never half of one. */
  save(state: PausedState): void {
    fs.mkdirSync(path.dirname(this.path), { recursive: true });
    const tmp = `${this.path}.${process.pid}.tmp`;
    const fd = fs.openSync(tmp, 'w', 0o600);
    try {
      fs.writeSync(fd, `${JSON.stringify({ version: 1, ...state }, null, 2)}\n`);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(tmp, this.path);
  }
}
