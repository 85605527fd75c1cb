/**
 * Every GraphQL document the sync sends, in one place, so a unit test can validate each against
 * GitHub's published schema (@octokit/graphql-schema). `rateLimit` rides along in every query: the
 * answer says what it cost and what is left, without a request of its own.
 */
export const PULL_REQUESTS_QUERY = `query pullRequests($owner: String!, $name: String!, $first: Int!, $cursor: String) {
  rateLimit { cost limit remaining resetAt }
  repository(owner: $owner, name: $name) {
    pullRequests(first: $first, after: $cursor, orderBy: { field: CREATED_AT, direction: ASC }) {
      nodes { id number title state createdAt updatedAt mergedAt }
      pageInfo { hasNextPage endCursor }
    }
  }
}`;

export const GRAPHQL_DOCUMENTS: readonly string[] = [PULL_REQUESTS_QUERY];
