import type { SpoolStatus } from '../../shared/protocol';
import type { Spool, SpoolChange } from './spool';

/**
 * Forwards spool health to the state hub without a change per event: a burst of emits becomes at most
 * one publish per `intervalMs`, while a flush result, a database state change, a loss or a spool error
 * is published at once. Returns a dispose function that clears the timer.
 *
 * Wiring: `publishSpoolStatus(spool, (spool) => hub.publish({ kind: 'spool', spool }))`.
 */
export function publishSpoolStatus(spool: Spool, publish: (status: SpoolStatus) => void, intervalMs = 250): () => void {
  let timer: NodeJS.Timeout | null = null;
  let lastAt = 0;
  const send = () => {
    if (timer !== null) clearTimeout(timer);
    timer = null;
    lastAt = Date.now();
    publish(spool.status());
  };
  const unsubscribe = spool.onChange((change: SpoolChange) => {
    if (change !== 'emit' && !(change === 'lost' && Date.now() - lastAt < intervalMs)) {
      send();
      return;
    }
    if (timer !== null) return;
    timer = setTimeout(send, Math.max(0, lastAt + intervalMs - Date.now()));
    timer.unref();
  });
  return () => {
    unsubscribe();
    if (timer !== null) clearTimeout(timer);
    timer = null;
  };
}
