import type { RunReason } from '../../shared/protocol';
import { EnvironmentError } from '../errors';

/**
 * A shared folder or file that another account could use against us (a link, a foreign owner, a mode
 * that lets others write). The message says what is wrong, why it matters and the command that fixes
 * it; `reason` is the token runs report (`lock-dir-unsafe`, `lock-file-unsafe`, …).
 */
export class UnsafeStationError extends EnvironmentError {
  constructor(
    readonly reason: Extract<RunReason, 'lock-dir-unsafe' | 'lock-file-unsafe' | 'lock-group-unknown'>,
    message: string,
  ) {
    super(message);
    this.name = 'UnsafeStationError';
  }
}
