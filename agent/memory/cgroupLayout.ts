import * as fs from 'node:fs';
import * as path from 'node:path';
import type { CgroupSupport } from './cgroupSupport';

/** The folders of one cgroup (a pool's or a run's) in each hierarchy we use. */
export interface CgroupDirs {
  memory: string;
  /** v1: the matching cpuacct folder; v2: the same folder as memory. */
  cpu: string | null;
  /** v1 only: the matching freezer folder, to stop a run's processes before killing them. */
  freezer: string | null;
}

/** What a cgroup's counters say. Sizes in MB; null where the kernel has no such counter. */
export interface CgroupFigures {
  currentMb: number | null;
  peakMb: number | null;
  cpuSeconds: number | null;
  /** Processes of this cgroup the OOM killer chose (its ceiling, or its pool's, was reached). */
  oomKills: number;
}

/** A v1 run cgroup's figures as the native spawner's waiter read them at the run's end (status file). */
export interface WaiterFigures {
  peakBytes: number;
  cpuNs: number | null;
  oomKills: number;
}

/** The waiter's figures in the agent's units. */
export function fromWaiter(f: WaiterFigures): CgroupFigures {
  return { currentMb: null, peakMb: toMb(f.peakBytes), cpuSeconds: f.cpuNs === null ? null : f.cpuNs / 1e9, oomKills: f.oomKills };
}

type Enforcing = Exclude<CgroupSupport, { kind: 'not-enforced' }>;

const MB = 1024 * 1024;

/**
 * The layout `<base>/<pool>/<runId>` in the memory hierarchy (and on v1 the same names under cpuacct
 * and freezer), and the few files each version reads or writes.
 */
export class CgroupLayout {
  constructor(readonly support: Enforcing) {}

  dirsOf(...parts: string[]): CgroupDirs {
    const s = this.support;
    const memory = path.join(s.base, ...parts);
    if (s.kind === 'cgroup-v2') return { memory, cpu: memory, freezer: null };
    return {
      memory,
      cpu: s.cpuBase ? path.join(s.cpuBase, ...parts) : null,
      freezer: s.freezerBase ? path.join(s.freezerBase, ...parts) : null,
    };
  }

  /** Makes the folders (kept if they exist) and sets the ceiling; `limitMb` null leaves it unlimited. */
  make(dirs: CgroupDirs, limitMb: number | null, parentOfChildren: boolean): void {
    for (const dir of [dirs.memory, dirs.cpu, dirs.freezer]) {
      if (dir === null) continue;
      try {
        fs.mkdirSync(dir);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      }
    }
    this.limit(dirs, limitMb, parentOfChildren);
  }

  /**
   * A run's folders. On v1 a run gets its memory and cpuacct folders; its freezer folder only if it
   * must be killed while processes are left (see kill): most runs end with none, and a folder per run
   * in a third hierarchy was a mkdir, an rmdir and a read more per run. Made on the calling thread: a
   * cgroup's mkdir is ~30 µs of kernel work here, and handing each to libuv's pool cost twice the CPU
   * of the mkdir itself (its threads' wake-ups). Async for its callers, which check after it whether the
   * run was released meanwhile. A new v1 cgroup starts without a ceiling, so one is written only when
   * the run has one or its folder was there already.
   */
  // eslint-disable-next-line @typescript-eslint/require-await
  async makeRun(dirs: CgroupDirs, limitMb: number | null): Promise<void> {
    const made = [dirs.memory, dirs.cpu].map((dir) => {
      if (dir === null) return false;
      try {
        fs.mkdirSync(dir);
        return true;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
        return false;
      }
    });
    if (this.support.kind !== 'cgroup-v2' && limitMb === null && made[0]) return;
    this.limit(dirs, limitMb, false);
  }

  private limit(dirs: CgroupDirs, limitMb: number | null, parentOfChildren: boolean): void {
    if (this.support.kind === 'cgroup-v2') {
      fs.writeFileSync(path.join(dirs.memory, 'memory.max'), limitMb === null ? 'max' : String(limitMb * MB));
      // No swap beyond the ceiling: a run at its ceiling is killed, not slowed to a crawl.
      writeIfPresent(path.join(dirs.memory, 'memory.swap.max'), '0');
      if (parentOfChildren) {
        const offered = fs.readFileSync(path.join(dirs.memory, 'cgroup.controllers'), 'utf8').trim().split(/\s+/);
        fs.writeFileSync(
          path.join(dirs.memory, 'cgroup.subtree_control'),
          ['memory', 'cpu']
            .filter((c) => offered.includes(c))
            .map((c) => `+${c}`)
            .join(' '),
        );
      }
      return;
    }
    const bytes = limitMb === null ? '-1' : String(limitMb * MB);
    // memsw (memory + swap) must stay >= memory: raise it first when there is one, lower it after.
    writeIfPresent(path.join(dirs.memory, 'memory.memsw.limit_in_bytes'), '-1');
    fs.writeFileSync(path.join(dirs.memory, 'memory.limit_in_bytes'), bytes);
    writeIfPresent(path.join(dirs.memory, 'memory.memsw.limit_in_bytes'), bytes);
  }

  /** The files a run's first process writes its pid into, joined by ':' (QUANTILICA_CGROUP_PROCS): not the freezer's (kill). */
  procsFiles(dirs: CgroupDirs): string {
    const dirsToJoin = this.support.kind === 'cgroup-v2' ? [dirs.memory] : [dirs.memory, dirs.cpu];
    return dirsToJoin
      .filter((d): d is string => d !== null)
      .map((d) => path.join(d, 'cgroup.procs'))
      .join(':');
  }

  limitMb(dirs: CgroupDirs): number | null {
    const file = this.support.kind === 'cgroup-v2' ? 'memory.max' : 'memory.limit_in_bytes';
    const n = readNumber(path.join(dirs.memory, file));
    // v1 says "no limit" with a huge number near 2^63.
    return n === null || n >= 2 ** 52 ? null : Math.round(n / MB);
  }

  /** The memory in use now, alone: what a pool's picture shows, read on every publication (usage reads three files). */
  currentMb(dirs: CgroupDirs): number | null {
    return toMb(readNumber(path.join(dirs.memory, this.support.kind === 'cgroup-v2' ? 'memory.current' : 'memory.usage_in_bytes')));
  }

  /** What a running run shows: the memory in use now, the peak and the CPU (three files; its end records the OOM kills). */
  usage(dirs: CgroupDirs): Omit<CgroupFigures, 'oomKills'> {
    return { currentMb: this.currentMb(dirs), peakMb: this.peakMb(dirs), cpuSeconds: this.cpuSeconds(dirs) };
  }

  /** What a run's end records: the peak, the CPU and the OOM kills; the memory in use is of no account then (three files). */
  endFigures(dirs: CgroupDirs): CgroupFigures {
    return { currentMb: null, ...this.totals(dirs) };
  }

  private totals(dirs: CgroupDirs): Omit<CgroupFigures, 'currentMb'> {
    const v2 = this.support.kind === 'cgroup-v2';
    const oomKills = keyed(path.join(dirs.memory, v2 ? 'memory.events' : 'memory.oom_control'), 'oom_kill') ?? 0;
    return { peakMb: this.peakMb(dirs), cpuSeconds: this.cpuSeconds(dirs), oomKills };
  }

  private peakMb(dirs: CgroupDirs): number | null {
    return toMb(readNumber(path.join(dirs.memory, this.support.kind === 'cgroup-v2' ? 'memory.peak' : 'memory.max_usage_in_bytes')));
  }

  private cpuSeconds(dirs: CgroupDirs): number | null {
    if (dirs.cpu === null) return null;
    if (this.support.kind === 'cgroup-v2') {
      const usec = keyed(path.join(dirs.cpu, 'cpu.stat'), 'usage_usec');
      return usec === null ? null : usec / 1e6;
    }
    const ns = readNumber(path.join(dirs.cpu, 'cpuacct.usage'));
    return ns === null ? null : ns / 1e9;
  }

  /** The processes in the cgroup now (an empty list once it is gone). */
  procs(dirs: CgroupDirs): number[] {
    return readProcs(path.join(dirs.memory, 'cgroup.procs'));
  }

  /** Sends a signal to every process of the cgroup (the setsid'd ones too). */
  signal(dirs: CgroupDirs, signal: NodeJS.Signals): number {
    let sent = 0;
    for (const pid of this.procs(dirs)) sent += trySignal(pid, signal);
    return sent;
  }

  /**
   * Kills every process of the cgroup so that none can escape by forking meanwhile: v2 has
   * cgroup.kill; v1 gathers the processes into the run's freezer folder (made now: a run joins only
   * its memory and cpuacct folders), freezes it (a frozen process cannot fork), kills every task and
   * thaws so the kills take effect; without a freezer it kills every listed task until none is left.
   * Returns how many processes were signalled.
   */
  kill(dirs: CgroupDirs): number {
    if (this.support.kind === 'cgroup-v2') {
      const n = this.procs(dirs).length;
      if (n > 0) writeIfPresent(path.join(dirs.memory, 'cgroup.kill'), '1');
      return n;
    }
    // The common case at a run's end: nothing is left. An empty cgroup cannot fill again by forking,
    // so the freeze (two writes to the freezer and a poll, ~20 ms per run on the hot path) is skipped.
    // A freezer folder exists only for a run killed before (or one an older agent made for every run).
    const frozenProcs = dirs.freezer === null ? null : path.join(dirs.freezer, 'cgroup.procs');
    if (this.procs(dirs).length === 0 && (frozenProcs === null || !fs.existsSync(frozenProcs) || readProcs(frozenProcs).length === 0))
      return 0;
    let sent = 0;
    if (dirs.freezer !== null && gather(dirs.memory, dirs.freezer) && freeze(dirs.freezer)) {
      try {
        for (const pid of readProcs(path.join(dirs.freezer, 'cgroup.procs'))) sent += trySignal(pid, 'SIGKILL');
      } finally {
        writeIfPresent(path.join(dirs.freezer, 'freezer.state'), 'THAWED');
      }
    }
    for (let round = 0; round < 100; round++) {
      const pids = this.procs(dirs);
      if (pids.length === 0) break;
      for (const pid of pids) sent += trySignal(pid, 'SIGKILL');
    }
    return sent;
  }

  /**
   * Removes the cgroup's folders; false while processes are still inside. On v2 the cpu folder is the
   * memory folder; on v1 a run has a freezer folder only once it was killed. `waiterRemoved`: the
   * native spawner's waiter removed the memory and cpuacct folders (it says so with its figures).
   * `freezerMayExist` false: the caller knows none was made (a run it started and never killed).
   */
  remove(dirs: CgroupDirs, waiterRemoved = false, freezerMayExist = true): boolean {
    let ok = true;
    for (const dir of new Set([dirs.memory, dirs.cpu, dirs.freezer])) {
      if (dir === null || (dir === dirs.freezer ? !freezerMayExist || !fs.existsSync(dir) : waiterRemoved)) continue;
      try {
        fs.rmdirSync(dir);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') ok = false;
      }
    }
    return ok;
  }

  /** Seconds since the cgroup's folder was made (Infinity when it cannot be told). */
  ageSeconds(dirs: CgroupDirs): number {
    try {
      return (Date.now() - fs.statSync(dirs.memory).ctimeMs) / 1000;
    } catch {
      return Infinity;
    }
  }

  /** The run cgroups under a pool's folder (left by this agent or an earlier one). */
  runsOf(pool: string): string[] {
    try {
      return fs
        .readdirSync(this.dirsOf(pool).memory, { withFileTypes: true })
        .filter((d) => d.isDirectory())
        .map((d) => d.name);
    } catch {
      return [];
    }
  }
}

/**
 * Moves every process of the run's memory cgroup into its freezer cgroup (made if missing), round by
 * round until a round finds none left to move: a child forked meanwhile by a process not yet moved is
 * born in the memory cgroup and moved in the next round; one forked after its parent moved is born in
 * the freezer cgroup. False when the freezer folder cannot be used (then the kill goes on without it).
 */
function gather(memoryDir: string, freezerDir: string): boolean {
  try {
    fs.mkdirSync(freezerDir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') return false;
  }
  const target = path.join(freezerDir, 'cgroup.procs');
  for (let round = 0; round < 100; round++) {
    const inFreezer = new Set(readProcs(target));
    const left = readProcs(path.join(memoryDir, 'cgroup.procs')).filter((pid) => !inFreezer.has(pid));
    if (left.length === 0) return true;
    for (const pid of left) {
      try {
        fs.writeFileSync(target, String(pid));
      } catch {
        // Gone meanwhile (ESRCH), or not ours to move: the kills after the freeze find what is left.
      }
    }
  }
  return true;
}

function freeze(dir: string): boolean {
  const state = path.join(dir, 'freezer.state');
  try {
    fs.writeFileSync(state, 'FROZEN');
  } catch {
    return false;
  }
  // FREEZING turns FROZEN once every task has stopped; a task stuck in the kernel can delay it.
  const deadline = Date.now() + 2000;
  const pause = new Int32Array(new SharedArrayBuffer(4));
  while (Date.now() < deadline) {
    try {
      if (fs.readFileSync(state, 'utf8').trim() === 'FROZEN') return true;
    } catch {
      return false;
    }
    Atomics.wait(pause, 0, 0, 5);
  }
  return true;
}

function trySignal(pid: number, signal: NodeJS.Signals): number {
  if (pid <= 1 || pid === process.pid) return 0;
  try {
    process.kill(pid, signal);
    return 1;
  } catch {
    return 0;
  }
}

function readProcs(file: string): number[] {
  try {
    return fs
      .readFileSync(file, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map(Number)
      .filter((n) => Number.isInteger(n) && n > 0);
  } catch {
    return [];
  }
}

function readNumber(file: string): number | null {
  try {
    const t = fs.readFileSync(file, 'utf8').trim();
    if (t === 'max') return Number.MAX_SAFE_INTEGER;
    const n = Number(t);
    return Number.isFinite(n) ? n : null;
  } catch {
    return null;
  }
}

/** A `key value` line of a flat-keyed file (memory.events, memory.oom_control, cpu.stat). */
function keyed(file: string, key: string): number | null {
  try {
    const m = new RegExp(`^${key} (\\d+)$`, 'm').exec(fs.readFileSync(file, 'utf8'));
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

function toMb(bytes: number | null): number | null {
  return bytes === null || bytes >= 2 ** 52 ? null : Math.round((bytes / MB) * 10) / 10;
}

function writeIfPresent(file: string, text: string): void {
  try {
    fs.writeFileSync(file, text);
  } catch {
    // An optional knob (no swap accounting, an older kernel): nothing to set.
  }
}
