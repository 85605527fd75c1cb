import type { Spool } from '../telemetry/spool';
import type { RunJournal } from './runPorts';
import { toRunRow, type RunStore } from './runStore';

/**
 * The run journal of the agent: a run's state and its event go into the spool's database in one
 * transaction, group-committed with the moves of other runs (Spool.commit).
 */
export function spoolJournal(spool: Spool, store: RunStore): RunJournal {
  return {
    commit: (run, event, slotWaits) => spool.commit([toRunRow(run)], event === null ? [] : [event], slotWaits),
    record: (event) => spool.commit([], [event]),
    get: (runId) => store.get(runId),
    active: () => store.active(),
  };
}
