import { ErrorCodes, type RunReason } from '../shared/protocol';
import { ExitCode } from './exitCodes';

/** An error a client caused (bad name, bad argument); carries the protocol error code and a CLI exit code. */
export class ClientError extends Error {
  constructor(
    readonly code: number,
    readonly exitCode: number,
    message: string,
  ) {
    super(message);
    this.name = new.target.name;
  }
}

export class UnknownFetcherError extends ClientError {
  constructor(name: string, valid: readonly string[]) {
    super(ErrorCodes.unknownFetcher, ExitCode.unknownName, `unknown fetcher ${JSON.stringify(name)}; valid names: ${valid.join(', ')}`);
  }
}

export class UnknownRunError extends ClientError {
  constructor(id: string) {
    super(ErrorCodes.unknownRun, ExitCode.unknownName, `no active or recent run matches ${JSON.stringify(id)}`);
  }
}

export class InvalidArgumentError extends ClientError {
  constructor(message: string) {
    super(ErrorCodes.invalidArgument, ExitCode.usage, message);
  }
}

/**
 * A gate or the slot wait refused a run; `reason` is a stable token such as `disk-backpressure-timeout`.
 * Here, not in runs/, because the slots and the disk gate throw it and must not depend on the runs.
 */
export class RunRefusedError extends Error {
  constructor(
    readonly reason: RunReason,
    message: string,
  ) {
    super(message);
    this.name = 'RunRefusedError';
  }
}

/** A directory the agent must write (lock dir, DATA_DIR, its home) is not writable. */
export class EnvironmentError extends Error {
  readonly exitCode = ExitCode.cannotWrite;
  constructor(message: string) {
    super(message);
    this.name = 'EnvironmentError';
  }
}
