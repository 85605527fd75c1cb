import type { GithubClient } from './githubClient';
import type { PendingCounters } from './pendingCounters';
import type { CheckpointRow, GithubStore } from './store/githubStore';
import type { StreamStore } from './store/streamStore';

/** What one repository's stage works with. */
export interface StageContext {
  store: GithubStore;
  streams: StreamStore;
  client: GithubClient;
  syncId: string;
  pending: PendingCounters;
  /** The repository's checkpoint row for this stage from an earlier leg, if any. */
  checkpoint: CheckpointRow | undefined;
  /** A full load whatever the streams' cursors (`github sync --full`): no If-None-Match either. */
  full: boolean;
}
