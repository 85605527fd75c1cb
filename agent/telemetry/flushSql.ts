// The flush's one statement, as a string constant (bundled with the agent; see migrations/).
//
// A batch arrives as parallel arrays (unnest is far faster than a VALUES list of 40,000 parameters).
// Events are inserted with ON CONFLICT DO NOTHING, and only the rows actually inserted (RETURNING) are
// folded into core.task_run: a batch sent again after a crash changes nothing, counters included.
export const INSERT_BATCH = `
WITH incoming AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::text[], $6::text[], $7::jsonb[], $8::bigint[])
    AS i(event_id, run_id, event, at, task, pool, payload, spool_seq)
),
inserted AS (
  INSERT INTO core.task_run_log (event_id, run_id, event, at, task, pool, payload, spool_seq)
  SELECT event_id, run_id, event, at, task, pool, payload, spool_seq FROM incoming ORDER BY spool_seq
  ON CONFLICT (event_id) DO NOTHING
  RETURNING run_id, event, at, task, pool, payload, spool_seq
),
classified AS (
  SELECT inserted.*,
    CASE event WHEN 'finish' THEN coalesce(core.jsonb_text(payload->'status'), 'failed') WHEN 'skipped' THEN 'skipped'
      WHEN 'start' THEN 'running' WHEN 'heartbeat' THEN 'running' WHEN 'waiting' THEN 'waiting' END AS status,
    -- waiting < running < terminal; events that say nothing about the status rank 0 and never move it.
    CASE event WHEN 'finish' THEN 3 WHEN 'skipped' THEN 3 WHEN 'start' THEN 2 WHEN 'heartbeat' THEN 2 WHEN 'waiting' THEN 1 ELSE 0 END AS rank
  FROM inserted
),
top AS (
  SELECT DISTINCT ON (run_id) run_id, status, rank, at, payload
  FROM classified WHERE rank > 0 ORDER BY run_id, rank DESC, at DESC, spool_seq DESC
),
started AS (
  SELECT DISTINCT ON (run_id) run_id, at, payload FROM classified WHERE event = 'start' ORDER BY run_id, at, spool_seq
),
folded AS (
  SELECT run_id,
    (array_agg(nullif(task, '') ORDER BY spool_seq DESC) FILTER (WHERE task <> ''))[1] AS task,
    (array_agg(nullif(pool, '') ORDER BY spool_seq DESC) FILTER (WHERE pool <> ''))[1] AS pool,
    max(at) FILTER (WHERE event = 'heartbeat') AS last_heartbeat_at,
    -- Retries: the highest try a start or finish names (migration 005).
    coalesce(max(core.jsonb_int(payload->'attempt')) FILTER (WHERE event IN ('start', 'finish')), 1) AS attempts,
    max(at) AS last_event_at,
    count(*) AS event_count
  FROM classified GROUP BY run_id
),
upserted AS (
INSERT INTO core.task_run AS t (run_id, task, pool, status, status_rank, status_at, exit_code, signal, reason,
  started_at, finished_at, duration_seconds, last_heartbeat_at, last_event_at, event_count, slot, argv, host, pid,
  peak_memory_mb, cpu_seconds, attempts)
SELECT f.run_id, f.task, f.pool, coalesce(top.status, 'unknown'), coalesce(top.rank, 0), coalesce(top.at, '-infinity'),
  CASE WHEN top.rank = 3 THEN core.jsonb_int(top.payload->'exitCode') END,
  CASE WHEN top.rank = 3 THEN core.jsonb_text(top.payload->'signal') END,
  CASE WHEN top.rank = 3 THEN core.jsonb_text(top.payload->'reason') END,
  s.at,
  CASE WHEN top.rank = 3 THEN top.at END,
  CASE WHEN top.rank = 3 THEN coalesce(core.jsonb_num(top.payload->'durationSeconds'), extract(epoch FROM top.at - s.at)::double precision) END,
  f.last_heartbeat_at, f.last_event_at, f.event_count,
  core.jsonb_int(s.payload->'slot'),
  CASE WHEN jsonb_typeof(s.payload->'argv') = 'array' THEN s.payload->'argv' END,
  core.jsonb_text(s.payload->'host'),
  core.jsonb_int(s.payload->'pid'),
  -- memory ceilings: the finish carries the run's peak memory and CPU time (migration 002).
  CASE WHEN top.rank = 3 THEN core.jsonb_num(top.payload->'peakMemoryMb') END,
  CASE WHEN top.rank = 3 THEN core.jsonb_num(top.payload->'cpuSeconds') END,
  f.attempts
FROM folded f LEFT JOIN top USING (run_id) LEFT JOIN started s USING (run_id)
ON CONFLICT (run_id) DO UPDATE SET
  task = coalesce(EXCLUDED.task, t.task),
  pool = coalesce(EXCLUDED.pool, t.pool),
  status = CASE WHEN (EXCLUDED.status_rank, EXCLUDED.status_at) > (t.status_rank, t.status_at) THEN EXCLUDED.status ELSE t.status END,
  exit_code = CASE WHEN (EXCLUDED.status_rank, EXCLUDED.status_at) > (t.status_rank, t.status_at) THEN EXCLUDED.exit_code ELSE t.exit_code END,
  signal = CASE WHEN (EXCLUDED.status_rank, EXCLUDED.status_at) > (t.status_rank, t.status_at) THEN EXCLUDED.signal ELSE t.signal END,
  reason = CASE WHEN (EXCLUDED.status_rank, EXCLUDED.status_at) > (t.status_rank, t.status_at) THEN EXCLUDED.reason ELSE t.reason END,
  finished_at = CASE WHEN (EXCLUDED.status_rank, EXCLUDED.status_at) > (t.status_rank, t.status_at) THEN EXCLUDED.finished_at ELSE t.finished_at END,
  -- A finish without a duration gets one from the start it follows, whichever batch brought the start.
  duration_seconds = CASE WHEN (EXCLUDED.status_rank, EXCLUDED.status_at) > (t.status_rank, t.status_at)
    THEN coalesce(EXCLUDED.duration_seconds, extract(epoch FROM EXCLUDED.finished_at - least(t.started_at, EXCLUDED.started_at))::double precision)
    ELSE t.duration_seconds END,
  status_rank = greatest(t.status_rank, EXCLUDED.status_rank),
  status_at = CASE WHEN (EXCLUDED.status_rank, EXCLUDED.status_at) > (t.status_rank, t.status_at) THEN EXCLUDED.status_at ELSE t.status_at END,
  started_at = least(t.started_at, EXCLUDED.started_at),
  last_heartbeat_at = greatest(t.last_heartbeat_at, EXCLUDED.last_heartbeat_at),
  last_event_at = greatest(t.last_event_at, EXCLUDED.last_event_at),
  event_count = t.event_count + EXCLUDED.event_count,
  slot = coalesce(EXCLUDED.slot, t.slot),
  argv = coalesce(EXCLUDED.argv, t.argv),
  host = coalesce(EXCLUDED.host, t.host),
  pid = coalesce(EXCLUDED.pid, t.pid),
  peak_memory_mb = coalesce(EXCLUDED.peak_memory_mb, t.peak_memory_mb),
  cpu_seconds = coalesce(EXCLUDED.cpu_seconds, t.cpu_seconds),
  attempts = greatest(t.attempts, EXCLUDED.attempts),
  updated_at = now()
RETURNING 1
)
SELECT (SELECT count(*) FROM inserted)::integer AS inserted, (SELECT count(*) FROM upserted)::integer AS runs`;
