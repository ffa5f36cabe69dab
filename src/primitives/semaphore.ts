// createSemaphore(): a fair FIFO counting semaphore per name, with weights, a fair queue by class
// and flow (`overload`), run-time limits and an adaptive limit.
import { debuglog } from 'node:util'
import { ConfigError } from '../core/errors.js'
import { type Lease, whenLost } from '../core/client/lease.js'
import { AdaptiveLimit, type AdaptiveLogger, type AdaptiveStatus } from './adaptive/limit.js'
import { localStoreOf } from './adaptive/local.js'
import {
  type AdaptiveOptions,
  type Outcome,
  parseAdaptiveOptions,
  type ResolvedAdaptiveOptions,
} from './adaptive/options.js'
import { positiveInt } from '../core/options.js'
import type { AcquireOptions } from '../core/client/lock-client.js'
import { PermitClient } from '../core/client/permit-client.js'
import type { FairPermitStats, Store } from '../core/protocol/store.js'
import { DEFAULT_FLOW, type Discipline, flowId, priorityName } from '../core/fair.js'
import { type FairAcquireOptions, flowName, type OverloadOptions, parseOverloadOptions } from './overload.js'
import { runHolding } from './mutex.js'
import { MAX_WEIGHT } from '../core/weight.js'
import { claimName } from './names.js'
import {
  checkAcquireOptions,
  checkLockArguments,
  isPlainObjectOrUndefined,
  type LockOptions,
  parseLockOptions,
  rejectUnknown,
} from '../core/options.js'

const debug = debuglog('tollgate:adaptive')

/** Upper bound on permits, far above any sane in-flight cap; keeps Lua arithmetic exact. */
const MAX_PERMITS = 1_000_000

/** createSemaphore()'s options besides LockOptions. */
const SEMAPHORE_OPTION_KEYS = [
  'permits',
  'adaptive',
  'overload',
] as const satisfies readonly (keyof SemaphoreOptions)[]
/** A semaphore's acquire options besides AcquireOptions. */
const ACQUIRE_KEYS = ['weight', 'priority', 'flow'] as const

export interface SemaphoreOptions extends LockOptions {
  /** How many leases may be held at once across every process (G1). Required unless `adaptive` is
   * given. */
  permits?: number
  /** An adaptive limit instead of `permits` (docs/adaptive.md): the permits follow the hold
   * times and drops of the leases, within `min` and `max`, one limit for every process sharing the
   * store (`scope: 'local'`: this process's own). */
  adaptive?: AdaptiveOptions
  /** Make this name's queue a fair queue (docs/api.md, `createSemaphore`): acquire({ priority, flow }) then
   * orders it by priority class, then fairly between flows by weight, with an optional cap per flow
   * and a fleet-wide bound that sheds the lowest class first. Present (even `{}`) on every process
   * that shares the name. */
  overload?: OverloadOptions
}

/** The adaptive limit of a semaphore made with `adaptive`. Every lease is a sample: from its acquire
 * to its release, unless marked as a drop; a lease lost or never released counts for nothing. */
export interface SemaphoreAdaptive {
  /** The limit, its estimate, the baseline and latest latency, the gradient, the leadership. */
  status(): AdaptiveStatus
  /** Count this lease as a drop (what it guarded was refused or timed out) when it is released. */
  dropped(lease: Lease): void
  /** Stop reporting and stepping (the fleet's other processes go on). */
  close(): void
}

/** A semaphore's acquire options: AcquireOptions, the permits the lease counts for, and (with the
 * `overload` option) its priority and flow. */
export interface SemaphoreAcquireOptions extends AcquireOptions, FairAcquireOptions {
  /** How many permits this lease counts for (Redisson's `acquire(permits)`, Bottleneck's `weight`): an
   * export may count for 5 where a health check counts for 1. An integer from 1 to `permits`, at most 1000. The
   * queue stays FIFO: a waiter is admitted once its weight is free, and nobody behind it is admitted
   * before it, so a heavy head is never overtaken by light calls (G5). @default 1 */
  weight?: number
}

export interface SemaphoreStats {
  /** Permits held across every process (a lease of weight w counts w). */
  holders: number
  /** Live waiters across every process. */
  queued: number
  /** The permits in force: the run-time override, else this instance's `permits`. */
  limit: number
  /** The run-time permits set with setPermits() (for every process), if any. */
  override: number | undefined
  /** The fleet's adaptive limit in the store, if any (an override wins over it). */
  adaptive?: number | undefined
  /** With `overload`: waiters per priority class ('critical', 'standard', 'sheddable', or 'p<n>'),
   * parked ones included; classes without waiters are absent. */
  classes?: Record<string, { waiting: number }>
  /** With `overload`: waiters parked at their flow's cap (`flowMax`). */
  parked?: number
  /** With `overload`: waiters evicted per class since the name was last idle. */
  evicted?: Record<string, number>
  /** With `overload`: classes served in arrival order until they next empty (their fair tags ran
   * out of range). */
  saturated?: string[]
  /** With `overload`: some process uses this name without `overload` (its waiters are plain). */
  mixed?: boolean
}

/** One flow of a semaphore with `overload`, fleet-wide. */
export interface SemaphoreFlowStats {
  /** Its waiters, every class. */
  waiting: number
  /** The permits it holds (counted for capped flows only: 0 without `flowMax`). */
  held: number
  /** Its waiters parked at its cap. */
  parked: number
}

export interface Semaphore {
  readonly name: string
  /** The permits this instance asks for (a run-time override set by setPermits() wins in the store). */
  readonly permits: number
  /** Wait for a permit in the fair FIFO queue (G5). Rejects with AcquireTimeoutError after
   * `timeoutMs` or with the signal's reason; either way nothing is left in the queue. */
  acquire(options?: SemaphoreAcquireOptions): Promise<Lease>
  /** Take a permit (`weight` of them) only if free and nobody queues ahead; contention is not an
   * error. With `overload`, `priority` and `flow` as acquire's (a flow at its cap gets none). */
  tryAcquire(options?: { weight?: number } & FairAcquireOptions): Promise<Lease | undefined>
  /** Run `fn` holding a permit and always release it; `fn`'s own error is never masked. */
  withLease<T>(fn: (lease: Lease) => T | Promise<T>, options?: SemaphoreAcquireOptions): Promise<T>
  /** Change the permits of this name for every process sharing the store. Raising admits waiters at
   * once; lowering never evicts a holder, it stops admissions until holders drain below it. */
  setPermits(permits: number): Promise<void>
  /** Drop the run-time permits set with setPermits(), for every process: each instance's own
   * `permits` applies again. */
  resetPermits(): Promise<void>
  /** Live holders and queue length of this name (one store call, no scan), the limit in force (the
   * run-time override if one is set, else this instance's `permits`), and the override. */
  stats(): Promise<SemaphoreStats>
  /** With `overload`: one flow's waiters, permits held and parked waiters, fleet-wide (one store
   * call). */
  flow(name: string): Promise<SemaphoreFlowStats>
  /** With the `adaptive` option: its limit; undefined otherwise. */
  readonly adaptive?: SemaphoreAdaptive | undefined
}

/**
 * A fair distributed counting semaphore: at most `permits` live leases across every process (G1),
 * dead holders expire on the store's clock (G2), waiters are admitted in global FIFO order and a dead
 * waiter falls out by its own heartbeat (G5). An uncontended acquire is one script call and a release
 * is one; a release hands its permit straight to the next waiter and notifies it (G10).
 */
export function createSemaphore(store: Store, name: string, options: SemaphoreOptions): Semaphore {
  // Arguments first: a forgotten name or a misspelt option is named, never blamed on `permits`.
  const example = `{ permits: ${typeof options === 'number' ? String(options) : '10'} }`
  checkLockArguments('sem', store, name, options, SEMAPHORE_OPTION_KEYS, example)
  if (options.adaptive !== undefined) {
    return adaptiveSemaphore(store, name, options)
  }
  const semaphore = bucketSemaphore(store, name, options)
  // Claimed for as long as the client lives: every call of the semaphore keeps it alive.
  claimName(store, name, 'semaphore', clients.get(semaphore) as PermitClient)
  return semaphore
}

/** createSemaphore() with an adaptive limit: the semaphore, its leases sampled (adaptive/limit.ts). */
function adaptiveSemaphore(store: Store, name: string, options: SemaphoreOptions): Semaphore {
  const { adaptive, permits, ...lockOptions } = options
  const resolved = parseAdaptiveOptions(adaptive)
  if (permits !== undefined) {
    throw new ConfigError(
      'permits',
      'no permits beside adaptive (an adaptive limit starts at `adaptive.initial`)',
      permits,
    )
  }
  const home = adaptiveHome(store, resolved)
  const inner = bucketSemaphore(home, name, { ...lockOptions, permits: resolved.initial })
  const client = clients.get(inner) as PermitClient
  claimName(store, name, 'semaphore', client)
  const limit = adaptiveLimitOf(
    inner,
    resolved,
    home,
    // The library prints nothing: NODE_DEBUG=tollgate:adaptive traces changes and store trouble, and
    // status() tells them.
    { warn: (message, meta) => debug('%s %o', message, meta) },
    name,
  )
  /** The permits a lease of `opts` counts for. A weight must fit under the lowest limit the controller
   * may set (`adaptive.min`), so that a request is never left waiting for a limit that never comes. */
  const weighs = (opts: SemaphoreAcquireOptions | undefined): number => {
    const weight = (opts as { weight?: unknown } | undefined)?.weight
    if (weight === undefined || weight === 1) return 1
    if (!(typeof weight === 'number' && Number.isInteger(weight) && weight >= 1 && weight <= resolved.min))
      throw new ConfigError(
        'weight',
        `an integer from 1 to ${resolved.min} (adaptive.min: the lowest limit an adaptive semaphore may have)`,
        weight,
      )
    return weight
  }
  const drops = new WeakSet<Lease>()
  /** A lease of `weight` permits of this semaphore, sampled from now until it is released. */
  const sampled = (lease: Lease, weight: number): Lease => {
    const admittedAt = limit.admitted(weight)
    let open = true
    const finish = (outcome: Outcome | undefined) => {
      if (!open) return
      open = false
      limit.finished(admittedAt, outcome, weight)
    }
    const release = lease.release
    lease.release = function (this: Lease) {
      finish({ dropped: drops.has(lease) })
      return release.call(this)
    }
    whenLost(lease, () => finish(undefined))
    return lease
  }
  const semaphore: Semaphore = {
    ...inner,
    name,
    get permits() {
      return client.permits()
    },
    acquire: async (opts) => {
      const weight = weighs(opts)
      return sampled(await inner.acquire(opts), weight)
    },
    tryAcquire: async (opts) => {
      const weight = weighs(opts)
      const lease = await inner.tryAcquire(opts)
      return lease && sampled(lease, weight)
    },
    withLease: async (fn, opts) => {
      const weight = weighs(opts)
      return runHolding(sampled(await inner.acquire(opts), weight), fn)
    },
    adaptive: {
      status: () => limit.status(),
      dropped: (lease) => drops.add(lease),
      close: () => limit.close(),
    },
  }
  clients.set(semaphore, client)
  disciplines.set(semaphore, disciplines.get(inner) as DisciplineOf)
  return semaphore
}

/**
 * createSemaphore() without claiming its name (names.ts): the admission's buckets, whose names
 * (`<policy>:<key>`) come from request data and are a namespace of their own; a collision there must
 * never become an error thrown at request time. Not part of the public API.
 */
export function bucketSemaphore(store: Store, name: string, options: SemaphoreOptions): Semaphore {
  const settings = parseLockOptions('sem', store, name, options, { own: SEMAPHORE_OPTION_KEYS })
  const given = options?.permits
  if (given === undefined) {
    throw new ConfigError(
      'permits',
      `an integer from 1 to ${MAX_PERMITS} (required unless "adaptive" is given)`,
      given,
    )
  }
  const permits = positiveInt('permits', given, MAX_PERMITS)
  const overload = options.overload === undefined ? undefined : parseOverloadOptions(options.overload)
  if (overload && typeof store.permits.inspectFair !== 'function')
    throw new ConfigError('overload', {
      message: `Invalid option "overload": this store cannot run a fair queue (its permits have no inspectFair); use a store from createRedisStore() or createMemoryStore() of this version`,
    })
  const client = new PermitClient(settings, permits, overload?.fair)
  const semaphore: Semaphore = {
    name,
    get permits() {
      return client.permits()
    },
    // The options checked here are the ones used (an options object is read once).
    acquire: (opts) => {
      const weight = weightOf(opts)
      return client.acquire(undefined, opts, weight, disciplineOf(opts, weight))
    },
    tryAcquire: (opts) => {
      const weight = weightOf(opts, ACQUIRE_KEYS)
      return client.tryAcquire(undefined, weight, disciplineOf(opts, weight))
    },
    withLease: async (fn, opts) => {
      const weight = weightOf(opts)
      return runHolding(await client.acquire(undefined, opts, weight, disciplineOf(opts, weight)), fn)
    },
    setPermits: async (next) => {
      positiveInt('permits', next, MAX_PERMITS)
      // Only the store's override changes: this instance keeps asking for its own permits, like
      // every other instance, so dropping the override (from anywhere) brings all of them back alike.
      await client.setLimit(next)
    },
    resetPermits: async () => {
      await client.setLimit(undefined)
    },
    stats: async () => {
      const fair = client.inspectFair()
      const figures = await (fair ?? client.inspect())
      const { holders, queued, limit, adaptive } = figures
      return {
        holders,
        queued,
        limit: limit ?? adaptive ?? client.permits(),
        override: limit,
        ...(adaptive === undefined ? {} : { adaptive }),
        ...(fair ? fairFigures(figures as FairPermitStats) : {}),
      }
    },
    flow: async (flow) => {
      const named = flowName(flow)
      if (!overload) throw needsOverload('flow', name)
      const id = named === undefined ? DEFAULT_FLOW : flowId(named)
      const figures = await (client.inspectFair([id]) as Promise<FairPermitStats>)
      const { waiting = 0, held = 0, parked = 0 } = figures.flows[id] ?? {}
      return { waiting, held, parked }
    },
  }
  clients.set(semaphore, client)
  disciplines.set(semaphore, (opts, weight) => disciplineOf(opts, weight))
  return semaphore

  /** The acquire options checked (ConfigError naming one), and the weight asked for (1 by default). */
  function weightOf(options: SemaphoreAcquireOptions | undefined, only?: readonly string[]): number {
    if (only && options !== undefined) {
      isPlainObjectOrUndefined('tryAcquire options', options)
      rejectUnknown(options, only)
    } else checkAcquireOptions(options, ACQUIRE_KEYS)
    const weight = options?.weight
    if (weight === undefined || weight === 1) return 1
    const most = Math.min(permits, MAX_WEIGHT)
    if (!(typeof weight === 'number' && Number.isInteger(weight) && weight >= 1 && weight <= most))
      throw new ConfigError(
        'weight',
        `an integer from 1 to ${most} (the semaphore's permits, at most ${MAX_WEIGHT})`,
        weight,
      )
    return weight
  }

  /** The discipline of an acquire with `overload` (the default class and flow when it names none);
   * undefined without, where a priority or a flow is a ConfigError naming the fix. */
  function disciplineOf(options: FairAcquireOptions | undefined, weight: number): Discipline | undefined {
    if (overload) return overload.discipline(options, weight)
    if (options?.priority !== undefined) throw needsOverload('priority', name)
    if (options?.flow !== undefined) throw needsOverload('flow', name)
    return undefined
  }
}

/** A fair queue's figures by class name. */
function fairFigures(stats: FairPermitStats): Partial<SemaphoreStats> {
  const classes: Record<string, { waiting: number }> = {}
  for (const [p, waiting] of Object.entries(stats.classes)) classes[priorityName(Number(p))] = { waiting }
  const evicted: Record<string, number> = {}
  for (const [p, n] of Object.entries(stats.evicted)) evicted[priorityName(Number(p))] = n
  return {
    classes,
    parked: stats.parked,
    evicted,
    saturated: stats.saturated.map(priorityName),
    mixed: stats.mixed,
  }
}

/** `option` (priority, flow) used on a semaphore made without `overload`. */
function needsOverload(option: 'priority' | 'flow', name: string): ConfigError {
  return new ConfigError(option, {
    message: `${option} needs the \`overload\` option on the semaphore; set it on every process that shares '${name}'`,
  })
}

/** The discipline of each semaphore's acquire (undefined without `overload`), for acquireNow(). */
type DisciplineOf = (options: FairAcquireOptions | undefined, weight: number) => Discipline | undefined
const disciplines = new WeakMap<Semaphore, DisciplineOf>()

const clients = new WeakMap<Semaphore, PermitClient>()

/**
 * A lease taken at once without a promise, when the semaphore's store answers synchronously (the
 * memory store) and a permit is free with nobody queued; undefined otherwise (then acquire()). For
 * the admission engine's hot path (`request`: its priority and flow, with `overload`); not part of
 * the public API.
 */
export function acquireNow(
  semaphore: Semaphore,
  weight = 1,
  request?: FairAcquireOptions,
): Lease | undefined {
  const discipline = disciplines.get(semaphore)?.(request, weight)
  return clients.get(semaphore)?.acquireNow(undefined, weight, discipline)
}

/** Where the semaphores of an adaptive limit live: the shared store, or (scope 'local') this
 * process's own over it. */
export function adaptiveHome(store: Store, options: ResolvedAdaptiveOptions): Store {
  return options.scope === 'local' ? localStoreOf(store) : store
}

/** The adaptive limit of `semaphore` (made on `home`, adaptiveHome()): each step asks for the limit as
 * its permits; `name` is the one its logs give. For createSemaphore() and the admission engine; not
 * part of the public API. */
export function adaptiveLimitOf(
  semaphore: Semaphore,
  options: ResolvedAdaptiveOptions,
  home: Store,
  logger: AdaptiveLogger,
  name: string,
): AdaptiveLimit {
  const client = clients.get(semaphore) as PermitClient
  return new AdaptiveLimit(
    options,
    { store: home, space: client.space, setOwn: (n) => client.setPermits(n), fair: client.fair },
    logger,
    name,
  )
}
