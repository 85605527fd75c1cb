import { MalformedAnswerError } from './records';

/** No answer of GitHub's that the sync reads comes near this; a larger one is not an answer. */
export const MAX_ANSWER_BYTES = 50 * 1024 * 1024;

/**
 * The `fetch` the client gives Octokit: it sends nothing to another origin than the configured API's
 * (the token rides on every request), and reads each answer's body itself, counting bytes as they
 * arrive, so a huge answer is cut off at `maxBytes` instead of filling the memory. A success whose
 * JSON does not parse is a malformed answer here, where it is still known to be one.
 */
export function guardedFetch(apiRoot: string, maxBytes = MAX_ANSWER_BYTES): typeof fetch {
  const origin = new URL(apiRoot).origin;
  return async (input, init) => {
    const url = new URL(typeof input === 'string' ? input : input instanceof URL ? input.href : input.url);
    if (url.origin !== origin) throw new MalformedAnswerError(`a request to ${url.origin} refused: not the configured API`);
    const response = await fetch(url, init);
    const declared = Number(response.headers.get('content-length'));
    if (Number.isFinite(declared) && declared > maxBytes) {
      await response.body?.cancel().catch(() => {});
      throw new MalformedAnswerError(`an answer of ${declared} bytes: more than ${maxBytes}`);
    }
    if (response.body === null || response.status === 204 || response.status === 205 || response.status === 304) return response;
    const chunks: Uint8Array[] = [];
    let size = 0;
    // Leaving the loop early (throw) cancels the stream: the rest of the body is never read.
    for await (const value of response.body as unknown as AsyncIterable<Uint8Array>) {
      size += value.byteLength;
      if (size > maxBytes) throw new MalformedAnswerError(`an answer of more than ${maxBytes} bytes`);
      chunks.push(value);
    }
    const body = Buffer.concat(chunks);
    if (response.status < 300 && /json/i.test(response.headers.get('content-type') ?? '')) {
      try {
        JSON.parse(body.toString('utf8'));
      } catch {
        throw new MalformedAnswerError(`an answer of ${size} bytes that is not JSON`);
      }
    }
    return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
  };
}

/**
 * The `rel="next"` of a `Link` header as a path under the API root (what is stored as the cursor), or
 * null on the last page. A next URL on another origin or outside the API root, or one already followed
 * in this listing (a loop), is a malformed answer: it is never requested.
 */
export function nextPagePath(link: string | number | undefined, apiRoot: string, followed: Set<string>): string | null {
  const next = /<([^>]+)>;\s*rel="next"/.exec(String(link ?? ''))?.[1];
  if (next === undefined) return null;
  let url: URL;
  try {
    url = new URL(next, `${apiRoot}/`);
  } catch {
    throw new MalformedAnswerError('a Link next that is not a URL');
  }
  const root = new URL(`${apiRoot}/`);
  if (url.origin !== root.origin || !url.pathname.startsWith(root.pathname))
    throw new MalformedAnswerError(`a Link next outside the configured API (${url.origin})`);
  const path = `/${url.pathname.slice(root.pathname.length)}${url.search}`;
  if (followed.has(path)) throw new MalformedAnswerError(`a Link next already followed in this listing: ${path}`);
  followed.add(path);
  return path;
}
