import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { buildClientSchema, parse, validate, type IntrospectionQuery } from 'graphql';
import { GRAPHQL_DOCUMENTS, PULL_REQUESTS_QUERY } from '../../agent/github/queries';
import { REPO } from '../support/harness';

// Every GraphQL document the sync sends, validated against GitHub's published schema (the package's
// introspection result: its SDL file currently defines one field twice, which graphql-js refuses).
const introspection = JSON.parse(fs.readFileSync(path.join(REPO, 'node_modules', '@octokit', 'graphql-schema', 'schema.json'), 'utf8')) as {
  data?: IntrospectionQuery;
} & IntrospectionQuery;
const schema = buildClientSchema(introspection.data ?? introspection);

test("every GraphQL document the sync sends is valid against GitHub's published schema", () => {
  assert.ok(GRAPHQL_DOCUMENTS.length > 0);
  for (const document of GRAPHQL_DOCUMENTS)
    assert.deepEqual(
      validate(schema, parse(document)).map((e) => e.message),
      [],
    );
});

test('the validation can fail: a field GitHub does not have is reported', () => {
  const wrong = PULL_REQUESTS_QUERY.replace('mergedAt', 'mergedWhen');
  assert.match(
    validate(schema, parse(wrong))
      .map((e) => e.message)
      .join('\n'),
    /mergedWhen/,
  );
});

test('the pull requests query asks for what cursor pagination and the budget need', () => {
  assert.match(PULL_REQUESTS_QUERY, /pageInfo \{ hasNextPage endCursor \}/);
  assert.match(PULL_REQUESTS_QUERY, /rateLimit \{ cost limit remaining resetAt \}/);
  assert.match(PULL_REQUESTS_QUERY, /\$cursor: String\)/);
});
