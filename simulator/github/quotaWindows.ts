export type Resource = 'graphql' | 'core';

/**
 * GitHub's primary rate limit: so many points per resource per window. Windows here are aligned to
 * whole multiples of their length on the server's clock, so `x-ratelimit-reset` (epoch seconds) is
 * exact; the window is seconds long instead of an hour.
 */
export class QuotaWindows {
  private readonly used = new Map<Resource, { window: number; used: number }>();

  constructor(private readonly limits: Record<Resource, number>, private readonly windowSeconds: number) {}

  /** The window's state at a server time; `take` spends `cost` points when there are enough. */
  state(resource: Resource, serverMs: number): { limit: number; used: number; remaining: number; reset: number } {
    const window = Math.floor(serverMs / (this.windowSeconds * 1000));
    let entry = this.used.get(resource);
    if (!entry || entry.window !== window) {
      entry = { window, used: 0 };
      this.used.set(resource, entry);
    }
    const limit = this.limits[resource];
    return { limit, used: entry.used, remaining: Math.max(0, limit - entry.used), reset: (window + 1) * this.windowSeconds };
  }

  take(resource: Resource, serverMs: number, cost: number): boolean {
    const s = this.state(resource, serverMs);
    if (s.remaining < cost) return false;
    this.used.get(resource)!.used += cost;
    return true;
  }

  /** Points given back: an answer that, as GitHub's 304s, does not count against the limit. */
  give(resource: Resource, serverMs: number, cost: number): void {
    this.state(resource, serverMs);
    const entry = this.used.get(resource)!;
    entry.used = Math.max(0, entry.used - cost);
  }

  /** Another consumer of the same token (a second collector, `gh`) spends what is left of the window. */
  drain(resource: Resource, serverMs: number): number {
    const s = this.state(resource, serverMs);
    this.used.get(resource)!.used = s.limit;
    return s.reset;
  }
}
