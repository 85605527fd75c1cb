import * as crypto from 'node:crypto';

// The challenge of the agent's WebSocket upgrade, shared by the agent (which answers it) and its
// clients (the CLI, the extension), so both sides compute the same proofs.

/** The request header that carries the client's nonce, and the response header with the agent's proof. */
export const NONCE_HEADER = 'x-quantilica-nonce';
export const PROOF_HEADER = 'x-quantilica-agent-proof';

/** Hash of a token: comparing equal-length digests lets `timingSafeEqual` run on any input length. */
export function tokenDigest(token: string): Buffer {
  return crypto.createHash('sha256').update(token, 'utf8').digest();
}

/** A fresh nonce for the challenge (256 bits, base64url). */
export function newNonce(): string {
  return crypto.randomBytes(32).toString('base64url');
}

/**
 * The proofs of the challenge. Each side proves it knows the token by an HMAC over both nonces and
 * its own role, so neither proof can be replayed as the other, nor against another nonce.
 */
export function proofOf(role: 'agent' | 'client', token: string, clientNonce: string, agentNonce: string): string {
  return crypto.createHmac('sha256', token).update(`quantilica/${role}\n${clientNonce}\n${agentNonce}`).digest('base64url');
}

/** Constant-time comparison of two proofs (or any two strings). */
export function sameSecret(a: string, b: string): boolean {
  return crypto.timingSafeEqual(tokenDigest(a), tokenDigest(b));
}
