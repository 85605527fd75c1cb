import { ErrorCodes } from '../shared/protocol';

/** An error a client caused (bad name, bad argument); carries the protocol error code and a CLI exit code. */
export class ClientError extends Error {
  constructor(readonly code: number, readonly exitCode: number, message: string) {
    super(message);
    this.name = new.target.name;
  }
}

export class UnknownFetcherError extends ClientError {
  constructor(name: string, valid: readonly string[]) {
    super(ErrorCodes.unknownFetcher, 3, `unknown fetcher ${JSON.stringify(name)}; valid names: ${valid.join(', ')}`);
  }
}

export class UnknownRunError extends ClientError {
  constructor(id: string) {
    super(ErrorCodes.unknownRun, 3, `no active or recent run matches ${JSON.stringify(id)}`);
  }
}

export class InvalidArgumentError extends ClientError {
  constructor(message: string) {
    super(ErrorCodes.invalidArgument, 2, message);
  }
}
