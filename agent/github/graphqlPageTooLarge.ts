/** The smallest GraphQL page the sync asks for: a 502 at this size is retried like any 5xx. */
export const MIN_GRAPHQL_PAGE = 10;

/**
 * A 502 on a GraphQL page: GitHub's answer to a query that took too long, most often because the
 * page is large. The page is asked again at half the size (never below MIN_GRAPHQL_PAGE) instead of
 * at the same size.
 */
export class GraphqlPageTooLargeError extends Error {
  constructor(readonly first: number) {
    super(`a GraphQL page of ${first} answered 502`);
    this.name = 'GraphqlPageTooLargeError';
  }

  get smaller(): number {
    return Math.max(MIN_GRAPHQL_PAGE, Math.floor(this.first / 2));
  }
}
