import type pg from 'pg';
import { loadPg } from '../db/loadPg';
import { ErrorCodes, type RunInfo } from '../../shared/protocol';
import { ClientError, InvalidArgumentError, UnknownRunError } from '../errors';
import { ExitCode } from '../exitCodes';
import type { Logger } from '../log/logger';
import type { PgSlotBackend } from './pgSlotBackend';

/** The channel every agent of the shared slot database listens on; the payload is the run id. */
const CHANNEL = 'quantilica_cancel';
/** How long the asker waits for the owning station to take the request before it says so. */
const ANSWER_MS = 15_000;
/** How often the asker reads its request's row for the answer and the run's end. */
const POLL_MS = 100;
/** The owner's look at its requests besides the notifications (a missed one costs at most this). */
const SCAN_MS = 5_000;
/** After the listening connection is lost, the wait before connecting again. */
const RECONNECT_MS = 1_000;

/** What the owning station's run manager does for a request (a local cancel, and the run's end). */
export interface CancelOwner {
  /** As RunManager.cancel: throws UnknownRunError (not ours) or InvalidArgumentError (already ended). */
  cancel(runId: string, by: string): RunInfo;
  waitRun(runId: string): Promise<RunInfo>;
  get(runId: string): RunInfo | null;
}

interface RequestRow {
  id: string;
  run_id: string;
  requested_by: string;
  state: string;
}

/**
 * Cancel from any station. A station asked to cancel a run it does not own finds the station
 * that does (core.slot_holder / core.slot_waiter of a live session), writes a row in core.run_cancel and
 * notifies `quantilica_cancel`. The owner's agent listens on a connection of its own, and also scans its
 * open requests when it starts, after a reconnect and every few seconds, so a missed notification only
 * delays a cancel. It claims the row, cancels the run as a local cancel would, writes its answer
 * (cancelling / not-found / already-ended) and, once the run has ended, the run as it ended.
 */
export class PgRunCancel {
  private listener: pg.Client | null = null;
  private scanTimer: NodeJS.Timeout | null = null;
  private reconnectTimer: NodeJS.Timeout | null = null;
  private scanning = false;
  private again = false;
  private closed = false;
  private lastConnectError: string | null = null;
  private owner: CancelOwner | null = null;
  private readonly handling = new Set<string>();
  /** Requests this process made: run id -> row id, so `waitRun` can follow the run on its station. */
  private readonly asked = new Map<string, string>();

  constructor(
    private readonly backend: PgSlotBackend,
    private readonly logger: Logger,
  ) {}

  /** The owner's side: listen, then act on the requests already waiting (made while no agent listened). */
  async listen(owner: CancelOwner): Promise<void> {
    this.owner = owner;
    await this.connect();
    this.scanTimer ??= setInterval(() => this.scan(), SCAN_MS);
    this.scanTimer.unref();
  }

  private async connect(): Promise<void> {
    if (this.closed) return;
    const client = new (loadPg().Client)({
      connectionString: this.backend.url,
      application_name: `quantilica-cancel ${this.backend.station}`,
      keepAlive: true,
      connectionTimeoutMillis: 10_000,
    });
    const lost = () => {
      if (this.listener !== client) return;
      this.listener = null;
      void client.end().catch(() => {});
      this.scheduleReconnect();
    };
    client.on('error', (err) => {
      if (this.listener === client)
        this.logger.warn({ err: err.message }, 'cancel listener connection lost: cancels from other stations wait until it is back');
      lost();
    });
    client.on('end', lost);
    client.on('notification', (msg) => {
      if (msg.channel === CHANNEL) this.scan();
    });
    try {
      await client.connect();
      await client.query('SET search_path = pg_catalog, pg_temp');
      await client.query(`LISTEN ${CHANNEL}`);
    } catch (err) {
      await client.end().catch(() => {});
      // Said once per cause: during an outage the retries every second would fill the log.
      const message = (err as Error).message;
      if (message !== this.lastConnectError)
        this.logger.warn({ err: message }, 'cannot listen for cancels from other stations; trying again');
      this.lastConnectError = message;
      this.scheduleReconnect();
      return;
    }
    if (this.closed) {
      await client.end().catch(() => {});
      return;
    }
    this.listener = client;
    this.lastConnectError = null;
    this.scan();
  }

  private scheduleReconnect(): void {
    if (this.closed || this.reconnectTimer) return;
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      void this.connect();
    }, RECONNECT_MS);
    this.reconnectTimer.unref();
  }

  /** Reads this station's open requests and acts on each one not already in hand. */
  private scan(): void {
    if (this.scanning) {
      this.again = true;
      return;
    }
    const client = this.listener;
    if (!client || this.closed) return;
    this.scanning = true;
    (async () => {
      const rows = (
        await client.query<RequestRow>(
          `SELECT id::text, run_id, requested_by, state FROM core.run_cancel
        WHERE station = $1 AND state IN ('pending', 'claimed') ORDER BY id`,
          [this.backend.station],
        )
      ).rows;
      for (const row of rows) {
        if (this.handling.has(row.id)) continue;
        // A claimed row not in hand was left by an earlier agent of this station: it is ours to finish.
        if (row.state === 'pending') {
          const claimed = await client.query("UPDATE core.run_cancel SET state = 'claimed' WHERE id = $1::bigint AND state = 'pending'", [
            row.id,
          ]);
          if (claimed.rowCount !== 1) continue;
        }
        this.handling.add(row.id);
        void this.handle(client, row)
          .catch((err: unknown) =>
            this.logger.warn({ runId: row.run_id, err: (err as Error).message }, 'cannot cancel a run another station asked to cancel'),
          )
          .finally(() => this.handling.delete(row.id));
      }
    })()
      .catch((err: unknown) => {
        this.logger.warn({ err: (err as Error).message }, 'cannot read the cancels asked of this station');
      })
      .finally(() => {
        this.scanning = false;
        if (this.again) {
          this.again = false;
          this.scan();
        }
      });
  }

  private async handle(client: pg.Client, row: RequestRow): Promise<void> {
    const owner = this.owner;
    if (!owner) return;
    const answer = (sql: string, params: unknown[]) =>
      client.query(sql, [row.id, ...params]).catch((err: unknown) => {
        // The row stays claimed: the next scan on a new connection finishes it.
        this.logger.warn({ runId: row.run_id, err: (err as Error).message }, 'cannot answer a cancel asked by another station');
      });
    let info: RunInfo;
    try {
      info = owner.cancel(row.run_id, row.requested_by);
    } catch (err) {
      const ended = err instanceof InvalidArgumentError;
      if (!ended && !(err instanceof UnknownRunError)) throw err;
      await answer(
        `UPDATE core.run_cancel SET state = 'done', outcome = coalesce(outcome, $2), run = coalesce($3::jsonb, run), done_at = now() WHERE id = $1::bigint`,
        [ended ? 'already-ended' : 'not-found', ended ? JSON.stringify(owner.get(row.run_id)) : null],
      );
      return;
    }
    this.logger.info({ runId: row.run_id, by: row.requested_by }, 'cancel-from-station: another station asked to cancel this run');
    await answer("UPDATE core.run_cancel SET outcome = 'cancelling', run = $2::jsonb WHERE id = $1::bigint", [JSON.stringify(info)]);
    const end = await owner.waitRun(row.run_id);
    await answer("UPDATE core.run_cancel SET state = 'done', run = $2::jsonb, done_at = now() WHERE id = $1::bigint", [
      JSON.stringify(end),
    ]);
  }

  /**
   * The asker's side: cancels a run another station owns. Returns the run as its owner saw it once the
   * cancel was under way; throws UnknownRunError when no station owns it (or its owner does not know
   * it), InvalidArgumentError when it has already ended (then `waitEnd` gives how), and an
   * unavailable error when the owner's agent does not answer (the request is then withdrawn).
   */
  async request(runId: string): Promise<RunInfo> {
    try {
      return await this.ask(runId);
    } catch (err) {
      if (err instanceof ClientError) throw err;
      // Which station owns the run cannot be known now: say so rather than "unknown run".
      throw new ClientError(
        ErrorCodes.unavailable,
        ExitCode.agentUnavailable,
        `run ${runId} is not this station's and the slot database cannot be reached to ask the others: ${(err as Error).message}`,
      );
    }
  }

  private async ask(runId: string): Promise<RunInfo> {
    const { backend } = this;
    const owner = (
      await backend.use((c) =>
        c.query<{ station: string }>(
          `SELECT o.station FROM (
        SELECT h.station, h.backend_pid FROM core.slot_holder h WHERE h.run_id = $1
        UNION ALL SELECT w.station, w.backend_pid FROM core.slot_waiter w WHERE w.run_id = $1) o
      WHERE o.station <> $2 AND EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a WHERE a.pid = o.backend_pid) LIMIT 1`,
          [runId, backend.station],
        ),
      )
    ).rows[0]?.station;
    if (owner === undefined) {
      // Owned by no station now (its slot already freed): an earlier request's row says how it is ending or ended.
      const earlier = (
        await backend.use((c) =>
          c.query<{ id: string; station: string; state: string; run: RunInfo }>(
            `SELECT id::text, station, state, run
        FROM core.run_cancel WHERE run_id = $1 AND outcome IN ('cancelling', 'already-ended') AND run IS NOT NULL ORDER BY id DESC LIMIT 1`,
            [runId],
          ),
        )
      ).rows[0];
      if (earlier === undefined) throw new UnknownRunError(runId);
      this.asked.set(runId, earlier.id);
      if (earlier.state !== 'done') return earlier.run;
      throw new InvalidArgumentError(`run ${runId} is not active on station ${earlier.station}; nothing to cancel`);
    }
    const id = (
      await backend.use((c) =>
        c.query<{ id: string }>(
          `WITH r AS (INSERT INTO core.run_cancel (run_id, station, requested_by) VALUES ($1, $2, $3) RETURNING id)
      SELECT r.id::text AS id, pg_catalog.pg_notify($4, $1) FROM r`,
          [runId, owner, backend.station, CHANNEL],
        ),
      )
    ).rows[0]?.id;
    if (id === undefined) throw new Error('the cancel request was not recorded');
    const deadline = Date.now() + ANSWER_MS;
    let claimed = false;
    for (;;) {
      const row = await this.read(id);
      if (row?.outcome === 'cancelling') {
        this.asked.set(runId, id);
        return row.run!;
      }
      if (row?.outcome === 'not-found') throw new UnknownRunError(runId);
      if (row?.outcome === 'already-ended') {
        this.asked.set(runId, id);
        throw new InvalidArgumentError(`run ${runId} is not active on station ${owner}; nothing to cancel`);
      }
      if (!claimed && Date.now() > deadline) {
        const withdrawn = await backend.use((c) =>
          c.query("UPDATE core.run_cancel SET state = 'no-answer', done_at = now() WHERE id = $1::bigint AND state = 'pending'", [id]),
        );
        if (withdrawn.rowCount === 1) {
          throw new ClientError(
            ErrorCodes.unavailable,
            ExitCode.agentUnavailable,
            `run ${runId} is held or queued on station ${owner}, whose agent did not answer within ${ANSWER_MS / 1000} s; nothing was cancelled`,
          );
        }
        claimed = true; // its owner took it meanwhile: its answer comes
      }
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  }

  /** The run's end on its station, for a run this process asked to cancel; null for any other run. */
  async waitEnd(runId: string): Promise<RunInfo | null> {
    const id = this.asked.get(runId);
    if (id === undefined) return null;
    for (;;) {
      const row = await this.read(id);
      if (row?.state === 'done' && row.run) return row.run;
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  }

  private async read(id: string): Promise<{ state: string; outcome: string | null; run: RunInfo | null } | undefined> {
    return (
      await this.backend.use((c) =>
        c.query<{ state: string; outcome: string | null; run: RunInfo | null }>(
          'SELECT state, outcome, run FROM core.run_cancel WHERE id = $1::bigint',
          [id],
        ),
      )
    ).rows[0];
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.scanTimer) clearInterval(this.scanTimer);
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.scanTimer = null;
    this.reconnectTimer = null;
    const client = this.listener;
    this.listener = null;
    await client?.end().catch(() => {});
  }
}
