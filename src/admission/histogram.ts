// A histogram series as plain numbers: observe() is a bucket search and three additions, on the
// request path, with nothing to hash. The middleware's metrics and the gateway's read them at scrape
// time (metrics.ts here, gateway/ops/metrics.ts), so both share the wait-time buckets too.

/** Seconds a request waited for its permit: the buckets of tollgate_wait_seconds (gateway) and
 * tollgate_policy_wait_seconds (middleware). */
export const WAIT_BUCKETS: readonly number[] = [
  0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
]

export interface Observer {
  observe(value: number): void
}

export class HistogramSeries implements Observer {
  /** Observations per bucket (not cumulative); the last slot counts those above every bound. */
  readonly counts: Float64Array
  sum = 0
  count = 0

  /** `bounds` sorted ascending. */
  constructor(readonly bounds: readonly number[]) {
    this.counts = new Float64Array(bounds.length + 1)
  }

  observe(value: number): void {
    // prom-client throws on these; on the request path a bad sample is dropped instead.
    if (!Number.isFinite(value)) return
    const bounds = this.bounds
    let i = 0
    while (i < bounds.length && value > (bounds[i] as number)) i++
    this.counts[i] = (this.counts[i] ?? 0) + 1
    this.sum += value
    this.count++
  }
}

/** prom-client's histogram values (cumulative `_bucket`s, `_sum`, `_count`) of the series of each
 * label value; several series of one label value (two middlewares of one name) add up. */
export function histogramValues(
  name: string,
  label: string,
  bounds: readonly number[],
  all: Iterable<[string, HistogramSeries]>,
): { labels: Record<string, string | number>; value: number; metricName: string }[] {
  const merged = new Map<string, HistogramSeries>()
  for (const [labelValue, series] of all) {
    let sum = merged.get(labelValue)
    if (!sum) merged.set(labelValue, (sum = new HistogramSeries(bounds)))
    for (let i = 0; i < sum.counts.length; i++) sum.counts[i] = (sum.counts[i] ?? 0) + (series.counts[i] ?? 0)
    sum.sum += series.sum
    sum.count += series.count
  }
  const values: { labels: Record<string, string | number>; value: number; metricName: string }[] = []
  for (const [labelValue, series] of merged) {
    let cumulative = 0
    for (let i = 0; i < bounds.length; i++) {
      cumulative += series.counts[i] as number
      const labels = { le: bounds[i] as number, [label]: labelValue }
      values.push({ labels, value: cumulative, metricName: `${name}_bucket` })
    }
    values.push({
      labels: { le: '+Inf', [label]: labelValue },
      value: series.count,
      metricName: `${name}_bucket`,
    })
    values.push({ labels: { [label]: labelValue }, value: series.sum, metricName: `${name}_sum` })
    values.push({ labels: { [label]: labelValue }, value: series.count, metricName: `${name}_count` })
  }
  return values
}
