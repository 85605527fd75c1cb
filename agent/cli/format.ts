import { reasonWords } from '../../shared/humanWords';
import { isFinalStatus, type PoolState, type RunInfo, type Snapshot } from '../../shared/protocol';
import { oomWarning } from '../memory/oomWarning';
import { runPolicyText } from './runPolicyText';
import { moment } from './timeText';

/** Human-readable views of the state; `--json` prints the protocol types instead. */
export function formatSlots(pools: PoolState[]): string {
  const lines: string[] = [];
  for (const pool of pools) {
    lines.push(`${pool.name}  ${pool.used}/${pool.size} used, ${pool.waiting} waiting${poolMemory(pool)}`);
    for (const slot of pool.slots) {
      const h = slot.holder;
      const who = h
        ? `pid ${h.pid}${h.fetcher ? ` ${h.fetcher}` : ''}${h.runId ? ` run ${h.runId}` : ''}${h.since ? ` since ${moment(h.since)}` : ''}${h.station !== undefined ? ` on ${h.station}` : ''}${h.foreign ? ' (other process)' : ''}`
        : 'free';
      lines.push(`  ${slot.lockPath}  ${who}${slot.index >= pool.size ? '  (beyond the pool size)' : ''}`);
    }
  }
  return `${lines.join('\n')}\n`;
}

export function formatRuns(runs: RunInfo[]): string {
  if (runs.length === 0) return 'no runs\n';
  const rows = runs.map((r) => [
    r.runId,
    r.fetcher,
    r.pool,
    r.status,
    r.exitCode === null ? '-' : String(r.exitCode),
    moment(r.startedAt ?? r.enqueuedAt),
    runMemory(r),
    r.cpuSeconds == null ? '-' : r.cpuSeconds.toFixed(1),
    withPolicy(r, reasonCell(r, waitText(r))),
  ]);
  const head = ['RUN', 'FETCHER', 'POOL', 'STATUS', 'EXIT', 'SINCE', 'MEM MB', 'CPU S', 'REASON'];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i].length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i]))
      .join('  ')
      .trimEnd();
  return `${[line(head), ...rows.map(line)].join('\n')}\n`;
}

export function formatStatus(s: Snapshot, remote: boolean): string {
  const out: string[] = [];
  out.push(
    `agent: ${remote ? `running, pid ${s.agent.pid} since ${moment(s.agent.startedAt)}` : 'not running (this view is read by the CLI itself)'}; mode ${s.agent.mode}`,
  );
  out.push(`data: ${s.agent.dataDir}   locks: ${s.agent.lockDir}`);
  const other = s.agent.otherMode;
  if (other) {
    const held = [...other.lockFiles, ...other.runs.map((id) => `run ${id}`)].join(', ');
    out.push(
      `mode: WARNING the ${other.mode} mode is in use beside this ${s.agent.mode} view (${held}); the two modes' locks do not exclude each other: give every agent, CLI and cron job the same CRON_USE_POOLS (${other.mode === 'pools' ? 'true' : 'false'} for those)`,
    );
  }
  const mem = s.agent.memory;
  if (mem) {
    // memory ceilings: said plainly when they are not enforced, or overcommit the machine.
    out.push(
      mem.kind === 'not-enforced'
        ? `memory: ceilings NOT ENFORCED (${mem.reason ?? 'unknown'}); run memory is sampled`
        : `memory: ceilings enforced (${mem.kind})`,
    );
    if (mem.budgetWarning) out.push(`memory: WARNING ${mem.budgetWarning}`);
  }
  const slots = s.agent.slotBackend;
  if (slots) {
    const state =
      slots.state === 'ok'
        ? 'reachable'
        : slots.state === 'connection-cap'
          ? 'AT ITS CONNECTION CAP (runs wait)'
          : 'UNREACHABLE (runs wait)';
    out.push(`slot database: ${state}${slots.error && slots.state !== 'ok' ? ` — ${slots.error}` : ''}`);
    if (slots.publicConnect)
      out.push(
        'slot database: WARNING any role may connect (PUBLIC has CONNECT) and take its advisory locks; REVOKE CONNECT ON DATABASE … FROM PUBLIC',
      );
  }
  if (s.disk) {
    const next = s.disk.next ? `, ${s.disk.next.distanceGb} GB to ${s.disk.next.threshold} (${s.disk.next.gb} GB)` : '';
    out.push(`disk: ${s.disk.state}, ${s.disk.freeGb ?? '?'} GB free${next}${s.disk.error ? ` — ${s.disk.error}` : ''}`);
  }
  if (s.spool) {
    const sp = s.spool;
    out.push(
      `telemetry: ${sp.pending} spooled, database ${sp.database}${sp.lastFlushAt ? `, last flush ${moment(sp.lastFlushAt)}` : ''}${sp.lastFlushError ? `, last error: ${sp.lastFlushError}` : ''}${sp.lost > 0 ? `, ${sp.lost} EVENTS LOST` : ''}`,
    );
  }
  out.push(formatSlots(s.pools).trimEnd());
  const active = s.runs.filter((r) => !isFinalStatus(r.status));
  out.push(`active runs: ${active.length}`);
  if (active.length > 0) out.push(formatRuns(active).trimEnd());
  // An OOM kill inside a run that exited 0 is seen here too, not only in `runs`.
  for (const r of s.runs.filter((x) => x.oomKills && isFinalStatus(x.status)).slice(0, 5)) {
    out.push(
      `memory: ${oomWarning(r.oomKills!)}: run ${r.runId} (${r.fetcher}) ended ${r.status}${r.exitCode === null ? '' : ` ${r.exitCode}`} at ${r.finishedAt ?? '?'}`,
    );
  }
  if (s.schedule) {
    const next = s.schedule.entries
      .filter((e) => e.nextDue && !e.paused)
      .sort((a, b) => a.nextDue!.localeCompare(b.nextDue!))
      .slice(0, 5);
    out.push(
      `schedule: ${s.schedule.paused ? 'PAUSED' : 'active'}; next: ${next.map((e) => `${e.fetcher} ${moment(e.nextDue!)}`).join(', ') || 'none'}`,
    );
    const late = s.schedule.entries.filter((e) => e.lateSince);
    if (late.length > 0)
      out.push(
        `late: ${late.map((e) => `${e.fetcher} LATE since ${moment(e.lateSince!)} (no completed run within ${e.lateAfterMinutes} min of a due time; last success ${e.lastSuccessAt ? moment(e.lastSuccessAt) : 'never'})`).join('; ')}`,
      );
  }
  return `${out.join('\n')}\n`;
}

// memory ceilings
function poolMemory(pool: PoolState): string {
  const m = pool.memory;
  if (!m) return '';
  return `, memory ${m.usedMb === null ? '?' : Math.round(m.usedMb)}/${m.ceilingMb} MB${m.enforcement === 'not-enforced' ? ' (not enforced)' : ''}`;
}

/** The REASON cell: the reason or the wait, and an OOM warning whatever the exit. */
export function reasonCell(r: RunInfo, fallback: string | null): string {
  const text = reasonWords(r.reason) || fallback || '';
  return r.oomKills ? `${text}${text ? '; ' : ''}${oomWarning(r.oomKills)}` : text;
}

/** Now/ceiling while running; the peak once ended (`~` when sampled from /proc). */
export function runMemory(r: RunInfo): string {
  const mark = r.memorySource === 'sampled' ? '~' : '';
  const limit = r.memoryLimitMb ? `/${r.memoryLimitMb}` : '';
  if (r.status === 'running' && r.memoryMb != null) return `${mark}${Math.round(r.memoryMb)}${limit}`;
  if (r.peakMemoryMb != null) return `${mark}peak ${Math.round(r.peakMemoryMb)}${limit}`;
  return '-';
}

/** A run's reason (or wait) followed by what its retries, timeout and stall watchdog say. */
export function withPolicy(r: RunInfo, text: string): string {
  const policy = runPolicyText(r);
  if (policy === '') return text;
  // The policy's words already say what a retry wait, a timeout or a stall is.
  const said = r.wait?.kind === 'retry' || r.reason === 'retry-backoff' || r.reason === 'timeout' || r.reason === 'stalled';
  return said || text === '' ? policy : `${text} · ${policy}`;
}

/** What a waiting run waits for, in words; null when it waits for nothing in particular. */
export function waitText(r: RunInfo): string | null {
  const w = r.wait;
  if (!w) return null;
  switch (w.kind) {
    case 'pool':
      return `waiting for a slot, position ${w.position}`;
    case 'disk':
      return `disk ${w.state}: ${w.freeGb ?? '?'} GB free, resumes at ${w.resumeGb} GB`;
    case 'admission':
      return `admission: ${w.freeGb} GB free, ${w.reservedGb} GB reserved`;
    case 'hibernating':
      return `hibernating until ${moment(w.until)}`;
    case 'retry':
      return `try ${w.attempt} at ${moment(w.until)}`;
    case 'slot-backend':
      return w.cause === 'connection-cap' ? 'slot database at its connection cap' : 'slot database unreachable';
    case 'storage':
      return `waiting for its storage (${w.cause === 'disk-full' ? 'disk full' : 'unreachable'}) since ${moment(w.since)}`;
  }
}
