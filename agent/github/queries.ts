/**
 * Every GraphQL document the sync sends, in one place, so a unit test can validate each against
 * GitHub's published schema (@octokit/graphql-schema). `rateLimit` rides along in every query: the
 * answer says what it cost and what is left, without a request of its own. Pull requests come newest
 * change first, so a sync that knows the newest change it stored stops after the first page it knew.
 */
export const PULL_REQUESTS_QUERY = `query pullRequests($owner: String!, $name: String!, $first: Int!, $cursor: String) {
  rateLimit { cost limit remaining resetAt }
  repository(owner: $owner, name: $name) {
    pullRequests(first: $first, after: $cursor, orderBy: { field: UPDATED_AT, direction: DESC }) {
      nodes {
        id number title state createdAt updatedAt mergedAt closedAt isDraft reviewDecision
        author { login } baseRefName headRefName headRefOid statusCheckRollup { state }
      }
      pageInfo { hasNextPage endCursor }
    }
  }
}`;

export const GRAPHQL_DOCUMENTS: readonly string[] = [PULL_REQUESTS_QUERY];
