// A prom-client histogram whose series are plain arrays (metrics.ts: the per-request durations).
import { Histogram, type Registry } from 'prom-client'
import { HistogramSeries, histogramValues } from '../../admission/histogram.js'

/**
 * A histogram whose series are plain arrays, one per label value, bound once (`series(value)`):
 * observe() is a bucket search and three additions, where prom-client's hashes its labels on every
 * call. Registered and exposed like any prom-client histogram (one label, `le` first as prom-client
 * writes it).
 */
export class PlainHistogram extends Histogram<string> {
  /** Upper bounds of the buckets, ascending (seconds). */
  readonly bounds: readonly number[]
  private readonly all = new Map<string, HistogramSeries>()

  constructor(
    private readonly config: {
      name: string
      help: string
      label: string
      buckets: number[]
      registers: Registry[]
    },
  ) {
    super({ ...config, labelNames: [config.label] })
    this.bounds = [...config.buckets].sort((a, b) => a - b)
  }

  /** Every series so far, by label value. */
  entries(): IterableIterator<[string, HistogramSeries]> {
    return this.all.entries()
  }

  /** The series of one label value (created at 0 on first use). */
  series(value: string): HistogramSeries {
    let found = this.all.get(value)
    if (!found) this.all.set(value, (found = new HistogramSeries(this.bounds)))
    return found
  }

  override async get(): Promise<Awaited<ReturnType<Histogram<string>['get']>>> {
    const { name, help, label } = this.config
    const values = histogramValues(name, label, this.bounds, this.all)
    return { name, help, type: 'histogram' as never, values, aggregator: 'sum', collect() {} }
  }

  /** What the registry reads for the text format (prom-client's own histogram has this method). */
  getForPromString(): ReturnType<PlainHistogram['get']> {
    return this.get()
  }
}
