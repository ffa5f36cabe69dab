// A semaphore's `overload` option (docs/api.md, `createSemaphore`): its queue becomes a fair queue, ordered by
// priority class, then fairly between flows by weight (core/fair.ts). This file validates the option
// and turns one acquire's `priority` and `flow` into the discipline its token carries.
import { ConfigError } from '../core/errors.js'
import {
  DEFAULT_FLOW,
  type Discipline,
  flowId,
  MAX_FLOW_NAME,
  MAX_FLOW_WEIGHT,
  type Priority,
  priorityNumber,
} from '../core/fair.js'
import { positiveInt, rejectUnknown } from '../core/options.js'
import type { FairCall } from '../core/protocol/store.js'

/** Upper bound on a fleet-wide queue bound: far above any sane one, exact in Lua. */
const MAX_QUEUED = 100_000_000
/** Upper bound on a flow's cap (the semaphore's own permits bound). */
const MAX_FLOW_MAX = 1_000_000

export interface OverloadOptions {
  /** Each flow's share weight, an integer from 1 to 100 (default 1): a flow of weight 3 is admitted
   * three times as often as a flow of weight 1 while both wait. By flow name, or a function of it. */
  flowWeights?: Readonly<Record<string, number>> | ((flow: string) => number)
  /** The permits a flow may hold at once (the per-tenant cap, kept inside one shared limit): one number
   * for every named flow, by flow name, or a function of it (undefined: no cap). @default no cap */
  flowMax?: number | Readonly<Record<string, number>> | ((flow: string) => number | undefined)
  /** The waiters of this name across the fleet at most. Past it, an arrival evicts the last waiter of
   * the queue would serve after it (that acquire rejects with ShedError 'evicted'), else it is refused
   * (ShedError 'queue-full'). @default no bound */
  maxQueued?: number
}

/** One acquire's place in a fair queue. */
export interface FairAcquireOptions {
  /** 'critical', 'standard' (default) or 'sheddable', or an integer from 0 to 7 (higher first): a
   * waiter of a higher class is always admitted before one of a lower class. */
  priority?: Priority
  /** The flow (a tenant, a user...) this request is counted to, at most 256 characters; waiters of a
   * class are admitted fairly between flows. Empty (or '-'): the default flow. */
  flow?: string
}

const OVERLOAD_KEYS = [
  'flowWeights',
  'flowMax',
  'maxQueued',
] as const satisfies readonly (keyof OverloadOptions)[]

/** The `overload` option, validated: the call every store call passes, and disciplines by request. */
export interface ResolvedOverload {
  readonly fair: FairCall
  /** The discipline of an acquire of `weight` permits (ConfigError naming a bad option). */
  discipline(options: FairAcquireOptions | undefined, weight: number): Discipline
}

/** Validate `overload` (ConfigError naming the option, unknown keys refused). */
export function parseOverloadOptions(value: unknown): ResolvedOverload {
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    throw new ConfigError('overload', 'an options object, e.g. { maxQueued: 1000 } (or {})', value)
  rejectUnknown(value, OVERLOAD_KEYS, {
    weights: 'it is `flowWeights`',
    weight: 'it is `flowWeights`',
    max: 'it is `flowMax`',
    maxPerFlow: 'it is `flowMax`',
    maxQueue: 'the fleet-wide bound is `maxQueued` (the middleware’s `maxQueue` is per process)',
    priority: 'a priority is per acquire: acquire({ priority })',
    flow: 'a flow is per acquire: acquire({ flow })',
  })
  const options = value as OverloadOptions
  const maxQueued =
    options.maxQueued === undefined ? 0 : positiveInt('overload.maxQueued', options.maxQueued, MAX_QUEUED)
  const weightOf = lookup('overload.flowWeights', options.flowWeights, 1, MAX_FLOW_WEIGHT, false)
  const maxOf = lookup('overload.flowMax', options.flowMax, 1, MAX_FLOW_MAX, true)
  const fair: FairCall = Object.freeze({ maxQueued })
  return {
    fair,
    discipline(request, weight) {
      const priority = priorityNumber(request?.priority, 'priority')
      const name = flowName(request?.flow)
      if (name === undefined) return { priority, flow: DEFAULT_FLOW, flowWeight: 1, flowMax: 0 }
      const flowMax = maxOf(name) ?? 0
      // A weight above its flow's cap would park for ever: refused at the call instead.
      if (flowMax > 0 && weight > flowMax)
        throw new ConfigError(
          'weight',
          `an integer from 1 to ${flowMax} (overload.flowMax of flow ${JSON.stringify(name)})`,
          weight,
        )
      return { priority, flow: flowId(name), flowWeight: weightOf(name) ?? 1, flowMax }
    },
  }
}

/** A flow name as the store counts it: trimmed; undefined for the default flow (empty or '-', the
 * admission's name for a missing key). */
export function flowName(raw: unknown): string | undefined {
  if (raw === undefined) return undefined
  if (typeof raw !== 'string')
    throw new ConfigError('flow', `a string of at most ${MAX_FLOW_NAME} characters`, raw)
  const name = raw.trim()
  if (name.length > MAX_FLOW_NAME)
    throw new ConfigError('flow', `a string of at most ${MAX_FLOW_NAME} characters`, raw)
  return name === '' || name === DEFAULT_FLOW ? undefined : name
}

/** A per-flow setting: a function of the flow's name, a record by name, or (`scalar`) one number for
 * every flow; each answer an integer from `min` to `max`, undefined when unset. */
function lookup(
  option: string,
  value: unknown,
  min: number,
  max: number,
  scalar: boolean,
): (flow: string) => number | undefined {
  const check = (answer: unknown, what: string): number => {
    if (typeof answer === 'number' && Number.isInteger(answer) && answer >= min && answer <= max)
      return answer
    throw new ConfigError(what, `an integer from ${min} to ${max}`, answer)
  }
  const expected = `${scalar ? 'a number, ' : ''}an object by flow name or a function of the flow's name`
  if (value === undefined) return () => undefined
  if (typeof value === 'function') {
    const fn = value as (flow: string) => unknown
    return (flow) => {
      const answer = fn(flow)
      return answer === undefined && scalar ? undefined : check(answer, `${option}("${flow}")`)
    }
  }
  if (typeof value === 'number' && scalar) {
    const every = check(value, option)
    return () => every
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new ConfigError(option, expected, value)
  // A Map, not the object: a flow named "__proto__" or "constructor" is a name like any other.
  const byName = new Map<string, number>()
  for (const [key, answer] of Object.entries(value)) {
    const name = key.length <= MAX_FLOW_NAME ? flowName(key) : undefined
    if (name === undefined)
      throw new ConfigError(option, `flow names of 1 to ${MAX_FLOW_NAME} characters`, key)
    byName.set(name, check(answer, `${option}.${key}`))
  }
  return (flow) => byName.get(flow)
}
