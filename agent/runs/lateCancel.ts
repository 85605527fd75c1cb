import * as fs from 'node:fs';
import { readProcInfo } from '../../shared/node/procInfo';

/** How often a cancelled run's group is looked at for a fetcher that its wrapper started late. */
export const LATE_CANCEL_POLL_MS = 50;

/**
 * Delivers a cancel's SIGTERM to a fetcher that did not exist yet when it was sent. Under the shell
 * wrapper (runWrapper.sh: the thread spawner, a CLI's run) the group the agent signals exists from
 * the spawn on, but the fetcher is only exec'd later by the wrapper's subshell; a SIGTERM that came
 * before was taken by the wrappers' traps (they wait for the fetcher, as they must), the fetcher then
 * started without it, and only the grace period's SIGKILL ended it (`sleep 300` took the whole grace).
 *
 * So, after the group's SIGTERM, each member that is not a wrapper shell and whose parent is one (the
 * fetcher, once exec'd) and that was not already past its exec when the SIGTERM went out gets its
 * own SIGTERM, once. Processes the fetcher starts itself (its cleanup after the SIGTERM) are never
 * signalled again. The native spawner execs the fetcher before it names the group, so it has no
 * wrapper shells and nothing is ever sent twice.
 */
export class LateCancel {
  private readonly done = new Set<string>();

  /** `members` are the group's processes listed right before its SIGTERM (see RunUpkeep.terminate). */
  constructor(
    private readonly wrapperPath: string,
    members: number[],
  ) {
    for (const pid of members) {
      const key = this.fetcherKey(pid);
      if (key !== null) this.done.add(key);
    }
  }

  /** One look at the group's members now; returns how many got their SIGTERM. */
  deliver(members: number[]): number {
    let sent = 0;
    for (const pid of members) {
      const key = this.fetcherKey(pid);
      if (key === null || this.done.has(key)) continue;
      this.done.add(key);
      try {
        process.kill(pid, 'SIGTERM');
        sent++;
      } catch {
        // Ended meanwhile.
      }
    }
    return sent;
  }

  /** Whether any wrapper shell of the run lives (only then can a fetcher still appear late). */
  wrappersLeft(members: number[]): boolean {
    return members.some((pid) => this.isWrapper(pid));
  }

  /** `pid:starttime` of a member that is a fetcher a wrapper shell started; null for anything else. */
  private fetcherKey(pid: number): string | null {
    const info = readProcInfo(pid);
    if (info === null || info.state === 'Z' || this.isWrapper(pid) || !this.isWrapper(info.ppid)) return null;
    return `${pid}:${info.startTime}`;
  }

  /** A shell running the wrapper (its outer shell, its subshell, or a fork not yet exec'd). */
  private isWrapper(pid: number): boolean {
    let cmdline: string;
    try {
      cmdline = fs.readFileSync(`/proc/${pid}/cmdline`, 'latin1');
    } catch {
      return false;
    }
    // `/bin/bash -p runWrapper.sh …` (its shebang), `sh runWrapper.sh …`, or the script itself.
    return cmdline.split('\0', 3).includes(this.wrapperPath);
  }
}
