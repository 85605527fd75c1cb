import * as os from 'node:os';
import { benchNumber, printTable } from './benchSupport';
import { RUNS, agentOverProtocol, round, spawnCeiling, type AgentFigures, type EntryPolicy } from './slots';

// The slots benchmark with run policies: the same 1,000 no-op runs through the real agent over its
// protocol, once with every catalog entry under a retry policy and a timeout, once without, in one run
// on one machine. The retry never triggers (/bin/true exits 0) and the timeout never falls due: what is
// measured is what the policies cost a run that needs none (their bookkeeping, the armed deadline).
// The rounds alternate (without, with, without, with) so that a change of the machine's load during
// the run falls on both sides; Node's spawn ceiling is measured before and after, as in slots.
// Run: npm run bench -- slotsPolicies   (or node out/bench/slotsPolicies.js [runs])

const ROUNDS = benchNumber('BENCH_ROUNDS', process.env.BENCH_ROUNDS, 2, { min: 1, max: 100, whole: true });
const POLICY: EntryPolicy = {
  retry: { attempts: 3, backoffSeconds: 30, maxBackoffSeconds: 3600, exitCodes: [75, 1] },
  timeoutSeconds: 3600,
};

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

async function main(): Promise<void> {
  const ceiling = await spawnCeiling();
  const without: AgentFigures[] = [];
  const withPolicy: AgentFigures[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    without.push(await agentOverProtocol(0));
    withPolicy.push(await agentOverProtocol(0, POLICY));
  }
  const ceilingAfter = await spawnCeiling();
  const side = (runs: AgentFigures[]) => ({
    runsPerSecond: round(mean(runs.map((r) => r.runsPerSecond))),
    rounds: runs.map((r) => round(r.runsPerSecond)),
    spawnLatencyP50Ms: round(mean(runs.map((r) => r.p50))),
    spawnLatencyP99Ms: round(mean(runs.map((r) => r.p99))),
    mainThreadCpuMsPerRun: round(mean(runs.map((r) => r.cpuMsPerRun))),
    processCpuMsPerRun: round(mean(runs.map((r) => r.processCpuMsPerRun))),
  });
  const a = side(without);
  const b = side(withPolicy);
  const result = {
    runs: RUNS,
    rounds: ROUNDS,
    policy: POLICY,
    spawnCeilingRunsPerSecond: round(ceiling),
    spawnCeilingAfterRunsPerSecond: round(ceilingAfter),
    withoutPolicy: a,
    withPolicy: b,
    throughputRatio: round(b.runsPerSecond / a.runsPerSecond),
    mainThreadCpuRatio: round(b.mainThreadCpuMsPerRun / a.mainThreadCpuMsPerRun),
    loadAverage: os.loadavg().map(round),
  };
  const rows: Array<[string, string, string]> = [
    [
      'Node spawn ceiling (/bin/true, 11 at a time)',
      `${result.spawnCeilingRunsPerSecond} runs/s`,
      `(${result.spawnCeilingAfterRunsPerSecond} after the agent)`,
    ],
    ['agent, no policy', `${a.runsPerSecond} runs/s`, `rounds ${a.rounds.join(', ')}`],
    ['agent, retry (3 attempts) + timeoutSeconds', `${b.runsPerSecond} runs/s`, `rounds ${b.rounds.join(', ')}`],
    ['policy / no policy, throughput', `${Math.round(result.throughputRatio * 100)} %`, 'target: no loss (>= 95 %, within noise)'],
    ['enqueue→spawn p50, no policy / policy', `${a.spawnLatencyP50Ms} / ${b.spawnLatencyP50Ms} ms`, ''],
    ['enqueue→spawn p99, no policy / policy', `${a.spawnLatencyP99Ms} / ${b.spawnLatencyP99Ms} ms`, 'target < 20 ms'],
    ['main-thread CPU per run, no policy / policy', `${a.mainThreadCpuMsPerRun} / ${b.mainThreadCpuMsPerRun} ms`, ''],
    ['agent CPU per run (all threads), no policy / policy', `${a.processCpuMsPerRun} / ${b.processCpuMsPerRun} ms`, ''],
  ];
  printTable(
    `slots benchmark with run policies, ${RUNS} no-op runs per round, ${ROUNDS} rounds each, load average ${result.loadAverage.join(' ')}`,
    rows,
  );
  process.stdout.write(`${JSON.stringify({ bench: 'slotsPolicies', ...result })}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`${String(err)}\n`);
  process.exitCode = 1;
});
