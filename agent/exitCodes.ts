/**
 * Exit codes of the `quantilica` command (documented in the README). `run` otherwise exits with the
 * fetcher's own exit code; sysexits(3) values keep the agent's own outcomes apart from common
 * fetcher codes.
 */
export const ExitCode = {
  ok: 0,
  /** `service status`: the unit is not active (as `systemctl is-active` exits). */
  serviceNotActive: 3,
  usage: 64,
  unknownName: 65,
  agentUnavailable: 69,
  cannotWrite: 73,
  waitTimeout: 75,
  config: 78,
  cancelled: 80,
  refused: 81,
  /** A GitHub sync completed, but some repositories were not reached (their reasons are in its status). */
  notReached: 82,
} as const;
