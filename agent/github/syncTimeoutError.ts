/**
 * The abort reason of a leg whose sync used up its working time (the entry's timeoutSeconds): the leg
 * stops as for a cancel, but the sync ends `failed` with reason `timeout`.
 */
export class SyncTimeoutError extends Error {
  readonly reason = 'timeout';
  constructor(readonly timeoutSeconds: number) {
    super(`the sync worked for its timeout (${timeoutSeconds} s, hibernations not counted) and was stopped`);
    this.name = 'SyncTimeoutError';
  }
}
