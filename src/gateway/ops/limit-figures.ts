// A route's limits and a fair queue's figures as the admin listener shows them, in /limits and on the
// dashboard alike: the limit in force, the fleet's waiters by class, a flow's state, and a fair
// route's rows (its classes and busiest flows).
import type { AdaptiveStatus } from '../../primitives/adaptive/limit.js'
import type { Semaphore, SemaphoreStats } from '../../primitives/semaphore.js'
import { PRIORITY_CLASSES, priorityName } from '../../core/fair.js'
import type { ConcurrencyConfig } from '../config/index.js'
import type { ClassCounts } from './fair-metrics.js'

/** A route's configured limit: its permits, or its adaptive limit's initial. */
export function configuredLimit(concurrency: ConcurrencyConfig): number {
  return concurrency.adaptive?.initial ?? concurrency.permits
}

/** The limit in force of a bucket (GET /limits's `effective`): an override, else the adaptive limit in
 * the store, else the one this replica learnt, else the configured one. */
export function limitInForce(
  stats: { override?: number | undefined; adaptive?: number | undefined } | undefined,
  adaptive: AdaptiveStatus | undefined,
  configured: number,
): number {
  return stats?.override ?? stats?.adaptive ?? adaptive?.limit ?? configured
}

/** One flow of a fair queue, fleet-wide. */
export interface FlowFigures {
  waiting: number
  held: number
  parked: number
}

/** What a fair queue's stats() adds to a semaphore's (the `overload` option, i38-D: its stats() and
 * flow(name)), coded against that shape: each field absent until the semaphore gives it. `flows`: the
 * flows read by name beside it. */
export interface FairStats {
  classes?: Record<string, { waiting: number }>
  parked?: number
  evicted?: Record<string, number>
  saturated?: readonly string[]
  mixed?: boolean
  flows?: ReadonlyMap<string, FlowFigures>
}

/** A fair bucket's stats, and `flows` (names) each read by name (i38-D's Semaphore.flow(): a store
 * call each, at most BUSIEST_FLOWS, in parallel). */
export async function fairStats(
  semaphore: Semaphore,
  flows: readonly string[],
): Promise<SemaphoreStats & FairStats> {
  // i38-D merges Semaphore.flow(); a semaphore without it gives no flow figures.
  const flowOf = (semaphore as Semaphore & { flow?(name: string): Promise<FlowFigures> }).flow
  const [stats, ...figures] = await Promise.all([
    semaphore.stats() as Promise<SemaphoreStats & FairStats>,
    ...(flowOf ? flows.map((flow) => flowOf.call(semaphore, flow)) : []),
  ])
  const read = new Map<string, FlowFigures>()
  figures.forEach((figure, i) => read.set(flows[i] as string, figure))
  return { ...stats, flows: read }
}

/** A class's key as people read it: its name, or p<n>. */
const className = (key: string) => (/^\d$/.test(key) ? priorityName(Number(key)) : key)

/** The fleet's figures of a fair bucket by class, as /limits and the dashboard show them. */
export function fairFigures(stats: FairStats) {
  const classes: Record<string, { waiting: number }> = {}
  for (const [key, value] of Object.entries(stats.classes ?? {}))
    classes[className(key)] = { waiting: value.waiting }
  const evicted: Record<string, number> = {}
  for (const [key, n] of Object.entries(stats.evicted ?? {})) evicted[className(key)] = n
  return {
    classes,
    parked: stats.parked ?? null,
    evicted,
    saturated: (stats.saturated ?? []).map(className),
    mixed: stats.mixed ?? null,
  }
}

/** A flow of a fair route as /limits shows it: its share of this replica's recent requests, its
 * weight and cap from the config, and the fleet's waiting, held and parked (null: not read). */
export function flowState(
  concurrency: ConcurrencyConfig,
  stats: FairStats | undefined,
  flow: string,
  share?: number,
) {
  const config = concurrency.flow
  const own = (map: Readonly<Record<string, number>> | undefined) =>
    map && Object.hasOwn(map, flow) ? map[flow] : undefined
  const figures = stats?.flows?.get(flow)
  return {
    flow,
    ...(share === undefined ? {} : { share }),
    weight: own(config?.weights) ?? 1,
    max: own(config?.maxFor) ?? (config && config.max > 0 ? config.max : null),
    waiting: figures?.waiting ?? null,
    held: figures?.held ?? null,
    parked: figures?.parked ?? null,
  }
}

/** A class of a fair route: the fleet's waiters (null: not read), and this replica's waiting,
 * admitted and rejected by reason (shed among them), and the fleet's evicted since it was last idle. */
export interface ClassRow {
  class: string
  fleetWaiting: number | null
  waiting: number
  admitted: number
  rejected: Record<string, number>
  evicted: number | null
}

/** A fair route's rows on the dashboard: each class (this replica's `counts` beside the fleet's
 * waiters, highest class first) and its busiest flows. */
export function fairRows(
  counts: ReadonlyMap<number, ClassCounts> = new Map(),
  concurrency: ConcurrencyConfig,
  stats: FairStats | undefined,
  busiest: { flow: string; share: number }[],
): { classes: ClassRow[]; flows: ReturnType<typeof flowState>[] } {
  const fleet = stats ? fairFigures(stats) : undefined
  const numbers = new Set<number>(counts.keys())
  for (const key of Object.keys(fleet?.classes ?? {})) {
    const p = classNumber(key)
    if (p !== undefined) numbers.add(p)
  }
  const classes = [...numbers]
    .sort((a, b) => b - a)
    .map((p) => {
      const name = priorityName(p)
      const here = counts.get(p)
      return {
        class: name,
        fleetWaiting: fleet?.classes[name]?.waiting ?? null,
        waiting: here?.waiting ?? 0,
        admitted: here?.admitted ?? 0,
        rejected: here?.rejected ?? {},
        evicted: fleet?.evicted[name] ?? null,
      }
    })
  const flows = busiest.map(({ flow, share }) => flowState(concurrency, stats, flow, share))
  return { classes, flows }
}

/** A class's number from its name or number ('critical', 'p5', '5'). */
function classNumber(key: string): number | undefined {
  if (/^\d$/.test(key)) return Number(key)
  if (/^p\d$/.test(key)) return Number(key.slice(1))
  return Object.hasOwn(PRIORITY_CLASSES, key)
    ? PRIORITY_CLASSES[key as keyof typeof PRIORITY_CLASSES]
    : undefined
}
