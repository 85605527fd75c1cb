import * as path from 'node:path';
import { tryLockIn, type SlotLock } from '../../agent/slots/slotLock';
import { VerifiedDir } from '../../agent/station/openInVerifiedDir';
import { privatePolicy, type StationPolicy } from '../../agent/station/stationPolicy';

/** Takes the slot at a path as a test does: the folder must pass the same checks. */
export function tryLockSlot(lockPath: string, policy: StationPolicy = privatePolicy()): SlotLock | null {
  const dir = VerifiedDir.open(path.dirname(lockPath), policy);
  if (!dir) return null;
  try {
    return tryLockIn(dir, path.basename(lockPath));
  } finally {
    dir.close();
  }
}
