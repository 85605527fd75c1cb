import type { GithubClient } from './githubClient';
import { MalformedAnswerError } from './records';
import type { StoredEtag } from './store/streamStore';

/** One page of a REST listing: its data, or `notModified` (a 304: the stored records are GitHub's). */
export interface RestPage {
  path: string;
  notModified: boolean;
  data: Record<string, unknown> | null;
  nextPath: string | null;
  etag: StoredEtag | null;
}

/**
 * The pages of a REST listing from `firstPath`, each asked with the ETag stored for its path (when
 * `etags` is given). A 304 carries neither a body nor a reliable `Link`, so its next page is the one
 * stored with its ETag; every next path is checked as a `Link` next is (origin, loop).
 */
export async function* restPages(
  client: GithubClient,
  firstPath: string,
  etags: Map<string, StoredEtag> | null,
  signal: AbortSignal,
  what: string,
): AsyncGenerator<RestPage> {
  const followed = new Set<string>();
  let path: string | null = firstPath;
  while (path !== null) {
    const known: StoredEtag | null = etags?.get(path) ?? null;
    const answer = await client.get(path, known?.etag ?? null, signal);
    if (answer.notModified && known !== null) {
      const nextPath: string | null = known.nextPath === null ? null : client.storedPath(known.nextPath, followed);
      yield { path, notModified: true, data: null, nextPath, etag: known };
      path = nextPath;
      continue;
    }
    const data = answer.data;
    if (typeof data !== 'object' || data === null || Array.isArray(data)) throw new MalformedAnswerError(`${what}: not an object`);
    const body = data as Record<string, unknown>;
    const nextPath = client.nextPath(answer.link, followed);
    const total = typeof body.total_count === 'number' ? body.total_count : null;
    yield {
      path,
      notModified: false,
      data: body,
      nextPath,
      etag: answer.etag === null ? null : { etag: answer.etag, nextPath, totalCount: total },
    };
    path = nextPath;
  }
}
