import type { RawData } from 'ws';

/** The text of a WebSocket frame, whichever of its three shapes `ws` delivers it in. */
export function wsText(data: RawData): string {
  if (Buffer.isBuffer(data)) return data.toString('utf8');
  if (Array.isArray(data)) return Buffer.concat(data).toString('utf8');
  return Buffer.from(data).toString('utf8');
}
