import type { StoredRun } from '../../agent/runs/runStore';

/**
 * A run as the run manager saves it when it ended: queued and started at `startedAt`, ended `seconds`
 * later (skipped runs never started). What a test cares about goes in `fields`.
 */
export function storedRun(
  fields: Pick<StoredRun, 'runId' | 'fetcher' | 'status'> & Partial<StoredRun>,
  startedAt: string = '2026-01-01T00:00:00.000Z',
  seconds = 5,
): StoredRun {
  const start = Date.parse(startedAt);
  const skipped = fields.status === 'skipped';
  return {
    pool: 'network-light',
    trigger: 'schedule',
    args: [],
    enqueuedAt: startedAt,
    startedAt: skipped ? null : startedAt,
    finishedAt: new Date(start + seconds * 1000).toISOString(),
    slot: skipped ? null : 0,
    pid: skipped ? null : 1000,
    exitCode: fields.status === 'completed' ? 0 : fields.status === 'failed' ? 1 : null,
    signal: null,
    reason: fields.status === 'failed' ? 'exit-code' : null,
    wait: null,
    logPath: null,
    startTime: skipped ? null : 10,
    statusFile: null,
    ownerPid: 1,
    ownerStartTime: 1,
    ...fields,
  };
}
