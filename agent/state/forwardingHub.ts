import type { Change } from '../../shared/protocol';

/** Where parts made before the state hub publish: kept in order until the hub is attached. */
export interface ForwardingHub {
  publish(change: Change): void;
  attach(target: { publish(change: Change): void }): void;
}

/**
 * Parts such as the disk gate exist before the orchestrator that owns the hub; a change they publish
 * in between (the gate's first reading) is held and replayed on attach, in order, never dropped.
 */
export function forwardingHub(): ForwardingHub {
  let target: { publish(change: Change): void } | null = null;
  const early: Change[] = [];
  return {
    publish: (change) => {
      if (target !== null) target.publish(change);
      else early.push(change);
    },
    attach: (hub) => {
      target = hub;
      for (const change of early.splice(0)) hub.publish(change);
    },
  };
}
