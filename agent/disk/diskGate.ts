import * as path from 'node:path';
import type { Change, DiskGateState, DiskStatus, WaitReason } from '../../shared/protocol';
import type { DiskConfig } from '../config/config';
import type { Logger } from '../log/logger';
import { RunRefusedError } from '../errors';
import type { GateRequest, StartGate } from '../runs/startGate';
import { BACKPRESSURE_FLAG, syncBackpressureFlag } from './backpressureFlag';
import { statfsProbe, type DiskProbe } from './diskProbe';
import { BYTES_PER_GB, nextDiskState, nextThreshold, round } from './diskState';
import { Reservations } from './reservations';

export interface DiskGateOptions {
  dataDir: string;
  disk: DiskConfig;
  logger: Logger;
  /** Receives `{kind: 'disk'}` changes (the agent's StateHub). */
  hub?: { publish(change: Change): void };
  probe?: DiskProbe;
}

interface Waiter {
  request: GateRequest;
  resolve(): void;
  reject(err: Error): void;
  onWait(reason: WaitReason): void;
  lastReason: string | null;
  dispose(): void;
}

/**
 * The disk gate in front of every fetcher start (seed 000, section 4, plus admission by expected
 * size). It only decides when a run may start; it never stops a running fetcher.
 */
export class DiskGate implements StartGate {
  private readonly probe: DiskProbe;
  private readonly reservations: Reservations;
  private readonly waiters: Waiter[] = [];
  private current: DiskStatus;
  private freeBytes: number | null = null;
  /** Size of DATA_DIR's filesystem at the last good measurement (it outlives an `unknown` spell). */
  private totalBytes: number | null = null;
  /** Paused and not yet back at the resume level; survives an `unknown` spell (see nextDiskState). */
  private latched = false;
  private measured = false;
  /** The state the flag file was last made to match, null when never or when that failed. */
  private flagState: DiskGateState | null = null;
  private flagError: string | null = null;
  private lastPublished: DiskStatus | null = null;
  private inFlight: Promise<DiskStatus> | null = null;
  private again: Promise<DiskStatus> | null = null;
  private timer: NodeJS.Timeout | null = null;
  private started = false;
  private closed = false;

  constructor(private readonly options: DiskGateOptions) {
    this.probe = options.probe ?? statfsProbe;
    this.reservations = new Reservations(options.dataDir, options.logger);
    this.current = this.statusOf('unknown', null, null, 'not measured yet');
  }

  /** Measures now (never trusting a state saved by an earlier agent) and starts polling. */
  async start(): Promise<DiskStatus> {
    this.started = true;
    return this.checkNow();
  }

  /** Stops polling and refuses the runs still waiting, so the process can exit. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    for (const w of this.waiters.splice(0)) {
      w.dispose();
      w.reject(new RunRefusedError('agent-stopping', 'the agent stopped while the run waited at the disk gate'));
    }
    // A check still writing the flag file must finish before the caller may, say, unmount.
    await (this.again ?? this.inFlight);
  }

  status(): DiskStatus {
    return { ...this.current };
  }

  /** Runs waiting at the gate, in the order they will be served. */
  waiting(): number {
    return this.waiters.length;
  }

  /**
   * Measures free space now and admits what may start. Calls during a check coalesce into one
   * more check after it, so a caller always gets a measurement taken after its call.
   */
  checkNow(): Promise<DiskStatus> {
    if (this.closed) return Promise.resolve(this.status());
    if (this.inFlight) {
      this.again ??= this.inFlight.then(() => {
        this.again = null;
        return this.checkNow();
      });
      return this.again;
    }
    this.inFlight = this.check().finally(() => {
      this.inFlight = null;
      this.arm(true);
    });
    return this.inFlight;
  }

  waitToStart(request: GateRequest, signal: AbortSignal, onWait: (reason: WaitReason) => void): Promise<void> {
    if (signal.aborted) return Promise.reject(abortReason(signal));
    if (this.closed) return Promise.reject(new RunRefusedError('agent-stopping', 'the disk gate is closed'));
    return new Promise<void>((resolve, reject) => {
      const maxWait = this.options.disk.maxWaitSeconds;
      const waiter: Waiter = {
        request,
        resolve,
        reject,
        onWait,
        lastReason: null,
        dispose: () => {
          clearTimeout(timeout);
          signal.removeEventListener('abort', onAbort);
        },
      };
      const leave = () => {
        const i = this.waiters.indexOf(waiter);
        if (i >= 0) this.waiters.splice(i, 1);
        waiter.dispose();
        this.arm();
      };
      // Not unref'd: a waiting run is something the process exists for (an in-process CLI run).
      const timeout = setTimeout(() => {
        leave();
        const s = this.current;
        const message =
          `waited ${maxWait} s (CRON_DISK_MAX_WAIT_SECONDS) at the disk gate: state ${s.state}, ` +
          `free ${s.freeGb ?? 'unknown'} GB, resume at ${s.resumeGb} GB` +
          `${request.expectedBytes ? `, run expects ${round(request.expectedBytes / BYTES_PER_GB)} GB` : ''}${s.error ? `, ${s.error}` : ''}`;
        this.options.logger.warn({ runId: request.runId, fetcher: request.fetcher, state: s.state, freeGb: s.freeGb }, message);
        reject(new RunRefusedError('disk-backpressure-timeout', message));
      }, maxWait * 1000);
      const onAbort = () => {
        leave();
        reject(abortReason(signal));
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.waiters.push(waiter);
      // Refused at once when the last measurement already shows it can never fit.
      this.refuseImpossible();
      this.arm();
      void this.checkNow();
    });
  }

  runStarted(request: GateRequest): void {
    this.reservations.started(request.runId, request.fetcher, request.expectedBytes);
  }

  runEnded(runId: string): void {
    this.reservations.end(runId);
    if (this.waiters.length > 0) void this.checkNow();
  }

  private async check(): Promise<DiskStatus> {
    const { disk, dataDir } = this.options;
    let freeBytes: number | null = null;
    let totalBytes: number | null = null;
    let error: string | null = null;
    try {
      const m = await this.probe(dataDir);
      if (!(Number.isFinite(m.freeBytes) && Number.isFinite(m.totalBytes) && m.freeBytes >= 0 && m.totalBytes > 0)) {
        throw new Error(`the probe returned an impossible measurement (${JSON.stringify(m)})`);
      }
      freeBytes = m.freeBytes;
      totalBytes = m.totalBytes;
    } catch (err) {
      error = `cannot measure free space of DATA_DIR ${dataDir}: ${err instanceof Error ? err.message : String(err)}`;
    }
    const previous = this.measured ? this.current.state : null;
    let state: DiskGateState = 'unknown';
    if (freeBytes !== null) {
      state = nextDiskState(freeBytes / BYTES_PER_GB, this.latched, disk);
      this.latched = state === 'paused';
    }
    this.measured = true;
    const next = this.statusOf(state, freeBytes, totalBytes, error);
    if (state !== previous) this.logTransition(previous, next);
    // The flag first, then the state everyone sees: whoever reads a state other than ok finds
    // the flag in place, and whoever reads ok finds it gone.
    await this.syncFlag(next);
    this.freeBytes = freeBytes;
    if (totalBytes !== null) this.totalBytes = totalBytes;
    this.current = next;
    this.publishIfChanged();
    await this.admit();
    return this.current;
  }

  private async admit(): Promise<void> {
    this.refuseImpossible();
    if (this.waiters.length === 0) return;
    const s = this.current;
    if (s.state === 'paused' || s.state === 'unknown' || this.freeBytes === null) {
      const reason: WaitReason = { kind: 'disk', state: s.state, freeGb: s.freeGb, resumeGb: s.resumeGb };
      for (const w of this.waiters) tell(w, reason);
      return;
    }
    const freeBytes = this.freeBytes;
    const pauseBytes = s.pauseGb * BYTES_PER_GB;
    let outstanding = this.reservations.size() > 0 ? await this.reservations.outstandingBytes() : 0;
    // In arrival order, but a run that does not fit now does not hold back those behind it that do
    // (no head-of-line blocking: one big run must not stop every pool). A big run waits until the
    // space is there, or until CRON_DISK_MAX_WAIT_SECONDS; one that can never fit was refused above.
    const blocked: Waiter[] = [];
    for (const w of this.waiters.splice(0)) {
      const own = w.request.expectedBytes ?? 0;
      if (freeBytes - outstanding - own < pauseBytes) {
        blocked.push(w);
        continue;
      }
      w.dispose();
      this.reservations.add(w.request.runId, w.request.fetcher, w.request.expectedBytes);
      outstanding += own;
      w.resolve();
    }
    this.waiters.push(...blocked);
    const reason: WaitReason = {
      kind: 'admission',
      freeGb: round(freeBytes / BYTES_PER_GB),
      reservedGb: round(outstanding / BYTES_PER_GB),
      pauseGb: s.pauseGb,
    };
    for (const w of blocked) tell(w, reason);
    this.arm();
  }

  /**
   * A run that can never be admitted fails at once with `admission-impossible`: its expected size is
   * more than the whole filesystem of DATA_DIR can hold above the pause level (total size minus
   * CRON_DISK_PAUSE_GB). Nothing running or waiting can change that: fetchers only add data, and even
   * an emptied disk would not make room. (Free space plus what others would release is no such bound:
   * other files can be deleted at any time, so a run that fits the filesystem waits instead.)
   */
  private refuseImpossible(): void {
    const total = this.totalBytes;
    if (total === null) return;
    const pauseBytes = this.options.disk.pauseGb * BYTES_PER_GB;
    for (const w of [...this.waiters]) {
      const own = w.request.expectedBytes ?? 0;
      if (own === 0 || own <= total - pauseBytes) continue;
      this.waiters.splice(this.waiters.indexOf(w), 1);
      w.dispose();
      const message =
        `run expects ${round(own / BYTES_PER_GB)} GB (expectedSizeMb ${Math.round(own / 1024 / 1024)}), but the filesystem of ` +
        `DATA_DIR ${this.options.dataDir} holds ${round(total / BYTES_PER_GB)} GB in total and the gate keeps ${this.options.disk.pauseGb} GB free ` +
        `(CRON_DISK_PAUSE_GB): at most ${round(Math.max(0, total - pauseBytes) / BYTES_PER_GB)} GB can ever be admitted`;
      this.options.logger.warn(
        {
          runId: w.request.runId,
          fetcher: w.request.fetcher,
          expectedGb: round(own / BYTES_PER_GB),
          totalGb: round(total / BYTES_PER_GB),
          pauseGb: this.options.disk.pauseGb,
        },
        message,
      );
      w.reject(new RunRefusedError('admission-impossible', message));
    }
  }

  private logTransition(from: DiskGateState | null, s: DiskStatus): void {
    const { logger } = this.options;
    const fields = { event: 'disk-gate', from, to: s.state, freeGb: s.freeGb, warnGb: s.warnGb, pauseGb: s.pauseGb, resumeGb: s.resumeGb };
    const flag = path.join(this.options.dataDir, BACKPRESSURE_FLAG);
    switch (s.state) {
      case 'ok':
        logger.info(fields, `disk gate ok: ${s.freeGb} GB free`);
        break;
      case 'warn':
        logger.warn(fields, `disk gate warn: ${s.freeGb} GB free, below CRON_DISK_WARN_GB=${s.warnGb}; ${flag} set`);
        break;
      case 'paused':
        logger.warn(
          fields,
          `disk gate paused: ${s.freeGb} GB free (CRON_DISK_PAUSE_GB=${s.pauseGb}); ` +
            `no fetcher starts until ${s.resumeGb} GB are free (CRON_DISK_RESUME_GB)`,
        );
        break;
      case 'unknown':
        logger.error({ ...fields, error: s.error }, `disk gate unknown: no fetcher starts; ${s.error}`);
        break;
    }
  }

  private async syncFlag(s: DiskStatus): Promise<void> {
    // Rewritten on every state change (its content names the state), removed on ok, and retried
    // after a failure (DATA_DIR gone while unknown) until it succeeds. Synced on the first check
    // too: a flag left by an earlier agent or the shell orchestrator must not outlive an ok disk.
    if (this.flagState === s.state) return;
    const error = await syncBackpressureFlag(this.options.dataDir, s.state !== 'ok', {
      state: s.state,
      freeGb: s.freeGb,
      since: s.checkedAt,
      agentPid: process.pid,
    });
    if (error !== null && error !== this.flagError) this.options.logger.warn({ event: 'disk-gate-flag' }, error);
    this.flagError = error;
    this.flagState = error === null ? s.state : null;
  }

  private publishIfChanged(): void {
    const s = this.current;
    const p = this.lastPublished;
    // Not every poll: only a new state or error, or free space moving by 0.1 % of the disk.
    const step = Math.max(0.001, (s.totalGb ?? 0) * 0.001);
    const moved =
      p === null ||
      p.state !== s.state ||
      p.error !== s.error ||
      p.totalGb !== s.totalGb ||
      (s.freeGb !== null && p.freeGb !== null && Math.abs(s.freeGb - p.freeGb) >= step);
    if (!moved) return;
    this.lastPublished = s;
    this.options.hub?.publish({ kind: 'disk', disk: { ...s } });
  }

  /**
   * One poll timer, restarted after each check so polls are CRON_DISK_POLL_SECONDS apart. It holds
   * the process only while runs wait: an idle gate must not keep a CLI process alive, a waiting run
   * must (nothing else would ever release it).
   */
  private arm(restart = false): void {
    if (!this.started || this.closed) return;
    if (restart || this.timer === null) {
      if (this.timer) clearTimeout(this.timer);
      this.timer = setTimeout(() => {
        this.timer = null;
        void this.checkNow();
      }, this.options.disk.pollSeconds * 1000);
    }
    if (this.waiters.length > 0) this.timer.ref();
    else this.timer.unref();
  }

  private statusOf(state: DiskGateState, freeBytes: number | null, totalBytes: number | null, error: string | null): DiskStatus {
    const { disk, dataDir } = this.options;
    const freeGb = freeBytes === null ? null : round(freeBytes / BYTES_PER_GB);
    return {
      state,
      path: dataDir,
      freeGb,
      totalGb: totalBytes === null ? null : round(totalBytes / BYTES_PER_GB),
      warnGb: disk.warnGb,
      pauseGb: disk.pauseGb,
      resumeGb: disk.resumeGb,
      next: nextThreshold(state, freeBytes === null ? null : freeBytes / BYTES_PER_GB, disk),
      error,
      checkedAt: new Date().toISOString(),
    };
  }
}

/** Reports a wait reason only when it changed, so a run's status is not rewritten on every poll. */
function tell(w: Waiter, reason: WaitReason): void {
  const key = JSON.stringify(reason);
  if (key === w.lastReason) return;
  w.lastReason = key;
  w.onWait(reason);
}

function abortReason(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  return reason instanceof Error ? reason : new RunRefusedError('cancelled', 'cancelled while waiting at the disk gate');
}
