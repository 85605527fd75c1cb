import { execFileSync, spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import * as crypto from 'node:crypto';

/** A throwaway unprivileged account (CI runs as root): the other user of a shared station. */
export interface UnprivilegedUser {
  name: string;
  uid: number;
  gid: number;
  /** Spawns a command as this user (setpriv: real and effective ids, no supplementary groups). */
  spawn(command: string, args: string[], options?: SpawnOptions): ChildProcess;
  remove(): void;
}

/** Makes a user with a unique name (prefix + random), so parallel test files never clash. */
export function createUnprivilegedUser(prefix: string): UnprivilegedUser {
  const name = `${prefix}${crypto.randomBytes(3).toString('hex')}`.slice(0, 30);
  execFileSync('useradd', ['--no-create-home', '--shell', '/usr/sbin/nologin', '--user-group', name], { stdio: 'ignore' });
  const uid = Number(execFileSync('id', ['-u', name], { encoding: 'utf8' }).trim());
  const gid = Number(execFileSync('id', ['-g', name], { encoding: 'utf8' }).trim());
  return {
    name,
    uid,
    gid,
    spawn: (command, args, options = {}) =>
      spawn('setpriv', ['--reuid', String(uid), '--regid', String(gid), '--clear-groups', '--', command, ...args], {
        ...options,
        env: { PATH: process.env.PATH, HOME: '/', ...options.env },
      }),
    /** The caller ends the processes it spawned (by their pid) first. */
    remove: () => execFileSync('userdel', [name], { stdio: 'ignore' }),
  };
}
