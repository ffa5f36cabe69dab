// Metrics of middleware admissions on a prom-client Registry the user passes (`metrics: { registry }`).
// prom-client is an optional peer: it is loaded (dynamic import) only when the option is used, so a
// library user who never asks for metrics never loads it. One set of series per registry, labelled by
// policy name; values are read from the admissions' own counters at scrape time, so nothing is lost
// while prom-client loads and nothing is added to the request path.
import { type HistogramSeries, histogramValues, WAIT_BUCKETS } from './histogram.js'
import type { Logger, MetricsRegistry } from './options.js'

/** What is read of an admission (structurally: no import of admission.ts, which imports this). */
interface AnyAdmission {
  readonly config: { readonly name: string; readonly logger: Logger }
  readonly counters: {
    admitted: number
    rejected: Record<string, number>
    failedOpen: number
    lost: number
    storeErrors: number
    inFlight: number
    queued: number
  }
  readonly waits?: HistogramSeries | undefined
  /** An adaptive limit's (the `adaptive` option's), set after construction. */
  readonly adaptive?: { status(): { limit: number } } | undefined
}

/** The admissions counted on a registry, kept on the registry itself under a global symbol: the ESM
 * and the CommonJS copy of tollgate in one app feed one set (one registration per registry). */
const ADMISSIONS = Symbol.for('tollgate.metrics.admissions')
type Carrier = MetricsRegistry & { [ADMISSIONS]?: Set<AnyAdmission> }

/** Count `admission` on `registry`; the series appear once prom-client has loaded (a microtask or so
 * after the first call for a registry). A missing prom-client is logged, never thrown. */
export function attachMetrics(admission: AnyAdmission, registry: MetricsRegistry): void {
  const carrier = registry as Carrier
  const known = carrier[ADMISSIONS]
  if (known) {
    known.add(admission)
    return
  }
  const all = new Set([admission])
  carrier[ADMISSIONS] = all
  // A computed specifier: bundlers leave it to run time instead of failing where prom-client is not
  // installed (it is optional).
  const specifier = 'prom-client'
  ;(import(specifier) as Promise<typeof import('prom-client')>).then(
    (prom) => {
      try {
        register(prom, registry, all)
      } catch (error) {
        // e.g. a metric of that name registered by someone else: said, never a crash
        admission.config.logger.error('tollgate: could not register the middleware metrics', { error })
        process.emitWarning(
          `tollgate: could not register the middleware metrics: ${(error as Error).message}`,
        )
      }
    },
    (error: unknown) => {
      admission.config.logger.error('tollgate: the metrics option needs prom-client installed', { error })
      process.emitWarning(
        'tollgate: the metrics option needs prom-client installed (npm install prom-client)',
      )
    },
  )
}

const METRIC_NAMES = [
  'tollgate_policy_admitted_total',
  'tollgate_policy_rejected_total',
  'tollgate_policy_failed_open_total',
  'tollgate_policy_lease_lost_total',
  'tollgate_policy_store_errors_total',
  'tollgate_policy_in_flight',
  'tollgate_policy_queued',
  'tollgate_policy_wait_seconds',
  'tollgate_policy_adaptive_limit',
]

function register(
  prom: typeof import('prom-client'),
  registry: MetricsRegistry,
  admissions: Set<AnyAdmission>,
): void {
  const registers = [registry as unknown as import('prom-client').Registry]
  const taken = METRIC_NAMES.filter((name) => registry.getSingleMetric(name) !== undefined)
  if (taken.length > 0) throw new Error(`the registry already has ${taken.join(', ')}`)
  const each = (fn: (admission: AnyAdmission) => void) => {
    for (const admission of admissions) fn(admission)
  }
  new prom.Counter({
    name: 'tollgate_policy_admitted_total',
    help: 'Requests that got a permit, by policy',
    labelNames: ['policy'],
    registers,
    collect() {
      this.reset()
      each((a) => this.inc({ policy: a.config.name }, a.counters.admitted))
    },
  })
  new prom.Counter({
    name: 'tollgate_policy_rejected_total',
    help: 'Requests rejected without a permit, by policy and reason (busy, timeout, queue_full, store_unavailable)',
    labelNames: ['policy', 'reason'],
    registers,
    collect() {
      this.reset()
      each((a) => {
        for (const [reason, n] of Object.entries(a.counters.rejected))
          this.inc({ policy: a.config.name, reason }, n)
      })
    },
  })
  /** A counter or gauge per policy, read from the admissions at scrape time. `inc` after `reset`, not
   * `set`, for the gauges too: two middlewares of one name add up, as their counters do. */
  const series = (
    Kind: typeof prom.Counter | typeof prom.Gauge,
    name: string,
    help: string,
    read: (a: AnyAdmission) => number,
  ) =>
    new Kind({
      name,
      help,
      labelNames: ['policy'],
      registers,
      collect(this: { reset(): void; inc(labels: { policy: string }, value: number): void }) {
        this.reset()
        each((a) => this.inc({ policy: a.config.name }, read(a)))
      },
    })
  series(
    prom.Counter,
    'tollgate_policy_failed_open_total',
    'Requests let through without a permit because the store failed (failOpen, dryRun)',
    (a) => a.counters.failedOpen,
  )
  series(
    prom.Counter,
    'tollgate_policy_lease_lost_total',
    'Permits lost while their request was in flight',
    (a) => a.counters.lost,
  )
  series(
    prom.Counter,
    'tollgate_policy_store_errors_total',
    'Admissions the store failed',
    (a) => a.counters.storeErrors,
  )
  series(
    prom.Gauge,
    'tollgate_policy_in_flight',
    'Requests holding a permit in this process right now',
    (a) => a.counters.inFlight,
  )
  series(
    prom.Gauge,
    'tollgate_policy_queued',
    'Requests waiting for a permit in this process right now',
    (a) => a.counters.queued,
  )
  new prom.Gauge({
    name: 'tollgate_policy_adaptive_limit',
    help: 'The adaptive limit in force, by policy (policies with the adaptive option)',
    labelNames: ['policy'],
    registers,
    collect() {
      this.reset()
      each((a) => {
        if (a.adaptive) this.set({ policy: a.config.name }, a.adaptive.status().limit)
      })
    },
  })
  // The gateway's tollgate_wait_seconds, per policy: observed as plain numbers on the request path
  // (admission.ts), read here at scrape time.
  const name = 'tollgate_policy_wait_seconds'
  const help = 'Time an admitted request waited for its permit, by policy'
  class WaitHistogram extends prom.Histogram<'policy'> {
    override async get(): Promise<Awaited<ReturnType<import('prom-client').Histogram<'policy'>['get']>>> {
      const all: [string, HistogramSeries][] = []
      each((a) => {
        if (a.waits) all.push([a.config.name, a.waits])
      })
      const values = histogramValues(name, 'policy', WAIT_BUCKETS, all)
      return { name, help, type: 'histogram' as never, values, aggregator: 'sum', collect() {} }
    }

    /** What the registry reads for the text format. */
    getForPromString(): ReturnType<WaitHistogram['get']> {
      return this.get()
    }
  }
  new WaitHistogram({ name, help, labelNames: ['policy'], buckets: [...WAIT_BUCKETS], registers })
}
