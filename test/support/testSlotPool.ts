import { SlotPool, type SlotPoolOptions } from '../../agent/slots/slotPool';
import { privatePolicy } from '../../agent/station/stationPolicy';
import { memoryLogger } from './memoryLogger';

/** A file-backed pool as a test needs one: private folder, no recorded runs, a quiet logger; `extra` overrides. */
export function testSlotPool(name: string, dir: string, size: number, extra: Partial<SlotPoolOptions> = {}): SlotPool {
  return new SlotPool({
    name,
    dir,
    size,
    waitTimeoutSeconds: 60,
    policy: privatePolicy(),
    isRecordedRun: () => false,
    logger: memoryLogger(),
    onReclaim: () => {},
    ...extra,
  });
}
