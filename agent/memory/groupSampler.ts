import * as fs from 'node:fs';
import { runMembers, type RunGroup } from '../process/runGroup';

/** Clock ticks per second of /proc's utime and stime (USER_HZ, 100 on every Linux ABI). */
const TICKS = 100;

/**
 * A run's memory and CPU without a cgroup: sums of /proc over the processes of its group, sampled.
 * Peak and CPU are the most seen by any sample, so a short spike between two samples is missed: the
 * figures are marked `sampled`. CPU counts each live member's own time plus what its reaped
 * children had (cutime, cstime), so a child's time is not lost when it exits before the next sample.
 */
export class GroupSampler {
  currentMb = 0;
  peakMb = 0;
  cpuSeconds = 0;

  constructor(private readonly group: RunGroup) {}

  sample(): void {
    let rssKb = 0;
    let ticks = 0;
    for (const pid of runMembers(this.group)) {
      rssKb += readRssKb(pid);
      ticks += readTicks(pid);
    }
    this.currentMb = Math.round((rssKb / 1024) * 10) / 10;
    this.peakMb = Math.max(this.peakMb, this.currentMb);
    this.cpuSeconds = Math.max(this.cpuSeconds, ticks / TICKS);
  }
}

function readRssKb(pid: number): number {
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

function readTicks(pid: number): number {
  try {
    const text = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
    // Fields 14–17 of stat(5) (utime stime cutime cstime), counted from the state (field 3).
    return [11, 12, 13, 14].reduce((sum, i) => sum + (Number(fields[i]) || 0), 0);
  } catch {
    return 0;
  }
}
