/**
 * Exit codes of the agent's own helper processes, by name (sysexits(3) values, as agent/exitCodes.ts
 * has for the `quantilica` command). Here, not under agent/runs or agent/slots, because both the
 * agent's side and the helpers use them, and agent/slots may not import agent/runs.
 */

/**
 * The native spawner (agent/native/quantilica-spawner.c #defines the same names as
 * SPAWNER_EXIT_NO_PARENT and so on; test/unit/helperExitCodes.test.ts holds the two to one value).
 * The first three end it before it read any request, so nothing was forked and the agent starts
 * every run from its worker thread instead.
 */
export const SpawnerExit = {
  /** EX_UNAVAILABLE: no pidfd of its parent (a kernel before 5.3), or the agent died before it could take one. */
  noParent: 69,
  /** EX_SOFTWARE: no signalfd, so it could not follow its children. */
  noSignalfd: 70,
  /** EX_NOPERM: the kernel refuses it the agent's descriptors (pidfd_getfd(2)): Yama ptrace_scope >= 1, a seccomp filter, a kernel before 5.6. */
  descriptorsRefused: 77,
  /** EX_OSERR: poll(2) failed in its loop; the runs it started are followed by their group and status file. */
  pollFailed: 71,
} as const;

/** A postgres slot keeper (agent/slots/pgSlotKeeper.ts). */
export const KeeperExit = {
  /** EX_USAGE: started without POOL STATION, or its stdin ended before the slot database URL. */
  usage: 64,
  /** EX_SOFTWARE: it failed (the reason went to the agent as an {"error"} line first). */
  failed: 70,
} as const;
