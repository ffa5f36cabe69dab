// What a fair route's requests came to on this replica, by priority class (at most 8) and by flow
// label (bounded by the config), and which flow names arrive most (the dashboard's busiest flows).
// Plain numbers, read into the registry at scrape time (metrics.ts).

/** What a request of a class, and of a flow, came to (this replica's). */
export interface ClassCounts {
  admitted: number
  rejected: Record<string, number>
  /** Waiting for admission here right now. */
  waiting: number
}

/** One request's class and flow, as routes.ts decide() set them. */
export interface FairFacts {
  priority: number
  /** The flow's name (request data), for the busiest flows only: never a label. */
  flow: string | undefined
  /** The flow's label: a name from the config, or 'other'. */
  flowLabel: string
}

/** Flow names remembered per second for the busiest flows at most (each second, whatever arrives). */
const MAX_FLOW_ARRIVALS = 1000

/** A route's counts by class (at most 8) and by flow label (bounded by the config: routes.ts). */
export class FairMetrics {
  readonly classes = new Map<number, ClassCounts>()
  readonly flows = new Map<string, { admitted: number; rejected: number }>()
  /** Requests per flow name since takeArrivals() (the dashboard's busiest flows). */
  private arrivals = new Map<string, number>()

  private classOf(priority: number): ClassCounts {
    let counts = this.classes.get(priority)
    if (!counts) this.classes.set(priority, (counts = { admitted: 0, rejected: {}, waiting: 0 }))
    return counts
  }

  private flowOf(label: string): { admitted: number; rejected: number } {
    let counts = this.flows.get(label)
    if (!counts) this.flows.set(label, (counts = { admitted: 0, rejected: 0 }))
    return counts
  }

  arrived(facts: FairFacts): void {
    if (facts.flow === undefined) return
    const seen = this.arrivals.get(facts.flow)
    if (seen !== undefined) this.arrivals.set(facts.flow, seen + 1)
    else if (this.arrivals.size < MAX_FLOW_ARRIVALS) this.arrivals.set(facts.flow, 1)
  }

  waiting(facts: FairFacts, delta: 1 | -1): void {
    this.classOf(facts.priority).waiting += delta
  }

  admitted(facts: FairFacts): void {
    this.classOf(facts.priority).admitted++
    this.flowOf(facts.flowLabel).admitted++
  }

  rejected(facts: FairFacts, reason: string): void {
    const counts = this.classOf(facts.priority)
    counts.rejected[reason] = (counts.rejected[reason] ?? 0) + 1
    this.flowOf(facts.flowLabel).rejected++
  }

  /** Requests per flow name since the last call. */
  takeArrivals(): Map<string, number> {
    const taken = this.arrivals
    this.arrivals = new Map()
    return taken
  }
}
