// Metrics of middleware admissions on a prom-client Registry the user passes (`metrics: { registry }`).
// prom-client is an optional peer: it is loaded (dynamic import) only when the option is used, so a
// library user who never asks for metrics never loads it. One set of series per registry, labelled by
// policy name; values are read from the admissions' own counters at scrape time, so nothing is lost
// while prom-client loads and nothing is added to the request path.
import { MAX_PRIORITY, PRIORITY_CLASSES, priorityName } from '../core/fair.js'
import { HistogramSeries, histogramValues, WAIT_BUCKETS } from './histogram.js'
import type { Logger, MetricsRegistry, RejectReason } from './options.js'

/** An admission's counters, read at scrape time (here, and by the gateway's metrics). */
export interface AdmissionCounters {
  admitted: number
  rejected: Record<RejectReason, number>
  failedOpen: number
  dryRunRejected: number
  lost: number
  storeErrors: number
  /** Requests holding a permit in this process right now. */
  inFlight: number
  /** Requests waiting in this process right now. */
  queued: number
}

export function zeroCounters(): AdmissionCounters {
  return {
    admitted: 0,
    rejected: { busy: 0, queue_full: 0, timeout: 0, store_unavailable: 0, shed: 0 },
    failedOpen: 0,
    dryRunRejected: 0,
    lost: 0,
    storeErrors: 0,
    inFlight: 0,
    queued: 0,
  }
}

/** Flows labelled by name at most (the config's first); every other flow is "other". */
export const MAX_NAMED_FLOWS = 100
/** The label of every flow the config does not name: a hostile header never adds a series. */
export const OTHER_FLOW = 'other'

/** What a flow's label counts. */
interface FlowCounts {
  admitted: number
  rejected: Partial<Record<RejectReason, number>>
}

/** Counts of an admission whose buckets are fair queues, per priority class (index 0-7) and per flow
 * label: plain numbers on the request path, read at scrape time as the other counters are. */
export class OverloadCounters {
  readonly admitted = new Float64Array(MAX_PRIORITY + 1)
  readonly rejected = new Map<RejectReason, Float64Array>()
  /** Requests of each class waiting in this process right now. */
  readonly queued = new Float64Array(MAX_PRIORITY + 1)
  readonly waits: HistogramSeries[] = []
  /** By label: the named flows (at most MAX_NAMED_FLOWS) and OTHER_FLOW, no other. */
  readonly flows = new Map<string, FlowCounts>()

  constructor(private readonly named: ReadonlySet<string>) {
    for (let p = 0; p <= MAX_PRIORITY; p++) this.waits.push(new HistogramSeries(WAIT_BUCKETS))
  }

  /** A flow's metric label: its name if the config names it, else OTHER_FLOW. */
  flowLabel(flow: string | undefined): string {
    return flow !== undefined && this.named.has(flow) ? flow : OTHER_FLOW
  }

  /** A request of class `priority` waits in this process (+1) or stopped waiting (-1). */
  waiting(priority: number, delta: 1 | -1): void {
    this.queued[priority] = (this.queued[priority] ?? 0) + delta
  }

  admit(fair: { priority: number; flow: string | undefined }, waitedS: number): void {
    this.admitted[fair.priority] = (this.admitted[fair.priority] ?? 0) + 1
    this.waits[fair.priority]?.observe(waitedS)
    this.flow(fair.flow).admitted++
  }

  reject(fair: { priority: number; flow: string | undefined }, reason: RejectReason): void {
    let byClass = this.rejected.get(reason)
    if (!byClass) this.rejected.set(reason, (byClass = new Float64Array(MAX_PRIORITY + 1)))
    byClass[fair.priority] = (byClass[fair.priority] ?? 0) + 1
    const counts = this.flow(fair.flow).rejected
    counts[reason] = (counts[reason] ?? 0) + 1
  }

  private flow(flow: string | undefined): FlowCounts {
    const label = this.flowLabel(flow)
    let counts = this.flows.get(label)
    if (!counts) this.flows.set(label, (counts = { admitted: 0, rejected: {} }))
    return counts
  }
}

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
  /** outage: 'share' (outage.ts). */
  readonly outage?:
    { readonly local: boolean; readonly inFlight: number; readonly replicas: number | undefined } | undefined
  /** An adaptive limit's (the `adaptive` option's), set after construction. */
  readonly adaptive?: { status(): { limit: number } } | undefined
  /** Per class and flow, for fair buckets (set after construction). */
  readonly overload?: OverloadCounters | undefined
}

/** The admissions counted on a registry, kept on the registry itself under a global symbol: the ESM
 * and the CommonJS copy of tollgate in one app feed one set (one registration per registry). */
const ADMISSIONS = Symbol.for('tollgate.metrics.admissions')

/** Count `admission` on `registry`; the series appear once prom-client has loaded (a microtask or so
 * after the first call for a registry). A missing prom-client is logged, never thrown. */
export function attachMetrics(admission: AnyAdmission, registry: MetricsRegistry): void {
  attach(admission, registry, ADMISSIONS, register)
}

/** The admissions with fair buckets counted on a registry (their own set: a registry that never sees
 * one never gets the per-class series). */
const OVERLOADED = Symbol.for('tollgate.metrics.overloaded')

/** Count `admission`'s classes and flows on `registry` (attachMetrics() counts the rest). */
export function attachOverloadMetrics(admission: AnyAdmission, registry: MetricsRegistry): void {
  attach(admission, registry, OVERLOADED, registerOverload)
}

function attach(
  admission: AnyAdmission,
  registry: MetricsRegistry,
  symbol: symbol,
  register: (prom: typeof import('prom-client'), registry: MetricsRegistry, all: Set<AnyAdmission>) => void,
): void {
  const carrier = registry as MetricsRegistry & Record<symbol, Set<AnyAdmission> | undefined>
  const known = carrier[symbol]
  if (known) {
    known.add(admission)
    return
  }
  const all = new Set([admission])
  carrier[symbol] = all
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

const OVERLOAD_METRIC_NAMES = [
  'tollgate_policy_class_admitted_total',
  'tollgate_policy_class_rejected_total',
  'tollgate_policy_class_queued',
  'tollgate_policy_class_wait_seconds',
  'tollgate_policy_flow_admitted_total',
  'tollgate_policy_flow_rejected_total',
]

/** The classes a scrape shows: the named ones always, another once it counted something. */
function shownClasses(counters: OverloadCounters): number[] {
  const named = new Set<number>(Object.values(PRIORITY_CLASSES))
  const shown: number[] = []
  for (let p = 0; p <= MAX_PRIORITY; p++) {
    let seen = named.has(p) || (counters.admitted[p] ?? 0) > 0 || (counters.queued[p] ?? 0) > 0
    for (const byClass of counters.rejected.values()) seen ||= (byClass[p] ?? 0) > 0
    if (seen) shown.push(p)
  }
  return shown
}

function registerOverload(
  prom: typeof import('prom-client'),
  registry: MetricsRegistry,
  admissions: Set<AnyAdmission>,
): void {
  const registers = [registry as unknown as import('prom-client').Registry]
  const taken = OVERLOAD_METRIC_NAMES.filter((name) => registry.getSingleMetric(name) !== undefined)
  if (taken.length > 0) throw new Error(`the registry already has ${taken.join(', ')}`)
  const each = (fn: (policy: string, counters: OverloadCounters) => void) => {
    for (const admission of admissions) if (admission.overload) fn(admission.config.name, admission.overload)
  }
  new prom.Counter({
    name: 'tollgate_policy_class_admitted_total',
    help: 'Requests that got a permit, by policy and priority class (policies with priority, flow or overload)',
    labelNames: ['policy', 'class'],
    registers,
    collect() {
      this.reset()
      each((policy, c) => {
        for (const p of shownClasses(c)) this.inc({ policy, class: priorityName(p) }, c.admitted[p] ?? 0)
      })
    },
  })
  new prom.Counter({
    name: 'tollgate_policy_class_rejected_total',
    help: 'Requests rejected without a permit, by policy, priority class and reason (shed among them)',
    labelNames: ['policy', 'class', 'reason'],
    registers,
    collect() {
      this.reset()
      each((policy, c) => {
        for (const [reason, byClass] of c.rejected)
          for (let p = 0; p <= MAX_PRIORITY; p++)
            if ((byClass[p] ?? 0) > 0) this.inc({ policy, class: priorityName(p), reason }, byClass[p])
      })
    },
  })
  new prom.Gauge({
    name: 'tollgate_policy_class_queued',
    help: 'Requests waiting for a permit in this process right now, by policy and priority class',
    labelNames: ['policy', 'class'],
    registers,
    collect() {
      this.reset()
      each((policy, c) => {
        for (const p of shownClasses(c)) this.inc({ policy, class: priorityName(p) }, c.queued[p] ?? 0)
      })
    },
  })
  new prom.Counter({
    name: 'tollgate_policy_flow_admitted_total',
    help: `Requests that got a permit, by policy and flow (flows named in overload.flowWeights or flowMax; every other: "${OTHER_FLOW}")`,
    labelNames: ['policy', 'flow'],
    registers,
    collect() {
      this.reset()
      each((policy, c) => {
        for (const [flow, counts] of c.flows) this.inc({ policy, flow }, counts.admitted)
      })
    },
  })
  new prom.Counter({
    name: 'tollgate_policy_flow_rejected_total',
    help: `Requests rejected without a permit, by policy, flow (as tollgate_policy_flow_admitted_total) and reason`,
    labelNames: ['policy', 'flow', 'reason'],
    registers,
    collect() {
      this.reset()
      each((policy, c) => {
        for (const [flow, counts] of c.flows)
          for (const [reason, n] of Object.entries(counts.rejected)) this.inc({ policy, flow, reason }, n)
      })
    },
  })
  const name = 'tollgate_policy_class_wait_seconds'
  const help = 'Time an admitted request waited for its permit, by policy and priority class'
  class ClassWaitHistogram extends prom.Histogram<'policy' | 'class'> {
    override async get(): Promise<
      Awaited<ReturnType<import('prom-client').Histogram<'policy' | 'class'>['get']>>
    > {
      const values: ReturnType<typeof histogramValues> = []
      each((policy, c) => {
        const all = shownClasses(c).map((p) => [priorityName(p), c.waits[p]] as [string, HistogramSeries])
        for (const value of histogramValues(name, 'class', WAIT_BUCKETS, all))
          values.push({ ...value, labels: { policy, ...value.labels } })
      })
      return { name, help, type: 'histogram' as never, values, aggregator: 'sum', collect() {} }
    }

    /** What the registry reads for the text format. */
    getForPromString(): ReturnType<ClassWaitHistogram['get']> {
      return this.get()
    }
  }
  new ClassWaitHistogram({
    name,
    help,
    labelNames: ['policy', 'class'],
    buckets: [...WAIT_BUCKETS],
    registers,
  })
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
  'tollgate_policy_outage_local',
  'tollgate_policy_outage_in_memory',
  'tollgate_policy_outage_replicas',
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
    help: 'Requests rejected without a permit, by policy and reason (busy, timeout, queue_full, store_unavailable, shed)',
    labelNames: ['policy', 'reason'],
    registers,
    collect() {
      this.reset()
      each((a) => {
        for (const [reason, n] of Object.entries(a.counters.rejected))
          // Only fair buckets shed: a policy without them shows the series it always showed.
          if (reason !== 'shed' || a.overload) this.inc({ policy: a.config.name, reason }, n)
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
  // outage: 'share' (outage.ts): whether a policy admits in memory, what runs so, and the replicas it
  // divides its limits by.
  for (const [metric, help, value] of [
    [
      'tollgate_policy_outage_local',
      "1 while the policy admits its share in memory (the store down or not back yet), by policy (outage: 'share')",
      (a: AnyAdmission) => (a.outage?.local ? 1 : 0),
    ],
    [
      'tollgate_policy_outage_in_memory',
      "Requests admitted in memory during an outage and still running, by policy (outage: 'share')",
      (a: AnyAdmission) => a.outage?.inFlight ?? 0,
    ],
    [
      'tollgate_policy_outage_replicas',
      "Replicas last counted on the store, which each limit is divided by during an outage, by policy (outage: 'share'; 0: never counted)",
      (a: AnyAdmission) => a.outage?.replicas ?? 0,
    ],
  ] as const)
    new prom.Gauge({
      name: metric,
      help,
      labelNames: ['policy'],
      registers,
      collect() {
        this.reset()
        each((a) => {
          if (a.outage) this.set({ policy: a.config.name }, value(a))
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
