// A window's latencies as a log-bucket histogram, and its median: what the controller compares with
// the baseline. A median, not a mean (Envoy's adaptive concurrency takes a percentile too): one user's
// legitimately slow endpoint, or a few requests a client slowed down, move a mean as much as a hundred
// ordinary requests do, and a median not at all while they are fewer than half. Fixed buckets, so that
// replicas' histograms add up in the store (a field per bucket) and the leader takes the fleet's
// median: BUCKETS buckets, each 2^(1/4) (19 %) wider than the one before, from 0.1 ms to ~47 min (the
// first holds everything below, the last everything above). Each bucket keeps its count and the sum
// of its latencies: the median is the mean of the bucket that holds it, interpolated towards the
// mean of an adjacent bucket by rank (so that it moves smoothly as the latencies do, not in steps of
// 19 %), never across an empty bucket (so that no far outlier pulls it).

/** Buckets in a histogram. */
export const LATENCY_BUCKETS = 100
/** The upper bound of bucket 0, ms; bucket i (1 ≤ i < LATENCY_BUCKETS - 1) holds
 * [LOWEST_MS x 2^((i - 1) / 4), LOWEST_MS x 2^(i / 4)). */
const LOWEST_MS = 0.1
const PER_OCTAVE = 4

/** The bucket of a latency of `ms`. */
export function bucketOf(ms: number): number {
  if (!(ms >= LOWEST_MS)) return 0 // (NaN too)
  const index = 1 + Math.floor(PER_OCTAVE * Math.log2(ms / LOWEST_MS))
  return index < LATENCY_BUCKETS ? index : LATENCY_BUCKETS - 1
}

/** One bucket as the store keeps it: its index, how many latencies, their sum in µs. */
export type BucketEntry = readonly [bucket: number, count: number, sumUs: number]

export class LatencyHistogram {
  private readonly counts = new Float64Array(LATENCY_BUCKETS)
  private readonly sumsMs = new Float64Array(LATENCY_BUCKETS)
  /** Latencies added. */
  count = 0

  add(ms: number): void {
    const value = ms > 0 ? ms : 0
    const bucket = bucketOf(value)
    this.counts[bucket] = (this.counts[bucket] as number) + 1
    this.sumsMs[bucket] = (this.sumsMs[bucket] as number) + value
    this.count++
  }

  /** Add a bucket's count and sum (µs), as a store gives them; out-of-range or malformed ones are
   * ignored. */
  addBucket(bucket: number, count: number, sumUs: number): void {
    if (!Number.isInteger(bucket) || bucket < 0 || bucket >= LATENCY_BUCKETS) return
    if (!(count > 0) || !(sumUs >= 0)) return
    this.counts[bucket] = (this.counts[bucket] as number) + count
    this.sumsMs[bucket] = (this.sumsMs[bucket] as number) + sumUs / 1000
    this.count += count
  }

  /** The non-empty buckets, in order, as the store keeps them (sums rounded to µs). */
  entries(): BucketEntry[] {
    const out: BucketEntry[] = []
    for (let i = 0; i < LATENCY_BUCKETS; i++) {
      const count = this.counts[i] as number
      if (count > 0) out.push([i, count, Math.round((this.sumsMs[i] as number) * 1000)])
    }
    return out
  }

  static from(entries: readonly BucketEntry[]): LatencyHistogram {
    const histogram = new LatencyHistogram()
    for (const [bucket, count, sumUs] of entries) histogram.addBucket(bucket, count, sumUs)
    return histogram
  }

  /** The median latency, ms (undefined: empty). */
  median(): number | undefined {
    if (this.count === 0) return undefined
    const target = this.count / 2
    let below = 0
    let previous: { bucket: number; mean: number; middle: number } | undefined
    for (let i = 0; i < LATENCY_BUCKETS; i++) {
      const count = this.counts[i] as number
      if (count === 0) continue
      const mean = (this.sumsMs[i] as number) / count
      // Each bucket's latencies stand at their mean, at the middle of their ranks.
      const middle = below + count / 2
      if (middle >= target) {
        if (!previous) return mean
        // Between two adjacent buckets: along the line between their means, by rank.
        if (previous.bucket === i - 1)
          return (
            previous.mean + ((target - previous.middle) / (middle - previous.middle)) * (mean - previous.mean)
          )
        // Across empty buckets: the bucket whose latencies hold the median rank.
        return target <= below ? previous.mean : mean
      }
      below += count
      previous = { bucket: i, mean, middle }
    }
    return previous?.mean
  }
}
