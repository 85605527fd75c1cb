import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { newRunId } from '../../agent/runs/newRunId';

test('run ids keep their shape, and their random parts do not repeat across refills of the random pool', () => {
  // 5,000 ids draw the 4,096-byte pool (1,024 ids) five times over.
  const ids = Array.from({ length: 5000 }, () => newRunId());
  for (const id of ids) assert.match(id, /^[0-9a-z]+-[0-9a-f]{8}$/);
  const tails = ids.map((id) => id.split('-')[1]);
  // A pool used twice would repeat the tails 1,024 ids apart; a slice used twice, next to each other.
  // (Two independent 32-bit draws are equal once in four billion.)
  for (let i = 0; i + 1 < tails.length; i++) assert.notEqual(tails[i], tails[i + 1]);
  for (let i = 0; i + 1024 < tails.length; i++) assert.notEqual(tails[i], tails[i + 1024]);
});
