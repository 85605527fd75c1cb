import type { HistoryStore } from './historyStore';

// The agent's one history store, for the protocol handler: the agent's parts own and close it; an
// in-process CLI run has none (it keeps no history), and the request then answers with run spans only.
let current: HistoryStore | null = null;

export function setHistoryStore(store: HistoryStore | null): void {
  current = store;
}

export function historyStore(): HistoryStore | null {
  return current;
}
