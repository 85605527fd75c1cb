import Database from 'better-sqlite3';
import * as fs from 'node:fs';
import * as path from 'node:path';

/** The hierarchies the agent's cgroups live in on this machine (v1 hybrid; v2 unified with memory). */
const ROOTS = ['/sys/fs/cgroup/memory', '/sys/fs/cgroup/cpuacct', '/sys/fs/cgroup/freezer', '/sys/fs/cgroup/unified', '/sys/fs/cgroup'];

/** A cgroup folder name of our own per test file and process, so parallel tests never share pools. */
export function uniqueCgroupName(tag: string): string {
  return `qt-${tag}-${process.pid}`;
}

/** The memory-controller folder of a cgroup path under the agent's base (`name/pool/runId`). */
export function memoryCgroup(...parts: string[]): string {
  return path.join('/sys/fs/cgroup/memory', ...parts);
}

/** Every folder under `name` in every hierarchy, deepest first. */
export function cgroupFolders(name: string): string[] {
  const out: string[] = [];
  const walk = (dir: string): void => {
    let entries: fs.Dirent[];
    try {
      entries = fs.readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) if (e.isDirectory()) walk(path.join(dir, e.name));
    out.push(dir);
  };
  for (const root of ROOTS) if (fs.existsSync(path.join(root, name))) walk(path.join(root, name));
  return out;
}

/** Kills what is left in a test's cgroups and removes them (cgroup folders are removed with rmdir). */
export function removeCgroupTree(name: string): void {
  for (const dir of cgroupFolders(name)) {
    try {
      for (const pid of fs.readFileSync(path.join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean)) {
        try {
          process.kill(Number(pid), 'SIGKILL');
        } catch {
          // Gone already.
        }
      }
    } catch {
      // Not a cgroup folder we can read.
    }
  }
  for (let attempt = 0; attempt < 50; attempt++) {
    let left = 0;
    for (const dir of cgroupFolders(name)) {
      try {
        fs.rmdirSync(dir);
      } catch {
        left++;
      }
    }
    if (left === 0) return;
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20);
  }
}

/** The payload of a run's finish event in a spool file. */
export function finishPayload(spool: string, runId: string): Record<string, unknown> | null {
  const db = new Database(spool, { readonly: true });
  try {
    db.pragma('busy_timeout = 10000');
    const row = db.prepare(`SELECT payload FROM event WHERE run_id = ? AND event = 'finish'`).get(runId) as { payload: string } | undefined;
    return row ? (JSON.parse(row.payload) as Record<string, unknown>) : null;
  } finally {
    db.close();
  }
}
