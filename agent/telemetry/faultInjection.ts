// Fault-injection hook for the crash tests (test/agent/telemetryFlushCrash.test.ts): with
// QUANTILICA_FLUSH_CRASH_AT=<step>[:<n>] the process SIGKILLs itself the n-th time (default first) the
// flush reaches <step>. Without the variable this is one env lookup per batch step. Never set it in
// production.

export type FlushStep = 'before-begin' | 'after-insert' | 'after-commit';

const reached = new Map<FlushStep, number>();

export function faultPoint(step: FlushStep): void {
  const spec = process.env.QUANTILICA_FLUSH_CRASH_AT;
  if (spec === undefined || spec === '') return;
  const [at, nth] = spec.split(':');
  if (at !== step) return;
  const count = (reached.get(step) ?? 0) + 1;
  reached.set(step, count);
  if (count >= Number(nth ?? '1')) process.kill(process.pid, 'SIGKILL');
}
