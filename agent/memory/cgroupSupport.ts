import * as fs from 'node:fs';
import * as path from 'node:path';

/**
 * What this process can use to enforce memory ceilings. `base` is the agent's own folder (created
 * here), under which pools and runs get theirs; on v1 the CPU (cpuacct) and freezer hierarchies are
 * separate mounts with folders of the same name, used when they can be written too.
 */
export type CgroupSupport =
  | { kind: 'cgroup-v2'; base: string }
  | { kind: 'cgroup-v1'; base: string; cpuBase: string | null; freezerBase: string | null }
  | { kind: 'not-enforced'; reason: string };

interface Mount {
  dir: string;
  type: string;
  options: string[];
}

/**
 * Finds the cgroup controllers this process may use, in this order:
 * 1. a delegated cgroup v2 subtree: the process's own v2 cgroup offers `memory` and is writable by us
 *    (a systemd user service with Delegate=yes, a container's namespace root);
 * 2. the v1 memory controller, where we may create our folder (root on a hybrid-hierarchy machine);
 * 3. none: the reason says what was missing (a token), and ceilings are reported as not enforced.
 */
export function detectCgroups(name: string, mountinfo = '/proc/self/mountinfo', selfCgroup = '/proc/self/cgroup'): CgroupSupport {
  let mounts: Mount[];
  let membership: Map<string, string>;
  try {
    mounts = parseMountinfo(fs.readFileSync(mountinfo, 'utf8'));
    membership = parseSelfCgroup(fs.readFileSync(selfCgroup, 'utf8'));
  } catch {
    return { kind: 'not-enforced', reason: 'no-proc-cgroup-info' };
  }
  const reasons: string[] = [];
  const v2 = mounts.find((m) => m.type === 'cgroup2');
  const own = membership.get('');
  if (v2 && own !== undefined) {
    const result = tryV2(path.join(v2.dir, own), name);
    if (typeof result === 'string') reasons.push(result);
    else return result;
  }
  const memory = mounts.find((m) => m.type === 'cgroup' && m.options.includes('memory'));
  if (memory) {
    const base = path.join(memory.dir, name);
    const made = makeOwnDir(base);
    if (made === null) {
      const cpu = mounts.find((m) => m.type === 'cgroup' && m.options.includes('cpuacct'));
      const freezer = mounts.find((m) => m.type === 'cgroup' && m.options.includes('freezer'));
      const cpuBase = cpu && makeOwnDir(path.join(cpu.dir, name)) === null ? path.join(cpu.dir, name) : null;
      const freezerBase = freezer && makeOwnDir(path.join(freezer.dir, name)) === null ? path.join(freezer.dir, name) : null;
      return { kind: 'cgroup-v1', base, cpuBase, freezerBase };
    }
    reasons.push(`cgroup-v1-${made}`);
  } else reasons.push('no-cgroup-v1-memory');
  return { kind: 'not-enforced', reason: reasons[reasons.length - 1] ?? 'no-cgroup' };
}

/**
 * v2: the memory controller must be offered to our cgroup and the folder ours to write. The "no
 * internal processes" rule forbids enabling controllers for children while processes live in the
 * folder, so the agent first moves itself into a leaf `<own>/agent` (what systemd's Delegate=yes
 * services do), then enables memory and cpu for the subtree and makes its folder beside the leaf.
 */
function tryV2(own: string, name: string): CgroupSupport | string {
  let controllers: string[];
  try {
    controllers = fs.readFileSync(path.join(own, 'cgroup.controllers'), 'utf8').trim().split(/\s+/);
  } catch {
    return 'cgroup-v2-unreadable';
  }
  if (!controllers.includes('memory')) return 'cgroup-v2-no-memory-controller';
  try {
    fs.accessSync(path.join(own, 'cgroup.subtree_control'), fs.constants.W_OK);
    fs.accessSync(own, fs.constants.W_OK);
  } catch {
    return 'cgroup-v2-not-delegated';
  }
  try {
    enableV2Subtree(own);
  } catch {
    try {
      const leaf = path.join(own, 'agent');
      fs.mkdirSync(leaf, { recursive: true });
      fs.writeFileSync(path.join(leaf, 'cgroup.procs'), String(process.pid));
      enableV2Subtree(own);
    } catch {
      return 'cgroup-v2-cannot-enable-memory';
    }
  }
  const base = path.join(own, name);
  const made = makeOwnDir(base);
  if (made !== null) return `cgroup-v2-${made}`;
  try {
    enableV2Subtree(base);
  } catch {
    return 'cgroup-v2-cannot-enable-memory';
  }
  return { kind: 'cgroup-v2', base };
}

/** Lets the children of a v2 folder have memory (and cpu, when offered) limits and counters. */
export function enableV2Subtree(dir: string): void {
  const offered = fs.readFileSync(path.join(dir, 'cgroup.controllers'), 'utf8').trim().split(/\s+/);
  const wanted = ['memory', 'cpu'].filter((c) => offered.includes(c));
  fs.writeFileSync(path.join(dir, 'cgroup.subtree_control'), wanted.map((c) => `+${c}`).join(' '));
}

/** Makes (or finds) a cgroup folder of ours; returns null, or a reason token when it cannot. */
function makeOwnDir(dir: string): string | null {
  try {
    fs.mkdirSync(dir);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== 'EEXIST') return code === 'EACCES' || code === 'EPERM' || code === 'EROFS' ? 'not-writable' : 'mkdir-failed';
  }
  try {
    const st = fs.lstatSync(dir);
    // A folder someone else made under our name is not ours to put runs into.
    if (!st.isDirectory() || st.uid !== process.getuid?.()) return 'not-owned';
    fs.accessSync(dir, fs.constants.W_OK);
    return null;
  } catch {
    return 'not-writable';
  }
}

function parseMountinfo(text: string): Mount[] {
  const mounts: Mount[] = [];
  for (const line of text.split('\n')) {
    const [left, right] = line.split(' - ');
    if (!left || !right) continue;
    const fields = left.split(' ');
    const tail = right.split(' ');
    const dir = fields[4];
    if (!dir || !tail[0]) continue;
    mounts.push({ dir: unescapeMount(dir), type: tail[0], options: [...(fields[5] ?? '').split(','), ...(tail[2] ?? '').split(',')] });
  }
  return mounts;
}

function unescapeMount(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_m, oct: string) => String.fromCharCode(parseInt(oct, 8)));
}

/** /proc/self/cgroup: `id:controllers:path`; v2's line has empty controllers (key ''). */
function parseSelfCgroup(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of text.split('\n')) {
    const m = /^\d+:([^:]*):(.*)$/.exec(line);
    if (!m) continue;
    for (const c of m[1].split(',')) out.set(c, m[2]);
  }
  return out;
}
