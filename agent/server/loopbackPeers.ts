import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';

/** The two ends of an accepted TCP connection, as the agent sees them. */
export interface LoopbackEnds {
  peerAddress: string;
  peerPort: number;
  localAddress: string;
  localPort: number;
}

const TABLES = ['/proc/net/tcp', '/proc/net/tcp6'];

/**
 * Which account opened a loopback connection to the agent: the owner (uid) of the peer's own socket,
 * the entry of /proc/net/tcp (or tcp6, for a dual-stack client) whose local end is the peer's
 * address and port and whose remote end is ours. The kernel fills that column from the socket's
 * creator, so no client can claim another account. The tables are read at most once per turn of the
 * event loop (a flood of accepts shares one read) and again only for a connection not in them yet.
 */
export class LoopbackPeers {
  private tables: string[] | null = null;

  /** The peer socket's uid; `null` when it is in no table (the peer closed already); `undefined` when the tables cannot be read. */
  uidOf(ends: LoopbackEnds): number | null | undefined {
    const keys = endsKeys(ends);
    if (keys.length === 0) return null;
    const fromThisTurn = this.tables !== null;
    const tables = this.read(false);
    if (tables === null) return undefined;
    const uid = find(tables, keys);
    if (uid !== null || !fromThisTurn) return uid;
    // Accepted after this turn's read: read again (the new tables hold the whole backlog).
    const fresh = this.read(true);
    return fresh === null ? undefined : find(fresh, keys);
  }

  private read(again: boolean): string[] | null {
    if (this.tables !== null && !again) return this.tables;
    const tables: string[] = [];
    for (const file of TABLES) {
      try {
        tables.push(fs.readFileSync(file, 'latin1'));
      } catch {
        // tcp6 is absent without IPv6; tcp alone is enough.
      }
    }
    if (tables.length === 0) return null;
    if (this.tables === null) setImmediate(() => { this.tables = null; }).unref();
    this.tables = tables;
    return tables;
  }
}

/**
 * The uid column of the row whose two ends are `key` ("  12: <local> <remote> st tx:rx tr:tm
 * retrnsmt uid …", single spaces between the ends): a search, not a parse of every row, so a table of
 * thousands of connections costs a scan per lookup.
 */
function find(tables: string[], keys: string[]): number | null {
  for (const text of tables) {
    for (const key of keys) {
      const at = text.indexOf(`: ${key} `);
      if (at < 0) continue;
      const end = text.indexOf('\n', at);
      const fields = text.slice(at + key.length + 3, end < 0 ? undefined : end).trim().split(/\s+/);
      const uid = Number(fields[4]);
      if (Number.isInteger(uid)) return uid;
    }
  }
  return null;
}

/**
 * The peer's socket as its own table row would name it: its end first, then ours. A dual-stack
 * client's socket is in tcp6 with both ends v4-mapped: both forms are looked up.
 */
function endsKeys(ends: LoopbackEnds): string[] {
  const peer = procAddress(ends.peerAddress);
  const local = procAddress(ends.localAddress);
  if (peer === null || local === null) return [];
  const key = (p: string, l: string) => `${p}:${port(ends.peerPort)} ${l}:${port(ends.localPort)}`;
  return [key(peer, local), key(toMapped(peer), toMapped(local))];
}

/** An address as /proc/net/tcp{,6} prints it: each 32-bit word in the host's byte order, in hex. */
function procAddress(address: string): string | null {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  const v4 = mapped ? mapped[1] : address;
  // The agent listens on 127.0.0.1 only: both ends are IPv4 (a dual-stack peer shows as v4-mapped).
  if (!net.isIPv4(v4)) return null;
  const bytes = Buffer.from(v4.split('.').map(Number));
  const words: string[] = [];
  for (let i = 0; i < bytes.length; i += 4) {
    const word = os.endianness() === 'LE' ? bytes.readUInt32LE(i) : bytes.readUInt32BE(i);
    words.push(word.toString(16).toUpperCase().padStart(8, '0'));
  }
  return words.join('');
}

/** An IPv4 address (8 hex digits, host order) written as ::ffff:a.b.c.d in tcp6's form. */
function toMapped(hex: string): string {
  const mappedWord = os.endianness() === 'LE' ? 'FFFF0000' : '0000FFFF';
  return `0000000000000000${mappedWord}${hex}`;
}

function port(n: number): string {
  return n.toString(16).toUpperCase().padStart(4, '0');
}
