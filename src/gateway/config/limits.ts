// A route's limits from its input (own fields over the inherited ones): the concurrency cap (an
// adaptive limit, priority classes, flows) and the read/write lock; and what a resolved cap implies.
import { ConfigError } from '../../core/errors.js'
import { priorityNumber, type Priority } from '../../core/fair.js'
import { parseAdaptiveOptions, type ResolvedAdaptiveOptions } from '../../primitives/adaptive/options.js'
import type { ConcurrencyInput, RwLockInput } from './schema.js'
import {
  type ConcurrencyConfig,
  type FlowConfig,
  GATEWAY_DEFAULTS,
  type Issues,
  type PriorityConfig,
  type RwLockConfig,
} from './types.js'

/** A bucket whose requests carry a priority or a flow is a fair queue. */
export const isFair = (concurrency: ConcurrencyConfig) =>
  concurrency.priority !== undefined || concurrency.flow !== undefined

/** The classes a route's requests can have, each with how long it waits (ms). */
export function classWaits(concurrency: ConcurrencyConfig): Map<number, number> {
  const priority = concurrency.priority
  const waits = new Map<number, number>()
  if (!priority) return waits.set(4, concurrency.maxWaitMs)
  const waitOf = (p: number) => priority.maxWaitMs[p] ?? concurrency.maxWaitMs
  const classes = new Set([priority.default, ...Object.values(priority.tenants)])
  // A trusted header can name any class.
  if (priority.header !== undefined) for (let p = 0; p <= 7; p++) classes.add(p)
  for (const p of classes) waits.set(p, waitOf(p))
  return waits
}

/** A route's concurrency cap from its input at `at`; `own` and `inherited`: the layers it was merged
 * from (`permits` is refused in the layer that sets `adaptive`). Problems go to `issues`. */
export function resolveConcurrency(
  input: ConcurrencyInput,
  at: string,
  issues: Issues,
  own: ConcurrencyInput | false | undefined,
  inherited: ConcurrencyInput | false,
): ConcurrencyConfig {
  const d = GATEWAY_DEFAULTS
  let adaptive: ResolvedAdaptiveOptions | undefined
  if (input.adaptive) {
    try {
      adaptive = parseAdaptiveOptions(input.adaptive, `${at}.adaptive.`)
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error
      issues.push({ path: error.option, message: error.message.replace(/^Invalid option "[^"]*": /, '') })
    }
    // One limit, learnt from the requests it admits: one bucket, each request counting 1. `permits`
    // is refused where the adaptive limit is set (the route's own, or defaults), not when one layer
    // has each (a route's adaptive limit replaces the default permits).
    const layer = own && own.adaptive ? own : inherited
    if (layer && layer.permits !== undefined)
      issues.push({
        path: `${at}.permits`,
        message:
          'not beside adaptive: an adaptive limit starts at adaptive.initial, within adaptive.min and adaptive.max',
      })
    if (input.per === 'tenant' || input.per === 'ip')
      issues.push({ path: `${at}.per`, message: 'an adaptive limit is one bucket: per global or per route' })
    if ((input.weight ?? 1) !== 1)
      issues.push({ path: `${at}.weight`, message: 'not beside adaptive: an adaptive limit counts requests' })
    if ((input.keepAliveMs ?? 0) > 0)
      issues.push({
        path: `${at}.keepAliveMs`,
        message: 'not beside adaptive: permit keep-alive would hide the requests it measures',
      })
    if (Object.keys(input.overrides ?? {}).length > 0)
      issues.push({ path: `${at}.overrides`, message: 'an adaptive limit is one bucket: no overrides' })
  }
  const per = input.per ?? d.per
  const priority = resolvePriority(input.priority, at, issues)
  const flow = resolveFlow(input.flow, per, at, issues)
  if ((input.keepAliveMs ?? 0) > 0 && (priority || flow))
    issues.push({
      path: `${at}.keepAliveMs`,
      message: `not beside ${priority ? 'priority' : 'flow'}: a kept permit would serve this replica's next request past the queue's order (set keepAliveMs: 0)`,
    })
  return {
    adaptive,
    permits: input.permits ?? d.permits,
    per,
    tenantHeader: (input.tenantHeader ?? d.tenantHeader).toLowerCase(),
    maxWaitMs: input.maxWaitMs ?? d.maxWaitMs,
    maxQueue: input.maxQueue ?? d.maxQueue,
    statusCode: input.statusCode,
    // `outage` wins over `failOpen` (its older spelling), wherever each was set.
    failOpen: outageOf(input) === 'open',
    outage: outageOf(input),
    outageShare: input.outageShare,
    keepAliveMs: input.keepAliveMs ?? d.keepAliveMs,
    weight: input.weight ?? 1,
    overrides: { ...input.overrides },
    priority,
    flow,
    maxQueued: input.maxQueued ?? 0,
  }
}

const classOf = (value: Priority) => priorityNumber(value)

function resolvePriority(
  input: ConcurrencyInput['priority'],
  at: string,
  issues: Issues,
): PriorityConfig | undefined {
  if (input === undefined) return undefined
  if (typeof input !== 'object')
    return { header: undefined, tenants: {}, default: classOf(input), maxWaitMs: {} }
  if (input.header !== undefined && input.trustHeader !== true)
    issues.push({
      path: `${at}.priority.trustHeader`,
      message: `required (true) beside header: a client could claim critical by sending ${input.header}; set it only where a proxy in front sets or strips that header`,
    })
  if (input.trustHeader === true && input.header === undefined)
    issues.push({
      path: `${at}.priority.header`,
      message: 'required beside trustHeader: which header to trust',
    })
  const tenants: Record<string, number> = {}
  for (const [tenant, value] of Object.entries(input.tenants ?? {})) tenants[tenant] = classOf(value)
  const maxWaitMs: Record<number, number> = {}
  for (const [key, ms] of Object.entries(input.maxWaitMs ?? {}))
    maxWaitMs[classOf(/^\d+$/.test(key) ? Number(key) : (key as Priority))] = ms
  return {
    header: input.header?.toLowerCase(),
    tenants,
    default: classOf(input.default ?? 'standard'),
    maxWaitMs,
  }
}

/** Flows are metric labels (docs/gateway.md): a config names this many at most. */
const MAX_NAMED_FLOWS = 100

function resolveFlow(
  input: ConcurrencyInput['flow'],
  per: string,
  at: string,
  issues: Issues,
): FlowConfig | undefined {
  if (input === undefined) return undefined
  const from = input.from.startsWith('header:') ? 'header' : (input.from as 'tenant' | 'ip')
  if (from === per)
    issues.push({
      path: `${at}.flow.from`,
      message: `not with per: ${per}: flows share one bucket, and per: ${per} makes one bucket per ${per}; choose per: route (or global) to share the limit fairly, or keep per: ${per} without flow`,
    })
  const weights = { ...input.weights }
  const maxFor = { ...input.maxFor }
  if (new Set([...Object.keys(weights), ...Object.keys(maxFor)]).size > MAX_NAMED_FLOWS)
    issues.push({
      path: `${at}.flow`,
      message: `expected at most ${MAX_NAMED_FLOWS} flows named in weights and maxFor (each named flow is a metric series)`,
    })
  return {
    from,
    header: from === 'header' ? input.from.slice('header:'.length).toLowerCase() : undefined,
    weights,
    max: input.max ?? 0,
    maxFor,
  }
}

/** A route's read/write lock from its input. */
export function resolveRwLock(input: RwLockInput): RwLockConfig {
  const d = GATEWAY_DEFAULTS
  return {
    resourcePattern: input.resourcePattern === undefined ? undefined : new RegExp(input.resourcePattern),
    maxWaitMs: input.maxWaitMs ?? d.maxWaitMs,
    maxQueue: input.maxQueue ?? d.maxQueue,
    statusCode: input.statusCode,
    failOpen: outageOf(input) === 'open',
  }
}

/** A limit's `outage`, or what its older spelling `failOpen` says. */
function outageOf<M extends string>(input: {
  outage?: M | undefined
  failOpen?: boolean | undefined
}): M | 'open' | 'closed' {
  return input.outage ?? ((input.failOpen ?? GATEWAY_DEFAULTS.failOpen) ? 'open' : 'closed')
}
