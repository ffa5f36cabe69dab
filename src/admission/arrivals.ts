// Which buckets of a keyed admission get requests, for the gateway's dashboard: requests per bucket
// since it last asked, and those in flight or waiting here now. Off until something asks: the
// library's middleware, which nobody asks, counts nothing per bucket.

/** Buckets whose requests an admission counts at once. */
const MAX_TRACKED_KEYS = 1000

export class BucketArrivals {
  /** Requests per bucket since take() last asked, at most MAX_TRACKED_KEYS buckets: one Map update
   * per request. */
  private arrivals = new Map<string, number>()
  /** Requests in flight per bucket, while tracked. */
  private readonly holding = new Map<string, number>()
  /** Tracked once something asked (the dashboard). */
  private tracking = false

  constructor(
    /** The admission's requests waiting in the store's queue, per bucket. */
    private readonly waiting: ReadonlyMap<string, number>,
  ) {}

  /** Count from now on (the gateway, with its dashboard, from the first request). */
  track(): void {
    this.tracking = true
  }

  /** Requests per bucket since the last call (admitted, waiting or refused); starts counting anew. */
  take(): Map<string, number> {
    this.tracking = true
    const taken = this.arrivals
    this.arrivals = new Map()
    return taken
  }

  /** Requests in flight or waiting here, per bucket (once tracked). */
  present(): Map<string, number> {
    const present = new Map(this.holding)
    for (const [bucket, count] of this.waiting) present.set(bucket, (present.get(bucket) ?? 0) + count)
    return present
  }

  /** A request of `key` arrived. */
  arrived(key: string): void {
    if (!this.tracking) return
    const seen = this.arrivals.get(key)
    if (seen !== undefined) this.arrivals.set(key, seen + 1)
    else if (this.arrivals.size < MAX_TRACKED_KEYS) this.arrivals.set(key, 1)
  }

  /** A request of `key` was admitted (it holds until released()). */
  admitted(key: string): void {
    if (this.tracking) countUp(this.holding, key)
  }

  /** A request of `key` gave its permit back. */
  released(key: string): void {
    if (this.tracking) countDown(this.holding, key)
  }
}

/** One more of `key` in a count per key. */
function countUp(counts: Map<string, number>, key: string): void {
  counts.set(key, (counts.get(key) ?? 0) + 1)
}

/** One fewer of `key` (a count per key the admission keeps too); a key at 0 (or never counted) is not kept. */
export function countDown(counts: Map<string, number>, key: string): void {
  const left = (counts.get(key) ?? 1) - 1
  if (left > 0) counts.set(key, left)
  else counts.delete(key)
}
