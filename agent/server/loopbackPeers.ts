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
 * event loop (a flood of accepts shares one read) and again only for a connection accepted after.
 */
export class LoopbackPeers {
  private tables: string[] | null = null;
  private readAt = Number.NEGATIVE_INFINITY;
  private costMs = 0;

  /**
   * True when a read now keeps the reads to about a tenth of the thread. The tables grow with every
   * connection on the machine: with thousands open one read takes a hundred milliseconds or more.
   */
  affordable(now = performance.now()): boolean {
    return this.tables !== null || now - this.readAt >= 10 * this.costMs;
  }

  /** When the next read is affordable. */
  affordableInMs(now = performance.now()): number {
    return Math.max(0, this.readAt + 10 * this.costMs - now);
  }

  /**
   * The peer socket's uid; `null` when it is in no table (the peer closed already); `undefined` when
   * the tables cannot be read. `acceptedAt` (performance.now()): a connection missing from this
   * turn's read is looked up in a fresh one only if it was accepted after that read.
   */
  uidOf(ends: LoopbackEnds, acceptedAt: number): number | null | undefined {
    const keys = endsKeys(ends);
    if (keys.length === 0) return null;
    const cached = this.tables === null ? null : find(this.tables, keys);
    if (cached !== null) return cached;
    if (this.tables !== null && this.readAt >= acceptedAt) return null;
    this.read();
    return this.tables === null ? undefined : find(this.tables, keys);
  }

  private read(): void {
    const began = performance.now();
    const tables: string[] = [];
    for (const file of TABLES) {
      try {
        tables.push(fs.readFileSync(file, 'latin1'));
      } catch {
        // tcp6 is absent without IPv6; tcp alone is enough.
      }
    }
    if (this.tables === null)
      setImmediate(() => {
        this.tables = null;
      }).unref();
    this.tables = tables.length === 0 ? null : tables;
    this.readAt = began;
    this.costMs = performance.now() - began;
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
      const fields = text
        .slice(at + key.length + 3, end < 0 ? undefined : end)
        .trim()
        .split(/\s+/);
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
