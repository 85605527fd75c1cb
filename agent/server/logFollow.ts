import * as fs from 'node:fs';
import type { CancellationToken } from 'vscode-jsonrpc';
import { isFinalStatus, type LogChunk, type ReadLog, type RunInfo } from '../../shared/protocol';
import { InvalidArgumentError, UnknownRunError } from '../errors';
import type { AgentControl } from './agentControl';

/** Most bytes in one answer: a follower gets a bounded stream whatever the fetcher floods. */
export const MAX_CHUNK_BYTES = 64 * 1024;
/** Longest a read is held while nothing new arrives; the client simply asks again. */
export const MAX_WAIT_MS = 20_000;
/**
 * How often a held read looks at the file: also the rate cap of a follower, which gets at most one
 * answer per interval once it has caught up.
 */
const POLL_MS = 250;

/**
 * Reads up to `maxBytes` of `file` from `offset` (opened without following a symlink, checked to be a
 * regular file). A cut inside a UTF-8 character is moved back to the character's start, so chunks
 * always decode and the next read starts where this one stopped.
 */
export function readLogBytes(file: string, offset: number, maxBytes: number): { text: string; nextOffset: number; size: number } {
  const fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  try {
    const st = fs.fstatSync(fd);
    if (!st.isFile()) throw new InvalidArgumentError(`${file} is not a regular file`);
    // A log cut by retention or the cap can be shorter than a resumed offset: start over from its end.
    const from = Math.min(offset, st.size);
    const want = Math.min(maxBytes, st.size - from);
    if (want <= 0) return { text: '', nextOffset: from, size: st.size };
    const buf = Buffer.alloc(want);
    const got = fs.readSync(fd, buf, 0, want, from);
    let end = got;
    if (from + got < st.size) end = utf8Boundary(buf, got);
    return { text: buf.subarray(0, end).toString('utf8'), nextOffset: from + end, size: st.size };
  } finally {
    fs.closeSync(fd);
  }
}

function utf8Boundary(buf: Buffer, length: number): number {
  // Step back over continuation bytes (10xxxxxx) to a lead byte; drop that incomplete character.
  let i = length;
  while (i > 0 && i > length - 4 && ((buf[i - 1] ?? 0) & 0xc0) === 0x80) i--;
  if (i > 0 && i > length - 4 && ((buf[i - 1] ?? 0) & 0xc0) === 0xc0) return i - 1;
  return length;
}

function findRun(control: AgentControl, runId: string): RunInfo {
  const run = control.hub.snapshot().runs.find((r) => r.runId === runId) ?? control.listRuns(1000).find((r) => r.runId === runId);
  if (!run) throw new UnknownRunError(runId);
  return run;
}

/** The agent's answer to `quantilica/readLog`: new bytes, or a held answer until some arrive. */
export async function readLog(control: AgentControl, params: ReadLog.Params, cancel: CancellationToken): Promise<LogChunk> {
  const maxBytes = Math.min(params.maxBytes ?? MAX_CHUNK_BYTES, MAX_CHUNK_BYTES);
  const deadline = Date.now() + Math.min(params.waitMs ?? 0, MAX_WAIT_MS);
  for (;;) {
    const run = findRun(control, params.runId);
    const ended = isFinalStatus(run.status);
    const base = { runId: run.runId, fetcher: run.fetcher, status: run.status };
    if (!run.logPath) {
      // A waiting run has no log yet; an ended one without a log never will.
      if (ended || Date.now() >= deadline || cancel.isCancellationRequested)
        return { ...base, offset: params.offset, nextOffset: params.offset, text: '', ended };
    } else {
      const read = readLogBytes(run.logPath, params.offset, maxBytes);
      const caughtUp = read.nextOffset >= read.size;
      if (read.text.length > 0 || ended || Date.now() >= deadline || cancel.isCancellationRequested) {
        return {
          ...base,
          offset: read.nextOffset - Buffer.byteLength(read.text),
          nextOffset: read.nextOffset,
          text: read.text,
          ended: ended && caughtUp,
        };
      }
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}
