import * as crypto from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';

export type UpgradeVerdict =
  | { ok: true }
  | { ok: false; status: 400 | 401 | 403; body: string };

/** Hash of a token: comparing equal-length digests lets `timingSafeEqual` run on any input length. */
export function tokenDigest(token: string): Buffer {
  return crypto.createHash('sha256').update(token, 'utf8').digest();
}

/** 128 random bits at least; 256 here, base64url so it fits a header without escaping. */
export function newToken(): string {
  return crypto.randomBytes(32).toString('base64url');
}

/**
 * Decides a WebSocket upgrade before it happens. A browser always sends `Origin` on a WebSocket
 * upgrade, and a DNS-rebinding page reaches us under a foreign `Host`: both are refused outright, so
 * no web page can talk to the agent even if it guessed the token. Then the token must match.
 */
export function checkUpgrade(headers: IncomingHttpHeaders, port: number, expectedDigest: Buffer): UpgradeVerdict {
  if (headers.origin !== undefined) {
    return { ok: false, status: 403, body: `refused: requests from a browser (Origin ${JSON.stringify(headers.origin)}) may not connect to the Quantilica agent\n` };
  }
  const host = (headers.host ?? '').toLowerCase();
  if (host !== `127.0.0.1:${port}` && host !== `localhost:${port}`) {
    return { ok: false, status: 403, body: `refused: Host ${JSON.stringify(headers.host ?? '')} is not the agent's loopback address (127.0.0.1:${port} or localhost:${port})\n` };
  }
  const authorization = headers.authorization;
  if (authorization === undefined) {
    return { ok: false, status: 401, body: 'refused: no token; send "Authorization: Bearer <token>" with the token from the agent\'s connection file\n' };
  }
  const match = /^Bearer ([^\s]+)$/.exec(authorization);
  if (!match) {
    return { ok: false, status: 401, body: 'refused: the Authorization header must be "Bearer <token>"\n' };
  }
  if (!crypto.timingSafeEqual(tokenDigest(match[1]), expectedDigest)) {
    return { ok: false, status: 401, body: 'refused: wrong token; read it again from the agent\'s connection file (the agent may have restarted)\n' };
  }
  return { ok: true };
}
