import { z } from 'zod';
import {
  CancelRun,
  FlushTelemetry,
  GetHistory,
  GetMetrics,
  ListEvents,
  GetSnapshot,
  Hello,
  Initialize,
  ListRuns,
  ReadLog,
  RunFetcher,
  SetSchedulePaused,
  Shutdown,
  TailLog,
  WaitRun,
  type ParamsOf,
  type RequestMethod,
} from '../../shared/protocol';
import { FETCHER_NAME } from '../catalog/catalog';

// Every request's params are checked here before the agent sees them; a client can name a catalog
// fetcher and pass arguments as data, never a path or a command line.

const fetcherName = z.string().regex(FETCHER_NAME, 'must be a catalog fetcher name: lowercase letters, digits, ".", "_" or "-", at most 64, no path characters');
const runId = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/, 'must be a run id as the agent reports it (letters, digits, ".", "_", ":" or "-")');
/** Arguments reach the fetcher as argv entries (never through a shell); bounded so a run record stays small. */
const fetcherArg = z.string().max(4096).refine((a) => !a.includes('\0'), 'must not contain NUL bytes');
/** Params a client may leave out (absent, `null`); the handler sees `undefined` for both. */
const omittable = <T extends z.ZodTypeAny>(schema: T) => z.union([z.undefined(), z.null().transform(() => undefined), schema]);
const noParams = omittable(z.object({}).strict()).transform(() => undefined);

export const paramSchemas = {
  // LSP's initialize params are large and the agent uses none of them: an object is all it checks.
  [Initialize.method]: z.object({}).passthrough(),
  [Shutdown.method]: noParams,
  [Hello.method]: z.object({
    protocolVersion: z.number().int().nonnegative(),
    client: z.string().min(1).max(200),
  }).strict(),
  [GetSnapshot.method]: noParams,
  [RunFetcher.method]: z.object({
    fetcher: fetcherName,
    // 64 for a fetcher (validateArgs); a GitHub sync's repositories may be many more (the frame cap bounds them).
    args: z.array(fetcherArg).max(10000).optional(),
    trigger: z.enum(['cli', 'protocol']).optional(),
  }).strict(),
  [WaitRun.method]: z.object({ runId }).strict(),
  [CancelRun.method]: z.object({ runId: runId.optional(), fetcher: fetcherName.optional() }).strict()
    .refine((p) => (p.runId === undefined) !== (p.fetcher === undefined), 'give exactly one of runId or fetcher'),
  [ListRuns.method]: omittable(z.object({ limit: z.number().int().min(1).max(1000).optional() }).strict()),
  // A tail travels in one frame, and clients cap frames at 1 MiB: stay well below it.
  [TailLog.method]: z.object({ runId, maxBytes: z.number().int().min(1).max(256 * 1024).optional() }).strict(),
  [FlushTelemetry.method]: omittable(z.object({ workDoneToken: z.union([z.string().max(200), z.number().int()]).optional() }).strict()),
  [SetSchedulePaused.method]: z.object({ paused: z.boolean(), fetcher: fetcherName.optional() }).strict(),
  [GetHistory.method]: omittable(z.object({ hours: z.number().min(1).max(48).optional() }).strict()),
  [ReadLog.method]: z.object({ runId, offset: z.number().int().min(0), maxBytes: z.number().int().min(1).max(64 * 1024).optional(), waitMs: z.number().int().min(0).max(20_000).optional() }).strict(),
  [ListEvents.method]: omittable(z.object({
    after: z.number().int().min(0).optional(),
    limit: z.number().int().min(1).max(1000).optional(),
    waitMs: z.number().int().min(0).max(60_000).optional(),
  }).strict()),
  [GetMetrics.method]: noParams,
} as const satisfies { [M in RequestMethod]: z.ZodType<ParamsOf<M>, z.ZodTypeDef, unknown> };
// The `satisfies` above ties each schema's output to the params type its RequestType declares in
// shared/protocol.ts: a schema and its message cannot drift apart unnoticed.

/** Methods a client may call before `quantilica/hello`. */
export const BEFORE_HELLO: ReadonlySet<string> = new Set([Hello.method, Initialize.method, Shutdown.method]);


/** One line per problem: `fetcher: must be a catalog fetcher name …`. */
export function describeIssues(error: z.ZodError): string {
  return error.issues.map((i) => `${i.path.length > 0 ? i.path.join('.') : 'params'}: ${i.message}`).join('; ');
}
