// Which buckets of a keyed route, which resources of a read/write-locked route, and which flows of a
// fair route this replica sees most of lately: requests a second, decayed (half-life ~3 s), bounded
// per route. The dashboard lists the busiest and reads the fleet's figures of those only; /limits
// lists the buckets too.
import type { BucketArrivals } from '../../admission/arrivals.js'

/** What scores a route's requests: its cap's buckets, or its read/write lock's resources. */
export type Scored = 'buckets' | 'resources'

/** Busy buckets (or resources) shown per route. */
const BUSIEST = 5
/** Busiest flows listed per fair route (/limits, the dashboard). */
export const BUSIEST_FLOWS = 10
/** A score keeps this share a second (half-life ~3 s), and a route scores this many at most. */
const DECAY = 0.8
const MAX_SCORED = 1000

export class BusiestScores {
  /** Per route, each bucket's (or resource's) score. */
  private readonly scored: Record<Scored, Map<string, Map<string, number>>> = {
    buckets: new Map(),
    resources: new Map(),
  }
  /** Per fair route, each flow's score. */
  private readonly flows = new Map<string, Map<string, number>>()

  /** Decay a fair route's flow scores and add the last second's `arrivals`. */
  scoreFlows(route: string, arrivals: Map<string, number>): void {
    this.flows.set(
      route,
      decayed(this.flows.get(route), (scores) => {
        for (const [flow, count] of arrivals) scores.set(flow, (scores.get(flow) ?? 0) + count)
      }),
    )
  }

  /** A route gone from the config: its scores go too. */
  forget(route: string): void {
    this.scored.buckets.delete(route)
    this.scored.resources.delete(route)
    this.flows.delete(route)
  }

  /** The flows of a fair route that sent this replica the most requests lately (decayed): highest
   * first, with their share of those requests, BUSIEST_FLOWS at most. Names are request data. */
  busiestFlows(route: string): { flow: string; share: number }[] {
    const scores = this.flows.get(route)
    if (!scores) return []
    let total = 0
    for (const score of scores.values()) total += score
    return [...scores]
      .sort((a, b) => b[1] - a[1])
      .slice(0, BUSIEST_FLOWS)
      .map(([flow, score]) => ({ flow, share: Math.round((score / total) * 1000) / 1000 }))
  }

  /** Decay a route's bucket (or resource) scores and add the last second's requests (`arrivals`, an admission's). */
  score(route: string, arrivals: BucketArrivals, of: Scored = 'buckets'): void {
    const scored = this.scored[of]
    scored.set(
      route,
      decayed(scored.get(route), (scores) => {
        for (const [key, count] of arrivals.take()) scores.set(key, (scores.get(key) ?? 0) + count)
        // A bucket with requests in flight or waiting here stays listed, however long they take.
        for (const [key, count] of arrivals.present()) scores.set(key, Math.max(scores.get(key) ?? 0, count))
      }),
    )
  }

  /** The busiest buckets of a keyed route (per: tenant or ip), or resources of a read/write-locked
   * route, on this replica: highest score first, BUSIEST at most. */
  busiest(route: string, of: Scored = 'buckets'): string[] {
    const scores = this.scored[of].get(route)
    if (!scores) return []
    return [...scores]
      .sort((a, b) => b[1] - a[1])
      .slice(0, BUSIEST)
      .map(([key]) => key)
  }
}

/** `scores` decayed by a second (the small ones dropped), then given the last second's (`add`); at
 * most MAX_SCORED kept, the highest. */
function decayed(
  scores = new Map<string, number>(),
  add: (scores: Map<string, number>) => void,
): Map<string, number> {
  for (const [key, value] of scores) {
    const next = value * DECAY
    if (next < 0.05) scores.delete(key)
    else scores.set(key, next)
  }
  add(scores)
  if (scores.size <= MAX_SCORED) return scores
  return new Map([...scores].sort((a, b) => b[1] - a[1]).slice(0, MAX_SCORED))
}
