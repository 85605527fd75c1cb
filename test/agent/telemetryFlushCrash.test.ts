import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Flusher } from '../../agent/telemetry/flusher';
import type { FlushStep } from '../../agent/telemetry/faultInjection';
import { spawnFlushOnce } from '../fixtures/telemetryChild';
import { eventIdsIn, tempSpool, usePostgres } from '../fixtures/telemetryTestBed';

const pgdb = usePostgres();

const STEPS: readonly FlushStep[] = ['before-begin', 'after-insert', 'after-commit'];
const ROUNDS = 50;
const PARALLEL = 4;
const BATCH = 5;
const EVENTS_PER_ROUND = 30;

test(`kill -9 of the flushing process at every step, ${ROUNDS * PARALLEL} times: PostgreSQL ends with each event exactly once`, async () => {
  const bed = tempSpool();
  const made = new Set<string>();
  const flusher = new Flusher({ spool: bed.spool, databaseUrl: pgdb.url, logger: bed.logger, batchSize: BATCH });
  try {
    assert.equal((await flusher.flushNow()).error, null, 'schema in place before the loop');
    let overlapBefore = 0;
    for (let round = 0; round < ROUNDS; round += 1) {
      const step = STEPS[round % STEPS.length];
      // Crash in the first batch of a flush, or in the second after one batch went through whole.
      const nth = 1 + (Math.floor(round / STEPS.length) % 2);
      for (let i = 0; i < EVENTS_PER_ROUND; i += 1) {
        const id = bed.spool.emit({
          runId: `run-${round}-${i % 3}`,
          event: i % 3 === 0 ? 'start' : 'heartbeat',
          task: 'crashy',
          pool: 'heavy-io',
          payload: { round, i },
        });
        assert.ok(id !== null);
        made.add(id);
      }
      // Several flushers at once: they queue on the spool's flush lock, and each one that gets it is killed.
      const children = Array.from({ length: PARALLEL }, () =>
        spawnFlushOnce({
          TEST_SPOOL: bed.spoolPath,
          TEST_DATABASE_URL: pgdb.url,
          TEST_BATCH_SIZE: String(BATCH),
          QUANTILICA_FLUSH_CRASH_AT: `${step}:${nth}`,
        }),
      );
      const exits = await Promise.all(children.map((c) => c.exit));
      for (const exit of exits) {
        assert.equal(
          exit.signal,
          'SIGKILL',
          `round ${round} (${step}:${nth}): the child must die at the crash point; it ended with ${exit.code}: ${exit.stderr}`,
        );
      }

      // After every round: spool ∪ PostgreSQL is everything made. They overlap by exactly the batch
      // committed but not yet deleted after an after-commit crash; a flush that got one batch through
      // whole (nth = 2) removed any overlap; one that died in its first batch changed nothing.
      const inPg = new Set(await eventIdsIn(pgdb.client));
      const inSpool = bed.spool.readBatch(1_000_000).map((e) => e.eventId);
      const union = new Set([...inPg, ...inSpool]);
      assert.equal(union.size, made.size, `round ${round} (${step}): an event was lost`);
      for (const id of union) assert.ok(made.has(id), 'PostgreSQL holds an event nobody made');
      const overlap = inSpool.filter((id) => inPg.has(id)).length;
      const expected = step === 'after-commit' ? BATCH : nth === 2 ? 0 : overlapBefore;
      assert.equal(overlap, expected, `round ${round} (${step}:${nth}): overlap`);
      assert.deepEqual(
        inSpool.slice(0, overlap).filter((id) => inPg.has(id)).length,
        overlap,
        'the overlap is the oldest batch in the spool',
      );
      overlapBefore = overlap;
    }

    const final = await flusher.flushNow();
    assert.equal(final.error, null);
    assert.equal(bed.spool.pending(), 0);
    const stored = await eventIdsIn(pgdb.client);
    assert.equal(stored.length, made.size, 'each event exactly once');
    assert.deepEqual(new Set(stored), made);
    const counted = await pgdb.client.query<{ n: string }>('SELECT sum(event_count) AS n FROM core.task_run');
    assert.equal(Number(counted.rows[0].n), made.size, 'task_run counters count each event once despite the resends');
  } finally {
    await flusher.close();
    bed.cleanup();
  }
});
