import type * as OctokitCore from '@octokit/core' with { 'resolution-mode': 'import' };
import type * as PaginateGraphql from '@octokit/plugin-paginate-graphql' with { 'resolution-mode': 'import' };
import type * as PaginateRest from '@octokit/plugin-paginate-rest' with { 'resolution-mode': 'import' };
import type * as PluginRetry from '@octokit/plugin-retry' with { 'resolution-mode': 'import' };
import { AsyncLocalStorage } from 'node:async_hooks';
import { guardedFetch, nextPagePath } from './answerGuard';
import { BudgetTracker } from './budgetTracker';
import { GraphqlPageTooLargeError, MIN_GRAPHQL_PAGE } from './graphqlPageTooLarge';
import { PULL_REQUESTS_QUERY } from './queries';
import { RateLimitedError } from './rateLimited';
import {
  MalformedAnswerError,
  parseAll,
  pullRequestSchema,
  workflowRunSchema,
  type PullRequestRecord,
  type WorkflowRunRecord,
} from './records';
import { RETRY_BASE_MS, RETRY_PLUGIN_OPTIONS, waitBeforeRetry } from './requestRetry';
import type { Budget } from './store/githubStore';
import { UnauthorizedError } from './unauthorizedError';

export const DEFAULT_GITHUB_API_URL = 'https://api.github.com';

/** Where the API is and how to be let in. The token is held here and nowhere that is logged or shown. */
export interface GithubClientConfig {
  baseUrl: string;
  token: string | null;
  pageSize?: number;
  /** The largest answer body read (default MAX_ANSWER_BYTES). */
  maxAnswerBytes?: number;
  /** The first retry's wait after a 5xx or a dropped connection (default RETRY_BASE_MS). */
  retryBaseMs?: number;
}

/** Whether an API is configured (GITHUB_TOKEN or QUANTILICA_GITHUB_API_URL): only without one does the demo use its simulator. */
export function githubApiConfigured(env: NodeJS.ProcessEnv = process.env): boolean {
  return (env.GITHUB_TOKEN ?? '') !== '' || (env.QUANTILICA_GITHUB_API_URL ?? '') !== '';
}

/** GITHUB_TOKEN and QUANTILICA_GITHUB_API_URL (GitHub Enterprise, the simulator). */
export function githubClientConfigFromEnv(env: NodeJS.ProcessEnv = process.env): GithubClientConfig {
  const base = env.QUANTILICA_GITHUB_API_URL;
  const token = env.GITHUB_TOKEN;
  return {
    baseUrl: (base === undefined || base === '' ? DEFAULT_GITHUB_API_URL : base).replace(/\/+$/, ''),
    token: token === undefined || token === '' ? null : token,
  };
}

// The Octokit packages are ES modules; Node 20.19+ require()s them from this CommonJS output (tsc's and
// esbuild's alike), which keeps client construction synchronous.
/* eslint-disable @typescript-eslint/no-require-imports */
const { Octokit } = require('@octokit/core') as typeof OctokitCore;
const { paginateRest } = require('@octokit/plugin-paginate-rest') as typeof PaginateRest;
const { paginateGraphQL } = require('@octokit/plugin-paginate-graphql') as typeof PaginateGraphql;
const { retry } = require('@octokit/plugin-retry') as typeof PluginRetry;
/* eslint-enable @typescript-eslint/no-require-imports */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type RequestHook = (request: (options: any) => any, options: any) => Promise<any>;
/**
 * The slot for the sync's own hook, registered before plugin-retry: hooks registered first run
 * innermost, so every try of a retried request goes through it (reserves budget, is counted, is
 * classified) and plugin-retry sees only what the hook lets through.
 */
function syncHookSlot(octokit: InstanceType<typeof Octokit>): { syncHook: { wrap: RequestHook | null } } {
  const slot: { wrap: RequestHook | null } = { wrap: null };
  octokit.hook.wrap(
    'request',
    (request, options) => (slot.wrap ? slot.wrap(request, options) : request(options)) as ReturnType<typeof request>,
  );
  return { syncHook: slot };
}
const SyncOctokit = Octokit.plugin(syncHookSlot, retry, paginateRest, paginateGraphQL);
// Routes as plain strings: the typed routes' parameters have no room for `request: { signal }`.
const RUNS_ROUTE: string = 'GET /repos/{owner}/{repo}/actions/runs';
type SyncOctokit = InstanceType<typeof SyncOctokit>;

interface RequestOptionsLike {
  method?: string;
  url?: string;
  baseUrl?: string;
  request?: { signal?: AbortSignal; retryCount?: number };
  variables?: { first?: unknown };
}

// plugin-paginate-rest's iterator passes only method, url and headers to each page's request, so a
// signal given to it never reaches fetch. The task's signal rides along its async context instead, and
// the request hook puts it on every request the task makes.
const taskSignal = new AsyncLocalStorage<AbortSignal>();

/** Runs `fn` so that every GitHub request it makes is aborted with `signal` (timeout, cancel). */
export function withTaskSignal<T>(signal: AbortSignal, fn: () => Promise<T>): Promise<T> {
  return taskSignal.run(signal, fn);
}
const SECONDARY_MESSAGE = /secondary rate limit|abuse/i;

interface ResponseLike {
  headers: Record<string, string | number | undefined>;
  data?: unknown;
}

/**
 * @octokit/core with the pagination plugins, and one hook around every request: it reserves the
 * budget first (throwing instead of sending when the budget is spent), counts the request, reads the
 * rate-limit headers of every answer, and turns GitHub's ways of saying "rate limited" (403/429 with
 * remaining 0, a secondary limit, GraphQL RATE_LIMITED) into RateLimitedError. No throttling plugin:
 * nothing here waits.
 */
export class GithubClient {
  private readonly octokit: SyncOctokit;
  readonly pageSize: number;
  private readonly apiRoot: string;
  /** Until one answer proves the token is accepted, one request at a time: a 401 costs one request. */
  private authenticated = false;
  private unauthorized = false;
  private probing: Promise<void> | null = null;

  constructor(
    config: GithubClientConfig,
    readonly budgets: BudgetTracker,
    onRequest: (budget: Budget) => void,
    onNotModified: () => void = () => {},
  ) {
    this.pageSize = config.pageSize ?? 100;
    this.apiRoot = config.baseUrl.replace(/\/+$/, '');
    this.octokit = new SyncOctokit({
      baseUrl: this.apiRoot,
      request: { fetch: guardedFetch(this.apiRoot, config.maxAnswerBytes) },
      userAgent: 'quantilica-orchestrator-github-sync',
      ...(config.token !== null ? { auth: config.token } : {}),
      // Octokit logs deprecations and warnings to the console by default; the sync has its own logger.
      log: { debug: () => {}, info: () => {}, warn: () => {}, error: () => {} },
      retry: RETRY_PLUGIN_OPTIONS,
    });
    const retryBaseMs = config.retryBaseMs ?? RETRY_BASE_MS;
    this.octokit.syncHook.wrap = async (request, options) => {
      const opts = options as RequestOptionsLike;
      const budget: Budget = /\/graphql$/.test(opts.url ?? '') ? 'graphql' : 'core';
      const signal = taskSignal.getStore();
      if (signal !== undefined && opts.request?.signal === undefined) opts.request = { ...opts.request, signal };
      signal?.throwIfAborted();
      // A retry (plugin-retry's) waits first, then reserves its budget and is counted like any request.
      await waitBeforeRetry(opts.request, retryBaseMs, opts.request?.signal);
      const release = await this.gate();
      let response: ResponseLike;
      try {
        budgets.reserve(budget);
        onRequest(budget);
        response = (await request(options)) as ResponseLike;
      } catch (err) {
        const e = err as { response?: ResponseLike; status?: number; cause?: unknown };
        if (e.cause instanceof MalformedAnswerError) throw e.cause;
        if (e.response) {
          // Octokit throws for a 304; it is an answer: what was stored is still GitHub's, at no quota.
          if (e.status === 304) {
            this.authenticated = true;
            budgets.refund(budget);
            budgets.observe(e.response.headers);
            onNotModified();
            return { status: 304, headers: e.response.headers, data: undefined, url: '' };
          }
          if (e.status === 401) {
            this.unauthorized = true;
            throw new UnauthorizedError();
          }
          this.authenticated = true;
          const first = Number(opts.variables?.first);
          if (budget === 'graphql' && e.status === 502 && first > MIN_GRAPHQL_PAGE) throw new GraphqlPageTooLargeError(first);
          throw this.classify(budget, err as { status: number; response: ResponseLike }) ?? err;
        }
        throw err;
      } finally {
        release?.();
      }
      this.authenticated = true;
      budgets.observe(response.headers);
      if (budget === 'graphql') {
        const body = response.data as
          { errors?: Array<{ type?: string; message?: unknown }>; data?: { rateLimit?: Record<string, unknown> } } | undefined;
        if (body?.data?.rateLimit) budgets.observeGraphql(body.data.rateLimit);
        if (body?.errors?.some((e) => e.type === 'RATE_LIMITED' || e.type === 'RATE_LIMIT'))
          throw budgets.limited('graphql', response.headers, 'graphql');
        // GitHub's docs: a secondary limit on GraphQL can come as a 200 with an error that says so.
        if (body?.errors?.some((e) => typeof e.message === 'string' && SECONDARY_MESSAGE.test(e.message)))
          throw budgets.limited('graphql', response.headers, 'secondary');
      }
      return response;
    };
  }

  /** Waits while the first request is out; returns its release when this request is the first. */
  private async gate(): Promise<(() => void) | null> {
    for (;;) {
      if (this.unauthorized) throw new UnauthorizedError();
      if (this.authenticated) return null;
      if (this.probing === null) {
        let done!: () => void;
        this.probing = new Promise<void>((resolve) => {
          done = resolve;
        });
        return () => {
          this.probing = null;
          done();
        };
      }
      await this.probing;
    }
  }

  private classify(budget: Budget, err: { status: number; response: ResponseLike }): RateLimitedError | null {
    const headers = err.response.headers;
    this.budgets.observe(headers);
    if (err.status !== 403 && err.status !== 429) return null;
    const message = JSON.stringify(err.response.data ?? '');
    if (SECONDARY_MESSAGE.test(message) || (headers['retry-after'] !== undefined && headers['x-ratelimit-remaining'] !== '0')) {
      return this.budgets.limited(budget, headers, 'secondary');
    }
    if (String(headers['x-ratelimit-remaining']) === '0' || err.status === 429) return this.budgets.limited(budget, headers, 'primary');
    return null;
  }

  /** The pull requests from `cursor` on, one page at a time, each with the cursor to continue from. */
  async *pullRequestPages(
    repo: string,
    cursor: string | null,
    signal: AbortSignal,
  ): AsyncGenerator<{ records: PullRequestRecord[]; endCursor: string | null; hasNextPage: boolean }> {
    const [owner, name] = repo.split('/');
    // Paged here, not by the paginate plugin, so that a 502 can ask the same cursor again at half the size.
    let first = this.pageSize;
    let after = cursor;
    for (;;) {
      let page: PullRequestsAnswer;
      try {
        page = await this.octokit.graphql<PullRequestsAnswer>(PULL_REQUESTS_QUERY, {
          owner,
          name,
          first,
          cursor: after,
          request: { signal },
        });
      } catch (err) {
        if (err instanceof GraphqlPageTooLargeError) {
          first = err.smaller;
          continue;
        }
        throw err;
      }
      const connection = page.repository?.pullRequests;
      if (!connection) throw new MalformedAnswerError(`${repo}: no pullRequests in the answer`);
      const endCursor = connection.pageInfo?.endCursor ?? null;
      const hasNextPage = connection.pageInfo?.hasNextPage === true;
      yield { records: parseAll(pullRequestSchema, connection.nodes, `${repo} pullRequests`), endCursor, hasNextPage };
      if (!hasNextPage) return;
      if (endCursor === null || endCursor === after)
        throw new MalformedAnswerError(`${repo} pullRequests: a next page without a new cursor`);
      after = endCursor;
    }
  }

  /**
   * Workflow runs from the first page, or from a stored next page (a path under the API root), each page
   * with the next one's path. The pages are followed here, not by the paginate plugin, so that a next
   * URL is checked (nextPagePath) before anything is sent to it.
   */
  async *workflowRunPages(
    repo: string,
    fromPath: string | null,
    signal: AbortSignal,
  ): AsyncGenerator<{ records: WorkflowRunRecord[]; nextUrl: string | null }> {
    const [owner, name] = repo.split('/');
    const followed = new Set<string>();
    let path: string | null = fromPath === null ? null : this.storedPath(fromPath, followed);
    let first = true;
    while (first || path !== null) {
      const response =
        first && path === null
          ? await this.octokit.request(RUNS_ROUTE, { owner, repo: name, per_page: this.pageSize, request: { signal } })
          : await this.octokit.request(`GET ${path!}`, { request: { signal } });
      first = false;
      const data = response.data as { workflow_runs?: unknown } | string | null;
      if (typeof data !== 'object' || data === null) throw new MalformedAnswerError(`${repo} workflow_runs: not an object`);
      path = nextPagePath(response.headers.link, this.apiRoot, followed);
      yield { records: parseAll(workflowRunSchema, data.workflow_runs, `${repo} workflow_runs`), nextUrl: path };
    }
  }

  /**
   * One GET of a path under the API root, with If-None-Match when an ETag is given (a 304 comes back
   * as `notModified`, without data). The path is what ETags are stored under.
   */
  async get(path: string, etag: string | null, signal: AbortSignal): Promise<RestAnswer> {
    const response = (await this.octokit.request(`GET ${path}`, {
      headers: etag !== null ? { 'if-none-match': etag } : {},
      request: { signal },
    })) as { status: number; data: unknown; headers: Record<string, string | number | undefined> };
    const tag = response.headers.etag;
    return {
      notModified: response.status === 304,
      data: response.data,
      etag: typeof tag === 'string' ? tag : null,
      link: response.headers.link === undefined ? undefined : String(response.headers.link),
    };
  }

  /** The next page of an answer (checked like every Link next), or null. */
  nextPath(link: string | undefined, followed: Set<string>): string | null {
    return nextPagePath(link, this.apiRoot, followed);
  }

  /** A stored cursor: a path under the API root (an absolute URL is checked like a Link next). */
  storedPath(stored: string, followed: Set<string>): string {
    const path = nextPagePath(`<${stored.startsWith('/') ? `${this.apiRoot}${stored}` : stored}>; rel="next"`, this.apiRoot, followed);
    return path!;
  }
}

export interface RestAnswer {
  notModified: boolean;
  data: unknown;
  etag: string | null;
  link: string | undefined;
}

interface PullRequestsAnswer {
  repository?: { pullRequests?: { nodes?: unknown; pageInfo?: { hasNextPage?: boolean; endCursor?: string | null } } } | null;
}
