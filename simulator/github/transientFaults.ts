/**
 * Faults of an ordinary day that pass: the first request of each distinct page (method, path, body)
 * of a repository's stage is dropped or answered 502, the request made again is answered. And GitHub's
 * 502 on a GraphQL page that takes too long: here any page asking for more than `maxFirst` nodes.
 */
export class TransientFaults {
  private readonly seen = new Set<string>();

  /** True the first time this request is seen (it is the one that fails). */
  firstTime(method: string, pathAndQuery: string, body: string): boolean {
    const key = `${method} ${pathAndQuery} ${body}`;
    if (this.seen.has(key)) return false;
    this.seen.add(key);
    return true;
  }
}

/** A GraphQL request whose `first` is above `maxFirst`: the page that times out. */
export function tooLargeGraphqlPage(body: string, maxFirst: number | undefined): boolean {
  if (maxFirst === undefined) return false;
  try {
    const first = Number((JSON.parse(body) as { variables?: { first?: unknown } }).variables?.first);
    return Number.isFinite(first) && first > maxFirst;
  } catch {
    return false;
  }
}
