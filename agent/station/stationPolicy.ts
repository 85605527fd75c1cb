import * as fs from 'node:fs';
import { UnsafeStationError } from './unsafeStationError';

/**
 * Who may share the slot folders with us. Without a group: this account alone (folders 0700, files
 * 0600). With QUANTILICA_LOCK_GROUP: also the members of that group (folders 2770, files 0660), for
 * stations where several accounts run fetchers against the same pools.
 */
export interface StationPolicy {
  uid: number;
  group: { name: string; gid: number } | null;
}

export function dirMode(policy: StationPolicy): number {
  return policy.group ? 0o2770 : 0o700;
}

export function fileMode(policy: StationPolicy): number {
  return policy.group ? 0o660 : 0o600;
}

/** The policy of this process; a group name (or number) that the system does not know is refused. */
export function stationPolicy(groupName: string | null): StationPolicy {
  const uid = process.getuid?.() ?? 0;
  if (groupName === null || groupName === '') return { uid, group: null };
  const gid = lookupGroup(groupName);
  if (gid === null) {
    throw new UnsafeStationError(
      'lock-group-unknown',
      `QUANTILICA_LOCK_GROUP=${groupName}: no such group on this station (see getent group); create it (groupadd ${groupName}) or leave the setting empty`,
    );
  }
  return { uid, group: { name: groupName, gid } };
}

/** The policy used where none is given: this account alone. */
export function privatePolicy(): StationPolicy {
  return { uid: process.getuid?.() ?? 0, group: null };
}

function lookupGroup(name: string): number | null {
  if (/^\d+$/.test(name)) return Number(name);
  let text: string;
  try {
    text = fs.readFileSync('/etc/group', 'utf8');
  } catch {
    return null;
  }
  for (const line of text.split('\n')) {
    const [groupName, , gid] = line.split(':');
    if (groupName === name && /^\d+$/.test(gid ?? '')) return Number(gid);
  }
  return null;
}
