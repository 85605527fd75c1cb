import type { Migration } from '../../db/migration';

// Cancel from any station: a station asks the station that owns a run (the one whose keeper
// holds its slot, or whose agent queues it) to cancel it. The row is the request, its durable record and
// the answer; NOTIFY quantilica_cancel only wakes the owner sooner (a missed one is found by its scans).
export const migration004: Migration = {
  version: 4,
  name: 'run_cancel',
  sql: `
CREATE TABLE core.run_cancel (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  run_id text COLLATE "C" NOT NULL,
  -- The station that owns the run and must act; the one that asked.
  station text NOT NULL,
  requested_by text NOT NULL,
  requested_at timestamptz NOT NULL DEFAULT now(),
  -- pending -> claimed (the owner acts) -> done; or pending -> no-answer (the asker gave up first).
  state text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'claimed', 'done', 'no-answer')),
  -- The owner's answer, a token: cancelling, not-found, already-ended.
  outcome text CHECK (outcome IN ('cancelling', 'not-found', 'already-ended')),
  -- The run as the owner saw it when it answered, then when it ended (RunInfo JSON).
  run jsonb,
  done_at timestamptz
);
CREATE INDEX run_cancel_open_idx ON core.run_cancel (station, id) WHERE state IN ('pending', 'claimed');
`,
};
