// `npm run simulate:github -- --port N --repos 86 …`: the GitHub API simulator alone, in the foreground.
// Prints one JSON line with its URL (set QUANTILICA_GITHUB_API_URL to it); stops on SIGINT/SIGTERM.
import { Command } from 'commander';
import { GithubSimulator, type FaultKind, type FaultSpec } from './githubSimulator';

const int = (name: string) => (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name} ${v}: a whole number is needed`);
  return n;
};

const program = new Command('github-simulator')
  .option('--port <n>', 'port on 127.0.0.1 (0: any free one)', int('--port'), 0)
  .option('--repos <n>', 'how many repositories (sim-org/repo-001…)', int('--repos'), 86)
  .option('--pull-requests <n>', 'pull requests per repository', int('--pull-requests'), 30)
  .option('--runs <n>', 'workflow runs per repository', int('--runs'), 20)
  .option('--jobs <n>', 'jobs per run', int('--jobs'), 3)
  .option('--limit <n>', 'points per window, each of graphql and core', int('--limit'), 5000)
  .option('--core-limit <n>', "core's points per window, when they differ from graphql's (--limit)", int('--core-limit'))
  .option('--window <seconds>', 'quota window length', int('--window'), 3600)
  .option('--latency <ms>', 'delay before each answer', int('--latency'), 0)
  .option('--clock-offset <ms>', "the server's clock ahead of the real one (negative: behind)", Number, 0)
  .option('--exit-with-stdin', 'exit when stdin closes (a parent that starts it dies, -9 included)')
  .option('--fault <repo=kind:stage...>', 'inject a fault: kind server-error|malformed|drop|slow|forbidden|truncated|huge|drop-once|server-error-once, stage changes|checks')
  .option('--day-new-runs <n>', 'runs created per advanced day (POST /_simulator/advance-day[?days=N])', int('--day-new-runs'), 3)
  .option('--day-updated-pull-requests <n>', 'open pull requests updated per advanced day (the first merged)', int('--day-updated-pull-requests'), 2)
  .option('--day-new-pull-requests <n>', 'pull requests opened per advanced day', int('--day-new-pull-requests'), 1)
  .option('--token <token>', 'answer 401 Bad credentials to any other token')
  .option('--graphql-limit-type <type>', 'the type of GraphQL rate-limit errors: RATE_LIMITED or RATE_LIMIT', 'RATE_LIMITED')
  .option('--reset-ahead <seconds>', 'limited answers claim a reset this many seconds ahead', int('--reset-ahead'))
  .option('--runs-next <self|origin>', "runs listings' Link next: the page itself, or on another origin (a base URL)")
  .option('--graphql-max-first <n>', 'a GraphQL page asking for more nodes answers 502 (a page that took too long)', int('--graphql-max-first'))
  .option('--drain-after <resource:n>', 'another consumer drains the window of graphql|core after n requests')
  .option('--secondary-from <n>', 'answer every request from the n-th on with a secondary limit', int('--secondary-from'))
  .option('--secondary-retry-after <seconds>', "the secondary limit's retry-after (none: without)", int('--secondary-retry-after'))
  .option('--secondary-remaining-zero', 'the secondary limit comes with x-ratelimit-remaining 0')
  .option('--secondary-resource <graphql|core>', 'only this resource is limited, its requests counted apart')
  .option('--secondary-status <200|403>', "GraphQL's secondary limit as a 200 with an error, or a 403", '403')
  .parse(process.argv);

const opts = program.opts<{ port: number; repos: number; pullRequests: number; runs: number; jobs: number; limit: number; coreLimit?: number; window: number; latency: number; clockOffset: number; fault?: string[]; exitWithStdin?: boolean; token?: string; dayNewRuns: number; dayUpdatedPullRequests: number; dayNewPullRequests: number; graphqlLimitType: string; resetAhead?: number; runsNext?: string; graphqlMaxFirst?: number; drainAfter?: string; secondaryFrom?: number; secondaryRetryAfter?: number; secondaryRemainingZero?: boolean; secondaryResource?: string; secondaryStatus: string }>();
const usage = (message: string): never => {
  process.stderr.write(`${message}\n`);
  process.exit(64);
};
const drainMatch = opts.drainAfter === undefined ? null : /^(graphql|core):(\d+)$/.exec(opts.drainAfter) ?? usage(`--drain-after ${opts.drainAfter}: expected graphql:N or core:N`);
if (opts.secondaryResource !== undefined && opts.secondaryResource !== 'graphql' && opts.secondaryResource !== 'core') usage(`--secondary-resource ${opts.secondaryResource}: expected graphql or core`);
if (opts.secondaryStatus !== '200' && opts.secondaryStatus !== '403') usage(`--secondary-status ${opts.secondaryStatus}: expected 200 or 403`);
if (opts.graphqlLimitType !== 'RATE_LIMITED' && opts.graphqlLimitType !== 'RATE_LIMIT') {
  process.stderr.write(`--graphql-limit-type ${opts.graphqlLimitType}: expected RATE_LIMITED or RATE_LIMIT\n`);
  process.exit(64);
}
const faults: Record<string, FaultSpec> = {};
for (const f of opts.fault ?? []) {
  const m = /^([^=]+)=(server-error|malformed|drop|slow|forbidden|truncated|huge|drop-once|server-error-once):(changes|checks)$/.exec(f);
  if (!m) {
    process.stderr.write(`--fault ${f}: expected owner/name=server-error|malformed|drop|slow|forbidden|truncated|huge|drop-once|server-error-once:changes|checks\n`);
    process.exit(64);
  }
  faults[m[1]] = { kind: m[2] as FaultKind, stage: m[3] as FaultSpec['stage'] };
}
const simulator = new GithubSimulator({
  repos: opts.repos, pullRequestsPerRepo: opts.pullRequests, runsPerRepo: opts.runs, jobsPerRun: opts.jobs,
  limits: { graphql: opts.limit, core: opts.coreLimit ?? opts.limit }, windowSeconds: opts.window, latencyMs: opts.latency,
  clockOffsetMs: opts.clockOffset, faults,
  day: { newRuns: opts.dayNewRuns, updatedPullRequests: opts.dayUpdatedPullRequests, newPullRequests: opts.dayNewPullRequests }, token: opts.token, graphqlLimitType: opts.graphqlLimitType, resetAheadSeconds: opts.resetAhead,
  graphqlMaxFirst: opts.graphqlMaxFirst,
  drainAfter: drainMatch === null ? undefined : { resource: drainMatch[1] as 'graphql' | 'core', requests: Number(drainMatch[2]) },
  secondaryFrom: opts.secondaryFrom === undefined ? undefined : {
    requests: opts.secondaryFrom, retryAfterSeconds: opts.secondaryRetryAfter ?? null, remainingZero: opts.secondaryRemainingZero === true,
    resource: opts.secondaryResource as 'graphql' | 'core' | undefined, status: opts.secondaryStatus === '200' ? 200 : 403,
  },
  runsNext: opts.runsNext === undefined ? undefined : opts.runsNext === 'self' ? 'self' : { foreignOrigin: new URL(opts.runsNext).origin },
});
simulator.start(opts.port).then((url) => {
  process.stdout.write(`${JSON.stringify({ url, repos: simulator.repoNames.length, windowSeconds: opts.window })}\n`);
  const stop = () => { void simulator.stop().then(() => process.exit(0)); };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  if (opts.exitWithStdin === true) {
    process.stdin.on('end', stop);
    process.stdin.on('close', stop);
    process.stdin.resume();
  }
}).catch((err: unknown) => {
  process.stderr.write(`github simulator: ${String(err)}\n`);
  process.exit(1);
});
