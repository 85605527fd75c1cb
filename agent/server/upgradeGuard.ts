import * as crypto from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { NONCE_HEADER, tokenDigest } from '../../shared/node/handshakeProof';

/** Why an upgrade or a connection was refused: a token for the aggregate count, never a header value. */
export type RefusalReason =
  | 'browser-origin'
  | 'foreign-host'
  | 'no-token'
  | 'bad-authorization'
  | 'wrong-token'
  | 'bad-nonce'
  | 'too-many-clients'
  | 'too-many-pending'
  | 'auth-timeout'
  | 'wrong-proof'
  /** A connection opened by another account (closed at accept). */
  | 'other-account'
  /** A connection whose peer was gone by the time its account was looked up. */
  | 'peer-gone';

const NONCE = /^[A-Za-z0-9_-]{22,64}$/;

export type UpgradeVerdict =
  /** `token`: authenticated by the bearer token at the upgrade. */
  | { ok: true; kind: 'token' }
  /** `challenge`: the client sent a nonce; the agent proves itself, then the client's first frame must prove it. */
  | { ok: true; kind: 'challenge'; clientNonce: string }
  | { ok: false; status: 400 | 401 | 403; reason: RefusalReason; body: string };

/** 128 random bits at least; 256 here, base64url so it fits a header without escaping. */
export function newToken(): string {
  return crypto.randomBytes(32).toString('base64url');
}

/**
 * Decides a WebSocket upgrade before it happens. A browser always sends `Origin` on a WebSocket
 * upgrade, and a DNS-rebinding page reaches us under a foreign `Host`: both are refused outright, so
 * no web page can talk to the agent even if it guessed the token. Then either the token matches
 * (`Authorization: Bearer`), or the client asks for the challenge with a nonce. Refusal bodies never
 * echo what the client sent: the log and the answer stay small whatever the headers hold.
 */
export function checkUpgrade(headers: IncomingHttpHeaders, port: number, expectedDigest: Buffer): UpgradeVerdict {
  if (headers.origin !== undefined) {
    return {
      ok: false,
      status: 403,
      reason: 'browser-origin',
      body: 'refused: requests from a browser (an Origin header) may not connect to the Quantilica agent\n',
    };
  }
  const host = (headers.host ?? '').toLowerCase();
  if (host !== `127.0.0.1:${port}` && host !== `localhost:${port}`) {
    return {
      ok: false,
      status: 403,
      reason: 'foreign-host',
      body: `refused: the Host header is not the agent's loopback address (127.0.0.1:${port} or localhost:${port})\n`,
    };
  }
  const authorization = headers.authorization;
  if (authorization === undefined) {
    const nonce = headers[NONCE_HEADER];
    if (typeof nonce === 'string') {
      if (!NONCE.test(nonce))
        return { ok: false, status: 400, reason: 'bad-nonce', body: `refused: ${NONCE_HEADER} must be 22 to 64 base64url characters\n` };
      return { ok: true, kind: 'challenge', clientNonce: nonce };
    }
    return {
      ok: false,
      status: 401,
      reason: 'no-token',
      body: 'refused: no token; send "Authorization: Bearer <token>" with the token from the agent\'s connection file\n',
    };
  }
  const match = /^Bearer ([^\s]+)$/.exec(authorization);
  if (!match) {
    return { ok: false, status: 401, reason: 'bad-authorization', body: 'refused: the Authorization header must be "Bearer <token>"\n' };
  }
  if (!crypto.timingSafeEqual(tokenDigest(match[1]), expectedDigest)) {
    return {
      ok: false,
      status: 401,
      reason: 'wrong-token',
      body: "refused: wrong token; read it again from the agent's connection file (the agent may have restarted)\n",
    };
  }
  return { ok: true, kind: 'token' };
}
