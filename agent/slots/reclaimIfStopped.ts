import * as fs from 'node:fs';
import { readCapped, type VerifiedDir } from '../station/openInVerifiedDir';
import { parseOwnerRecord, type OwnerRecord } from './ownerRecord';
import { childrenOf, isStopped, readProcInfo } from '../../shared/node/procInfo';
import { signalProvenGroup, type RecordedRun } from './provenHolder';

/** A stopped holder the pool killed to take its slot back (the seed's orphan rule). */
export interface ReclaimEvent {
  pool: string;
  index: number;
  lockPath: string;
  record: OwnerRecord;
  killedGroup: number | null;
}

export type ReclaimOutcome =
  { kind: 'none' } | { kind: 'reclaimed'; record: OwnerRecord } | { kind: 'refused'; record: OwnerRecord; why: string };

/**
 * A holder in state T keeps its slot forever while doing nothing: kill its group so the next try
 * takes the slot. Only a holder proven to be one of our runs is signalled (see whyNotOurRun); a
 * stopped process any record merely names is left alone and the refusal reported.
 */
export function reclaimIfStopped(dir: VerifiedDir, name: string, isRecordedRun: RecordedRun): ReclaimOutcome {
  let opened: { fd: number; st: fs.Stats } | null;
  try {
    opened = dir.openFile(name, { create: false, write: false });
  } catch {
    return { kind: 'none' };
  }
  if (!opened) return { kind: 'none' };
  try {
    const record = parseOwnerRecord(readCapped(opened.fd));
    if (!record) return { kind: 'none' };
    const info = readProcInfo(record.pid);
    if (!info || info.startTime !== record.startTime) return { kind: 'none' };
    const stopped =
      isStopped(info) ||
      childrenOf(info.pid).some((child) => {
        const c = readProcInfo(child);
        return c !== null && isStopped(c);
      });
    if (!stopped) return { kind: 'none' };
    const why = signalProvenGroup(record, opened.st, isRecordedRun, 'SIGKILL');
    return why ? { kind: 'refused', record, why } : { kind: 'reclaimed', record };
  } finally {
    fs.closeSync(opened.fd);
  }
}
