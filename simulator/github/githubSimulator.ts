import * as crypto from 'node:crypto';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { QuotaWindows, type Resource } from './quotaWindows';
import { advanceRepo, dayStart, DEFAULT_DAY, newRepo, repoNames, type DayShape, type SimRepoData } from './simulatorData';
import { TransientFaults, tooLargeGraphqlPage } from './transientFaults';
import { createdFilter, RESULTS_CAP, runsListing } from './runsListing';

/**
 * `forbidden`: 403 with the quota left (a permission, not a limit); `truncated`: half of a JSON body; `huge`: an endless body;
 * `drop-once`, `server-error-once`: the first try of each page is dropped or answered 502, the next one answered.
 */
export type FaultKind = 'server-error' | 'malformed' | 'drop' | 'slow' | 'forbidden' | 'truncated' | 'huge' | 'drop-once' | 'server-error-once';
/** `fromPage`: a `slow` fault only on REST pages from this one on (the earlier pages answer at once). */
export interface FaultSpec { kind: FaultKind; stage: 'changes' | 'checks'; fromPage?: number }

export interface SimulatorOptions {
  /** How many repositories (named sim-org/repo-001…), or their names. */
  repos: number | string[];
  pullRequestsPerRepo?: number;
  runsPerRepo?: number;
  jobsPerRun?: number;
  limits?: Partial<Record<Resource, number>>;
  windowSeconds?: number;
  /** Milliseconds before each answer. */
  latencyMs?: number;
  /** The server's clock minus the real one, in ms (a positive value: the server is ahead). */
  clockOffsetMs?: number;
  /** Faults per repository full name; `slow` answers after `slowMs`. */
  faults?: Record<string, FaultSpec>;
  /** Primary limits answer 403 (GitHub's usual) or 429. */
  primaryStatus?: 403 | 429;
  slowMs?: number;
  /** After this many requests served on `resource`, another consumer drains that window's quota. */
  drainAfter?: { resource: Resource; requests: number };
  /**
   * Answer every request from the n-th one on with a secondary limit (403, retry-after or not); with
   * `resource`, only that resource's requests, counted apart; `status` 200: GraphQL's other way to say it.
   */
  secondaryFrom?: { requests: number; retryAfterSeconds: number | null; remainingZero?: boolean; resource?: Resource; status?: 200 | 403 };
  /** A GraphQL page asking for more nodes than this answers 502, as GitHub's do when they take too long. */
  graphqlMaxFirst?: number;
  /** Workflow-run listings' `Link` next: on another origin (this base URL), or the page's own URL. */
  runsNext?: { foreignOrigin: string } | 'self';
  /** What each advanced day changes (advanceDay, POST /_simulator/advance-day). */
  day?: Partial<DayShape>;
  /** When set, a request without this token is answered 401 Bad credentials. */
  token?: string;
  /** The type GraphQL's rate-limit error carries (GitHub sends both). */
  graphqlLimitType?: 'RATE_LIMITED' | 'RATE_LIMIT';
  /** Limited answers claim a reset (and GraphQL resetAt) this many seconds ahead. */
  resetAheadSeconds?: number;
}

export interface ServedRequest {
  /** The simulator process's real clock, ms. */
  at: number;
  method: string;
  path: string;
  resource: Resource;
  status: number;
  repo: string | null;
  /** Answered with a rate limit (primary, secondary or GraphQL RATE_LIMITED). */
  limited: boolean;
}

const MAX_PER_PAGE = 100;

/**
 * A GitHub API on 127.0.0.1 with GitHub's shapes for what the sync uses: GraphQL `repository {
 * pullRequests }` with cursor pagination and `rateLimit`, REST workflow runs and jobs with `Link`
 * pagination, rate-limit headers on every answer, primary and secondary limits, and faults. It records
 * every request it served.
 */
export class GithubSimulator {
  readonly served: ServedRequest[] = [];
  /** When the drain happened (real ms) and the reset it drained to (server epoch s). */
  drained: { at: number; reset: number } | null = null;
  private readonly repos = new Map<string, SimRepoData>();
  private readonly quota: QuotaWindows;
  private readonly server: http.Server;
  private readonly counts: Record<Resource, number> = { graphql: 0, core: 0 };
  private total = 0;
  /** Days advanced since the start: the data's clock. */
  private day = 0;
  private readonly transient = new TransientFaults();

  constructor(private readonly options: SimulatorOptions) {
    const names = typeof options.repos === 'number' ? repoNames(options.repos) : options.repos;
    names.forEach((fullName, i) => this.repos.set(fullName.toLowerCase(), newRepo(i + 1, fullName, options.pullRequestsPerRepo ?? 30, options.runsPerRepo ?? 20, options.jobsPerRun ?? 3)));
    this.quota = new QuotaWindows({ graphql: options.limits?.graphql ?? 5000, core: options.limits?.core ?? 5000 }, options.windowSeconds ?? 3600);
    this.server = http.createServer((req, res) => { this.handle(req, res); });
    this.server.keepAliveTimeout = 5_000;
  }

  get repoNames(): string[] {
    return [...this.repos.values()].map((r) => r.fullName);
  }

  async start(port = 0): Promise<string> {
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, '127.0.0.1', () => resolve());
    });
    return this.url;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  serverNow(): number {
    return Date.now() + (this.options.clockOffsetMs ?? 0);
  }

  /** The data as a sync should have stored it (for tests): every repository's records, by full name. */
  data(fullName: string): SimRepoData | undefined {
    return this.repos.get(fullName.toLowerCase());
  }

  /** `days` later: runs complete, a failed run is re-run, new runs and pull requests, some updated and merged. */
  advanceDay(days = 1, change: Partial<DayShape> = {}): void {
    this.day += days;
    const shape = { ...DEFAULT_DAY, ...this.options.day, ...change };
    for (const repo of this.repos.values()) advanceRepo(repo, dayStart(this.day), shape);
  }

  /** Faults from now on (a test's second sync without the first one's). */
  setFaults(faults: Record<string, FaultSpec>): void {
    this.options.faults = faults;
  }

  /** Another consumer spends the rest of the current window (for tests and the demo). */
  drain(resource: Resource): number {
    const reset = this.quota.drain(resource, this.serverNow());
    this.drained = { at: Date.now(), reset };
    return reset;
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    // The simulator's own account, for a test or benchmark running it as a separate process; not GitHub's.
    if (req.method === 'GET' && req.url === '/_simulator/served') {
      this.send(res, 200, { 'content-type': 'application/json' }, { served: this.served, drained: this.drained });
      return;
    }
    const advance = /^\/_simulator\/advance-day(?:\?days=(\d+))?$/.exec(req.url ?? '');
    if (req.method === 'POST' && advance) {
      this.advanceDay(advance[1] === undefined ? 1 : Number(advance[1]));
      this.send(res, 200, { 'content-type': 'application/json' }, { day: this.day });
      return;
    }
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => { body += chunk; });
    req.on('end', () => {
      const answer = () => { this.answer(req, res, body); };
      const latency = (this.options.latencyMs ?? 0) + (this.isSlow(req, body) ? this.options.slowMs ?? 5_000 : 0);
      if (latency > 0) setTimeout(answer, latency);
      else answer();
    });
  }

  private isSlow(req: http.IncomingMessage, body: string): boolean {
    const faults = Object.entries(this.options.faults ?? {}).filter(([, f]) => f.kind === 'slow');
    if (faults.length === 0) return false;
    const route = this.route(req.method ?? 'GET', new URL(req.url ?? '/', 'http://127.0.0.1'), body);
    const page = Number(new URL(req.url ?? '/', 'http://127.0.0.1').searchParams.get('page') ?? 1);
    return faults.some(([repo, f]) => route.repo?.fullName === repo && route.stage === f.stage && page >= (f.fromPage ?? 0));
  }

  private answer(req: http.IncomingMessage, res: http.ServerResponse, body: string): void {
    const url = new URL(req.url ?? '/', `http://${req.headers.host ?? '127.0.0.1'}`);
    const resource: Resource = url.pathname === '/graphql' ? 'graphql' : 'core';
    const route = this.route(req.method ?? 'GET', url, body);
    const record = (status: number, limited: boolean) => {
      this.served.push({ at: Date.now(), method: req.method ?? 'GET', path: `${url.pathname}${url.search}`, resource, status, repo: route.repo?.fullName ?? null, limited });
    };
    this.total += 1;
    this.counts[resource] += 1;
    const now = this.serverNow();
    const drainAfter = this.options.drainAfter;
    if (drainAfter && drainAfter.resource === resource && this.counts[resource] === drainAfter.requests + 1) this.drain(resource);

    const fault = route.repo ? this.options.faults?.[route.repo.fullName] : undefined;
    const once = (kind: FaultKind) => fault?.stage === route.stage && fault.kind === kind && this.transient.firstTime(req.method ?? 'GET', `${url.pathname}${url.search}`, body);
    if (fault && fault.stage === route.stage && (fault.kind === 'drop' || once('drop-once'))) {
      record(0, false);
      req.socket.destroy();
      return;
    }
    if (this.options.token !== undefined && req.headers.authorization !== `token ${this.options.token}` && req.headers.authorization !== `bearer ${this.options.token}`) {
      record(401, false);
      this.send(res, 401, { 'content-type': 'application/json; charset=utf-8' }, { message: 'Bad credentials', documentation_url: 'https://docs.github.com/rest', status: '401' });
      return;
    }
    const secondary = this.options.secondaryFrom;
    if (secondary && (secondary.resource === undefined ? this.total : secondary.resource === resource ? this.counts[resource] : -1) >= secondary.requests) {
      const s = this.limitedState(resource, now, secondary.remainingZero === true);
      const headers = this.headers(resource, now, s);
      if (secondary.retryAfterSeconds !== null) headers['retry-after'] = String(secondary.retryAfterSeconds);
      const status = resource === 'graphql' ? secondary.status ?? 403 : 403;
      record(status, true);
      if (status === 200) {
        this.send(res, 200, headers, { errors: [{ message: 'You have exceeded a secondary rate limit. Please wait a few minutes before you try again.' }] });
        return;
      }
      this.send(res, 403, headers, { message: 'You have exceeded a secondary rate limit. Please wait a few minutes before you try again.', documentation_url: 'https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits' });
      return;
    }
    if (!this.quota.take(resource, now, 1)) {
      const s = this.limitedState(resource, now, true);
      record(resource === 'graphql' ? 200 : this.options.primaryStatus ?? 403, true);
      if (resource === 'graphql') {
        this.send(res, 200, this.headers(resource, now, s), { errors: [{ type: this.options.graphqlLimitType ?? 'RATE_LIMITED', code: 'graphql_rate_limit', message: 'API rate limit already exceeded for user ID 1.' }] });
      } else {
        this.send(res, this.options.primaryStatus ?? 403, this.headers(resource, now, s), { message: 'API rate limit exceeded for user ID 1.', documentation_url: 'https://docs.github.com/rest/overview/rate-limits-for-the-rest-api' });
      }
      return;
    }
    const s = this.quota.state(resource, now);
    const headers = this.headers(resource, now, s);
    if ((fault && fault.stage === route.stage && (fault.kind === 'server-error' || once('server-error-once'))) || (resource === 'graphql' && tooLargeGraphqlPage(body, this.options.graphqlMaxFirst))) {
      record(502, false);
      this.send(res, 502, headers, { message: 'Server Error' });
      return;
    }
    if (fault && fault.stage === route.stage && fault.kind === 'forbidden') {
      record(403, false);
      this.send(res, 403, headers, { message: 'Resource not accessible by integration', documentation_url: 'https://docs.github.com/rest', status: '403' });
      return;
    }
    if (fault && fault.stage === route.stage && fault.kind === 'huge') {
      record(200, false);
      this.sendEndless(res, headers);
      return;
    }
    const result = route.answer(fault?.stage === route.stage && fault.kind === 'malformed', s);
    Object.assign(headers, result.headers ?? {});
    if (req.method === 'GET' && result.status === 200) {
      // GitHub's ETag is a digest of the answer; a matching If-None-Match is a 304 that costs no quota.
      const etag = `W/"${crypto.createHash('sha1').update(JSON.stringify(result.body)).digest('hex')}"`;
      if (req.headers['if-none-match'] === etag) {
        this.quota.give(resource, now, 1);
        const after = this.quota.state(resource, now);
        record(304, false);
        res.writeHead(304, { ...this.headers(resource, now, after), etag });
        res.end();
        return;
      }
      headers.etag = etag;
    }
    record(result.status, false);
    if (fault && fault.stage === route.stage && fault.kind === 'truncated') {
      const text = JSON.stringify(result.body);
      const half = text.slice(0, Math.floor(text.length / 2));
      res.writeHead(result.status, { ...headers, 'content-length': Buffer.byteLength(half) });
      res.end(half);
      return;
    }
    this.send(res, result.status, headers, result.body);
  }

  /** The quota's state on a limited answer: remaining 0 if asked, the reset as far ahead as configured. */
  private limitedState(resource: Resource, now: number, remainingZero: boolean): { limit: number; used: number; remaining: number; reset: number } {
    const s = this.quota.state(resource, now);
    const ahead = this.options.resetAheadSeconds;
    return { ...s, ...(remainingZero ? { remaining: 0, used: s.limit } : {}), ...(ahead !== undefined ? { reset: Math.floor(now / 1000) + ahead } : {}) };
  }

  /** A JSON list that never ends, written as fast as the client reads, until it hangs up. */
  private sendEndless(res: http.ServerResponse, headers: Record<string, string>): void {
    res.writeHead(200, headers);
    const chunk = `${JSON.stringify({ id: 1, name: 'x'.repeat(1000) })},`.repeat(64);
    res.write('{"total_count":1,"workflow_runs":[');
    const more = () => {
      while (!res.destroyed && res.write(chunk)) { /* until the socket's buffer is full */ }
      if (!res.destroyed) res.once('drain', more);
    };
    res.on('close', () => res.removeAllListeners('drain'));
    more();
  }

  private headers(resource: Resource, serverMs: number, s: { limit: number; used: number; remaining: number; reset: number }): Record<string, string> {
    return {
      'content-type': 'application/json; charset=utf-8',
      date: new Date(serverMs).toUTCString(),
      'x-ratelimit-limit': String(s.limit),
      'x-ratelimit-remaining': String(s.remaining),
      'x-ratelimit-used': String(s.used),
      'x-ratelimit-reset': String(s.reset),
      'x-ratelimit-resource': resource,
      'x-github-media-type': 'github.v3; format=json',
    };
  }

  private send(res: http.ServerResponse, status: number, headers: Record<string, string>, body: unknown): void {
    const text = JSON.stringify(body);
    res.writeHead(status, { ...headers, 'content-length': Buffer.byteLength(text) });
    res.end(text);
  }

  private route(method: string, url: URL, body: string): Route {
    if (method === 'POST' && url.pathname === '/graphql') return this.graphqlRoute(body);
    const runs = /^\/repos\/([^/]+)\/([^/]+)\/actions\/runs$/.exec(url.pathname);
    const oneRun = /^\/repos\/([^/]+)\/([^/]+)\/actions\/runs\/(\d+)$/.exec(url.pathname);
    const jobs = /^\/repos\/([^/]+)\/([^/]+)\/actions\/runs\/(\d+)\/jobs$/.exec(url.pathname);
    if (method === 'GET' && (runs || oneRun || jobs)) {
      const m = (runs ?? oneRun ?? jobs)!;
      const repo = this.repos.get(`${m[1]}/${m[2]}`.toLowerCase()) ?? null;
      const perPage = Math.min(MAX_PER_PAGE, Math.max(1, Number(url.searchParams.get('per_page') ?? 30) || 30));
      const page = Math.max(1, Number(url.searchParams.get('page') ?? 1) || 1);
      return {
        repo, stage: 'checks',
        answer: (malformed) => {
          if (!repo) return { status: 404, body: { message: 'Not Found' } };
          if (runs) {
            const created = url.searchParams.get('created');
            const filter = created === null ? null : createdFilter(created);
            if (filter === 'invalid') return { status: 422, body: { message: 'Validation Failed', errors: [{ field: 'created', code: 'invalid' }] } };
            const listing = runsListing(repo.runs, filter, url.searchParams.get('status'));
            // With a filter, GitHub answers at most 1,000 results however many match.
            const reachable = listing.filtered ? listing.runs.slice(0, RESULTS_CAP) : listing.runs;
            const items: Record<string, unknown>[] = pageOf(reachable.length, page, perPage).map((i) => ({ ...reachable[i - 1], html_url: `https://github.com/${repo.fullName}/actions/runs/${reachable[i - 1].id}` }));
            if (malformed && page === 1 && items.length > 0) items[0] = { ...items[0], id: 'not-a-number' };
            const link = linkHeader(url, page, perPage, reachable.length);
            const next = this.options.runsNext;
            if (next === 'self') link.link = `<${this.url}${url.pathname}${url.search}>; rel="next"`;
            else if (next !== undefined) link.link = `<${next.foreignOrigin}${url.pathname}?per_page=${perPage}&page=${page + 1}>; rel="next"`;
            return { status: 200, headers: link, body: { total_count: listing.runs.length, workflow_runs: items } };
          }
          const run = repo.runs.find((r) => r.id === Number((oneRun ?? jobs)![3]));
          if (run === undefined) return { status: 404, body: { message: 'Not Found' } };
          if (oneRun) return { status: 200, body: { ...run, html_url: `https://github.com/${repo.fullName}/actions/runs/${run.id}` } };
          // filter=latest (GitHub's default): the latest attempt's jobs; all: every attempt's.
          const every = repo.jobs.get(run.id) ?? [];
          const chosen = url.searchParams.get('filter') === 'all' ? every : every.filter((j) => j.run_attempt === run.run_attempt);
          const items = pageOf(chosen.length, page, perPage).map((i) => chosen[i - 1]);
          return { status: 200, headers: linkHeader(url, page, perPage, chosen.length), body: { total_count: chosen.length, jobs: items } };
        },
      };
    }
    return { repo: null, stage: null, answer: () => ({ status: 404, body: { message: 'Not Found', documentation_url: 'https://docs.github.com/rest' } }) };
  }

  private graphqlRoute(body: string): Route {
    let parsed: { query?: unknown; variables?: Record<string, unknown> } = {};
    try {
      parsed = JSON.parse(body) as typeof parsed;
    } catch {
      return { repo: null, stage: 'changes', answer: () => ({ status: 400, body: { message: 'Problems parsing JSON' } }) };
    }
    const vars = parsed.variables ?? {};
    const repo = this.repos.get(`${String(vars.owner)}/${String(vars.name)}`.toLowerCase()) ?? null;
    const query = typeof parsed.query === 'string' ? parsed.query : '';
    return {
      repo, stage: 'changes',
      answer: (malformed, s) => {
        const rateLimit = { cost: 1, limit: s.limit, remaining: s.remaining, used: s.used, resetAt: new Date(s.reset * 1000).toISOString() };
        if (!/pullRequests\s*\(/.test(query)) return { status: 200, body: { errors: [{ message: 'this simulator answers the pull requests query only' }] } };
        if (!repo) return { status: 200, body: { data: { rateLimit, repository: null }, errors: [{ type: 'NOT_FOUND', path: ['repository'], message: `Could not resolve to a Repository with the name '${String(vars.owner)}/${String(vars.name)}'.` }] } };
        const first = Math.min(MAX_PER_PAGE, Math.max(1, Number(vars.first ?? 50) || 50));
        const offset = typeof vars.cursor === 'string' ? Number(Buffer.from(vars.cursor, 'base64').toString('utf8').split(':').pop()) : 0;
        // orderBy UPDATED_AT DESC (newest change first) or GitHub's default, CREATED_AT ASC.
        const ordered = /UPDATED_AT,\s*direction:\s*DESC/.test(query)
          ? [...repo.pullRequests].sort((a, b) => (a.updatedAt === b.updatedAt ? b.number - a.number : a.updatedAt < b.updatedAt ? 1 : -1))
          : repo.pullRequests;
        const nodes: Record<string, unknown>[] = ordered.slice(offset, offset + first).map((p) => ({ ...p }));
        if (malformed && nodes.length > 0) nodes[0] = { ...nodes[0], number: 'seven' };
        const end = offset + nodes.length;
        return {
          status: 200,
          body: { data: { rateLimit, repository: { pullRequests: { totalCount: ordered.length, nodes, pageInfo: { hasNextPage: end < ordered.length, endCursor: nodes.length > 0 ? Buffer.from(`cursor:v2:${end}`).toString('base64') : null } } } } },
        };
      },
    };
  }
}

interface Route {
  repo: SimRepoData | null;
  stage: 'changes' | 'checks' | null;
  answer(malformed: boolean, s: { limit: number; used: number; remaining: number; reset: number }): { status: number; headers?: Record<string, string>; body: unknown };
}

function pageOf(total: number, page: number, perPage: number): number[] {
  const start = (page - 1) * perPage;
  return Array.from({ length: Math.max(0, Math.min(perPage, total - start)) }, (_, i) => start + i + 1);
}

/** GitHub's `Link` header: next and last while there is a next page, prev and first after the first. */
function linkHeader(url: URL, page: number, perPage: number, total: number): Record<string, string> {
  const last = Math.max(1, Math.ceil(total / perPage));
  const at = (p: number) => {
    const u = new URL(url.toString());
    u.searchParams.set('per_page', String(perPage));
    u.searchParams.set('page', String(p));
    return `<${u.protocol}//${u.host}${u.pathname}${u.search}>`;
  };
  const links: string[] = [];
  if (page < last) links.push(`${at(page + 1)}; rel="next"`, `${at(last)}; rel="last"`);
  if (page > 1) links.push(`${at(page - 1)}; rel="prev"`, `${at(1)}; rel="first"`);
  return links.length > 0 ? { link: links.join(', ') } : {};
}
