// The protocol's messages, each declared once: its literal method name, a one-line comment saying
// who sends it, the zod schema the agent checks its params with (the params type is inferred from
// it), its result and its vscode-jsonrpc `RequestType`/`NotificationType` constant. Every sender and
// receiver passes that constant, so params and results are checked where they are used.
//
// `REQUESTS` lists every request by method; the agent's handler table is typed over it and its
// validation looks the schema up in it, so a request cannot exist in one of them only.
//
// A client may name a catalog fetcher and pass arguments as data, never a path or a command line.

import { NotificationType, ProgressType, RequestType, RequestType0 } from 'vscode-jsonrpc';
import { z } from 'zod';
import {
  FETCHER_NAME,
  type ChangedParams,
  type FlushProgress,
  type LogChunk,
  type NumberedOperatorEvent,
  type RunInfo,
  type ScheduleStatus,
  type Snapshot,
  type StationHistory,
} from './protocolTypes';

const fetcherName = z
  .string()
  .regex(FETCHER_NAME, 'must be a catalog fetcher name: lowercase letters, digits, ".", "_" or "-", at most 64, no path characters');
const runId = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/, 'must be a run id as the agent reports it (letters, digits, ".", "_", ":" or "-")');
/** Arguments reach the fetcher as argv entries (never through a shell); bounded so a run record stays small. */
const fetcherArg = z
  .string()
  .max(4096)
  .refine((a) => !a.includes('\0'), 'must not contain NUL bytes');
/** Params a client may leave out (absent, `null`); the handler sees `undefined` for both. */
const omittable = <T extends z.ZodTypeAny>(schema: T) => z.union([z.undefined(), z.null().transform(() => undefined), schema]);
/** A request without params: absent, `null` or `{}`. */
const noParams = omittable(z.object({}).strict()).transform(() => undefined);

export namespace Hello {
  // client → agent, first message: protocol version check; answers with the current snapshot.
  export const method = 'quantilica/hello' as const;
  export const params = z
    .object({
      protocolVersion: z.number().int().nonnegative(),
      client: z.string().min(1).max(200),
    })
    .strict();
  export type Params = z.infer<typeof params>;
  export interface Result {
    protocolVersion: number;
    snapshot: Snapshot;
  }
  export const type = new RequestType<Params, Result, void>(method);
}

export namespace Initialize {
  // client → agent: LSP's lifecycle handshake, which vscode-languageclient sends before anything
  // else. The agent has no LSP capabilities; `quantilica/hello` follows and does the real handshake.
  export const method = 'initialize' as const;
  /** LSP's InitializeParams are large and the agent reads none of them: an object is all it checks. */
  export const params = z.object({}).passthrough();
  export type Params = z.infer<typeof params>;
  export interface Result {
    capabilities: Record<string, never>;
    serverInfo: { name: string; version: string };
  }
  export const type = new RequestType<Params, Result, void>(method);
}

export namespace Shutdown {
  // client → agent: LSP's lifecycle end (vscode-languageclient's stop); the agent goes on serving others.
  export const method = 'shutdown' as const;
  export const params = noParams;
  export const type = new RequestType0<null, void>(method);
}

export namespace GetSnapshot {
  // client → agent: the whole state (used to resynchronise after a gap in versions).
  export const method = 'quantilica/snapshot' as const;
  export const params = noParams;
  export type Result = Snapshot;
  export const type = new RequestType0<Result, void>(method);
}

export namespace RunFetcher {
  // client → agent: enqueue a run of a catalog fetcher (by name, never a command line).
  export const method = 'quantilica/run' as const;
  export const params = z
    .object({
      fetcher: fetcherName,
      // 64 for a fetcher (validateArgs); a GitHub sync's repositories may be many more (the frame cap bounds them).
      args: z.array(fetcherArg).max(10000).optional(),
      trigger: z.enum(['cli', 'protocol']).optional(),
    })
    .strict();
  export type Params = z.infer<typeof params>;
  export interface Result {
    run: RunInfo;
  }
  export const type = new RequestType<Params, Result, void>(method);
}

export namespace WaitRun {
  // client → agent: resolves when the run has finished (completed, failed, cancelled, skipped).
  export const method = 'quantilica/waitRun' as const;
  export const params = z.object({ runId }).strict();
  export type Params = z.infer<typeof params>;
  export interface Result {
    run: RunInfo;
  }
  export const type = new RequestType<Params, Result, void>(method);
}

export namespace CancelRun {
  // client → agent: cancel a run by id, or every active run of a fetcher.
  export const method = 'quantilica/cancel' as const;
  export const params = z
    .object({ runId: runId.optional(), fetcher: fetcherName.optional() })
    .strict()
    .refine((p) => (p.runId === undefined) !== (p.fetcher === undefined), 'give exactly one of runId or fetcher');
  export type Params = z.infer<typeof params>;
  export interface Result {
    cancelled: RunInfo[];
  }
  export const type = new RequestType<Params, Result, void>(method);
}

export namespace ListRuns {
  // client → agent: recent runs, newest first.
  export const method = 'quantilica/runs' as const;
  /** Params may be left out: the default limit. */
  export const params = omittable(z.object({ limit: z.number().int().min(1).max(1000).optional() }).strict());
  export type Params = NonNullable<z.infer<typeof params>>;
  export interface Result {
    runs: RunInfo[];
  }
  export const type = new RequestType<Params | undefined, Result, void>(method);
}

export namespace TailLog {
  // client → agent: the last bytes of a run's log file.
  export const method = 'quantilica/tailLog' as const;
  // A tail travels in one frame, and clients cap frames at 1 MiB: stay well below it.
  export const params = z
    .object({
      runId,
      maxBytes: z
        .number()
        .int()
        .min(1)
        .max(256 * 1024)
        .optional(),
    })
    .strict();
  export type Params = z.infer<typeof params>;
  export interface Result {
    runId: string;
    path: string;
    text: string;
    truncated: boolean;
  }
  export const type = new RequestType<Params, Result, void>(method);
}

export namespace FlushTelemetry {
  // client → agent: send spooled telemetry to PostgreSQL now; reports work-done progress (sent / remaining).
  export const method = 'quantilica/flush' as const;
  /** Params may be left out: no progress reported. */
  export const params = omittable(z.object({ workDoneToken: z.union([z.string().max(200), z.number().int()]).optional() }).strict());
  export type Params = NonNullable<z.infer<typeof params>>;
  export interface Result {
    sent: number;
    remaining: number;
    error: string | null;
  }
  export const type = new RequestType<Params | undefined, Result, void>(method);
  /** The `$/progress` values for `workDoneToken`. */
  export const progress = new ProgressType<FlushProgress>();
}

export namespace SetSchedulePaused {
  // client → agent: pause or resume the schedule, for one fetcher or (without `fetcher`) globally.
  export const method = 'quantilica/schedule/setPaused' as const;
  export const params = z.object({ paused: z.boolean(), fetcher: fetcherName.optional() }).strict();
  export type Params = z.infer<typeof params>;
  export interface Result {
    schedule: ScheduleStatus;
  }
  export const type = new RequestType<Params, Result, void>(method);
}

export namespace ReadLog {
  // client → agent: a run's log from a byte offset, for following it (long poll). When nothing new is
  // there yet the agent holds the answer until bytes arrive, the run ends or `waitMs` passes; answers
  // carry at most `maxBytes` (≤ 64 KiB), so a follower gets a bounded stream it can resume from
  // `nextOffset` after a reconnect.
  export const method = 'quantilica/readLog' as const;
  export const params = z
    .object({
      runId,
      offset: z.number().int().min(0),
      maxBytes: z
        .number()
        .int()
        .min(1)
        .max(64 * 1024)
        .optional(),
      waitMs: z.number().int().min(0).max(20_000).optional(),
    })
    .strict();
  export type Params = z.infer<typeof params>;
  export type Result = LogChunk;
  export const type = new RequestType<Params, Result, void>(method);
}

export namespace GetHistory {
  // client → agent: the last `hours` (default 24, at most 48) of disk samples and run spans.
  export const method = 'quantilica/history' as const;
  /** Params may be left out: the last 24 hours. */
  export const params = omittable(z.object({ hours: z.number().min(1).max(48).optional() }).strict());
  export type Params = NonNullable<z.infer<typeof params>>;
  export type Result = StationHistory;
  export const type = new RequestType<Params | undefined, Result, void>(method);
}

export namespace ListEvents {
  // client → agent: the operator events after `after` (a `seq`; absent: the most recent `limit`), oldest
  // first. With `waitMs` and nothing newer yet, the agent holds the answer until an event arrives or
  // `waitMs` passes (long poll: `quantilica events --follow` resumes from `next`).
  export const method = 'quantilica/events' as const;
  /** Params may be left out: the most recent events, no wait. */
  export const params = omittable(
    z
      .object({
        after: z.number().int().min(0).optional(),
        limit: z.number().int().min(1).max(1000).optional(),
        waitMs: z.number().int().min(0).max(60_000).optional(),
      })
      .strict(),
  );
  export type Params = NonNullable<z.infer<typeof params>>;
  /** `next`: the `after` of the next call. */
  export interface Result {
    events: NumberedOperatorEvent[];
    next: number;
  }
  export const type = new RequestType<Params | undefined, Result, void>(method);
}

export namespace GetMetrics {
  // client → agent: the Prometheus text the metrics listener serves (`quantilica metrics`).
  export const method = 'quantilica/metrics' as const;
  export const params = noParams;
  export interface Result {
    contentType: string;
    text: string;
  }
  export const type = new RequestType0<Result, void>(method);
}

export namespace Changed {
  // agent → client notification: one state change, in version order. The agent sends it and never
  // receives it, so it has no schema: its params are the data types of protocolTypes.ts.
  export const method = 'quantilica/changed' as const;
  export type Params = ChangedParams;
  export const type = new NotificationType<Params>(method);
}

/** What the registry holds for one request: a client may send what its `RequestType` declares, and the schema must accept it. */
type RequestEntry<M, S extends z.ZodTypeAny = z.ZodTypeAny> = {
  readonly method: M;
  readonly params: S;
  readonly type: RequestType<z.input<S>, unknown, unknown> | RequestType0<unknown, unknown>;
};

/** Checks, for each entry, that its key is its method and that its schema and its `RequestType` agree. */
function requestRegistry<T extends { [M in keyof T]: RequestEntry<M, T[M] extends { params: infer S extends z.ZodTypeAny } ? S : never> }>(
  entries: T,
): T {
  return entries;
}

/** Every request the agent answers, by method. */
export const REQUESTS = requestRegistry({
  [Initialize.method]: Initialize,
  [Shutdown.method]: Shutdown,
  [Hello.method]: Hello,
  [GetSnapshot.method]: GetSnapshot,
  [RunFetcher.method]: RunFetcher,
  [WaitRun.method]: WaitRun,
  [CancelRun.method]: CancelRun,
  [ListRuns.method]: ListRuns,
  [TailLog.method]: TailLog,
  [FlushTelemetry.method]: FlushTelemetry,
  [SetSchedulePaused.method]: SetSchedulePaused,
  [GetHistory.method]: GetHistory,
  [ReadLog.method]: ReadLog,
  [ListEvents.method]: ListEvents,
  [GetMetrics.method]: GetMetrics,
});

/** Every notification, by method (the agent sends them; it ignores those a client sends). */
export const NOTIFICATIONS = {
  [Changed.method]: Changed,
} as const;

/** Requests a client may send before `quantilica/hello`: the LSP lifecycle and hello itself. */
export const BEFORE_HELLO: ReadonlySet<string> = new Set([Hello.method, Initialize.method, Shutdown.method]);

export type RequestMethod = keyof typeof REQUESTS;
/** The params a handler receives: what the method's schema gives back (absent and `null` become `undefined`). */
export type ParamsOf<M extends RequestMethod> = z.output<(typeof REQUESTS)[M]['params']>;
export type ResultOf<M extends RequestMethod> =
  (typeof REQUESTS)[M]['type'] extends RequestType<infer _P, infer R, unknown>
    ? R
    : (typeof REQUESTS)[M]['type'] extends RequestType0<infer R, unknown>
      ? R
      : never;
