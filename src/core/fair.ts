// Who gets in when not everyone can (docs/middleware.md, "Overload"): a semaphore with `overload` orders its queue
// by priority class first (strict: a higher class is always served first), then fairly between the
// flows of a class (start-time fair queuing, by flow weight), then first come first served inside a
// flow. The order is decided in the store, one order for the whole fleet (lua/lib/fair.lua and its
// memory twin src/core/memory/fair-queue.ts implement the same integer arithmetic).
//
// The discipline travels in the token, as a weight does (weight.ts), so that scripts read it without
// a look-up and the coalescer merges calls across classes and flows:
//
//   <id>*<weight>.<priority>.<flow>.<flowWeight>.<flowMax>
//
// - weight: permits the acquisition counts for (1..MAX_WEIGHT);
// - priority: 0..7, higher first (PRIORITY_CLASSES names three);
// - flow: FLOW_ID_LENGTH base64url characters of sha256(flow name) (flowId()), or '-' (the class's
//   default flow): a hostile tenant name can neither inject a separator nor grow the token;
// - flowWeight: the flow's share weight, 1..MAX_FLOW_WEIGHT;
// - flowMax: the permits the flow may hold at once (0: no cap).
//
// The queue's score of a waiter (Redis sorted set Q, and its twin): (4 - priority) * 2^50 + S + j,
// with S the waiter's start tag in its class and j = ticket mod 32 (ties between flows broken by
// arrival, not by a process's token prefix). A flow's request of `weight` permits costs
// floor(weight * TAG_UNIT / flowWeight) tag units.
import { createHash } from 'node:crypto'
import { ConfigError } from './errors.js'
import { MAX_WEIGHT } from './weight.js'

/** Named priority classes; any integer from MIN_PRIORITY to MAX_PRIORITY is a class too. */
export const PRIORITY_CLASSES = { critical: 6, standard: 4, sheddable: 2 } as const
export type PriorityName = keyof typeof PRIORITY_CLASSES
export type Priority = PriorityName | number
export const MIN_PRIORITY = 0
export const MAX_PRIORITY = 7
export const DEFAULT_PRIORITY = PRIORITY_CLASSES.standard

/** Tag units of one permit at flow weight 1. */
export const TAG_UNIT = 4096
/** A class's score offset: (4 - priority) * CLASS_SPAN. */
export const CLASS_SPAN = 2 ** 50
/** Ties inside a tag step: ticket mod TIE_SPAN (below the smallest cost, TAG_UNIT / MAX_FLOW_WEIGHT). */
export const TIE_SPAN = 32
export const MAX_FLOW_WEIGHT = 100
/** The default flow of a class (a request without a flow). */
export const DEFAULT_FLOW = '-'
export const FLOW_ID_LENGTH = 11
/** The longest flow name accepted (longer is a ConfigError at the call, not a truncation). */
export const MAX_FLOW_NAME = 256

/** What orders one acquisition in a fair queue. */
export interface Discipline {
  /** 0..7. */
  priority: number
  /** flowId() of the flow's name, or DEFAULT_FLOW. */
  flow: string
  /** 1..MAX_FLOW_WEIGHT. */
  flowWeight: number
  /** Permits the flow may hold at once; 0: no cap. */
  flowMax: number
}

/** A priority as its class number; a bad one is a ConfigError naming `option`. */
export function priorityNumber(priority: Priority | undefined, option = 'priority'): number {
  if (priority === undefined) return DEFAULT_PRIORITY
  if (typeof priority === 'string') {
    if (Object.hasOwn(PRIORITY_CLASSES, priority)) return PRIORITY_CLASSES[priority as PriorityName]
  } else if (Number.isInteger(priority) && priority >= MIN_PRIORITY && priority <= MAX_PRIORITY) {
    return priority
  }
  throw new ConfigError(
    option,
    `'critical', 'standard', 'sheddable' or an integer from ${MIN_PRIORITY} to ${MAX_PRIORITY}`,
    priority,
  )
}

/** The name people read for a class number ('critical', or 'p5' for an unnamed one). */
export function priorityName(priority: number): string {
  for (const [name, value] of Object.entries(PRIORITY_CLASSES)) if (value === priority) return name
  return `p${priority}`
}

const ids = new Map<string, string>()
const MAX_CACHED_IDS = 10_000

/** The flow id of a flow name: 64 bits of its sha256, base64url (an empty name: the default flow). */
export function flowId(name: string): string {
  if (name === '') return DEFAULT_FLOW
  let id = ids.get(name)
  if (id !== undefined) return id
  id = createHash('sha256').update(name).digest('base64url').slice(0, FLOW_ID_LENGTH)
  // Bounded: a hostile stream of names costs one hash each, never memory.
  if (ids.size >= MAX_CACHED_IDS) ids.clear()
  ids.set(name, id)
  return id
}

/** The token of an acquisition with a discipline (see the header for the grammar). */
export function fairToken(id: string, weight: number, discipline: Discipline): string {
  const { priority, flow, flowWeight, flowMax } = discipline
  return `${id}*${weight}.${priority}.${flow}.${flowWeight}.${flowMax}`
}

const FAIR_TOKEN = /^(.+)\*(\d+)\.(\d)\.([A-Za-z0-9_-]+)\.(\d+)\.(\d+)$/

/** The weight and discipline a token carries; undefined for a plain token (as lua disc()). */
export function parseFairToken(token: string): ({ id: string; weight: number } & Discipline) | undefined {
  const match = FAIR_TOKEN.exec(token)
  if (!match) return undefined
  const [, id, weight, priority, flow, flowWeight, flowMax] = match as unknown as string[]
  const w = Number(weight)
  const p = Number(priority)
  const fw = Number(flowWeight)
  if (!(w >= 1 && w <= MAX_WEIGHT) || p > MAX_PRIORITY || !(fw >= 1 && fw <= MAX_FLOW_WEIGHT))
    return undefined
  return {
    id: id as string,
    weight: w,
    priority: p,
    flow: flow as string,
    flowWeight: fw,
    flowMax: Number(flowMax),
  }
}

/** Tag units a request of `weight` permits costs its flow of weight `flowWeight`. */
export function tagCost(weight: number, flowWeight: number): number {
  return Math.floor((weight * TAG_UNIT) / flowWeight)
}
