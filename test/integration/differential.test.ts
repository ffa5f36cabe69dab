// G11 and G12 by difference: seeded random sequences of acquire, tryAcquire, release, abort, timeout,
// renew, a release followed by a tryAcquire in the same turn (not awaited), bursts of calls in one event-loop turn (batched on Redis) and lease expiry, with fixed
// owners, fresh owners and reentrancy, run step by step on the memory store and on Redis at once.
// After every step both must agree on the holders and the queue, on what every call came to, and on
// the order of the fencing tokens handed out. A failure prints the seed and the step; run one seed
// with TOLLGATE_DIFF_SEED=<n>, print every step with TOLLGATE_DIFF_PRINT=1.
import { describe, expect, it } from 'vitest'
import { keySpace } from '../../src/core/keys.js'
import {
  AcquireTimeoutError,
  createMemoryStore,
  createReadWriteLock,
  createReentrantMutex,
  createSemaphore,
  type Lease,
  LockUpgradeError,
  ShedError,
  type Store,
} from '../../src/index.js'
import { flowId } from '../../src/core/fair.js'
import type { AdaptiveReport } from '../../src/core/protocol/store.js'
import { sleep, storeFor } from '../helpers/contract.js'
import { uniquePrefix } from '../helpers/redis.js'

type Family = 'rmutex' | 'sem' | 'rw' | 'fair'
const NAME = 'diff'
const STEPS = 40
// Seed 8 (first: the Cluster runs only the first) makes memory and Redis differ when a release made
// before a tryAcquire in the same turn reached Redis after it.
const SEEDS = process.env.TOLLGATE_DIFF_SEED ? [Number(process.env.TOLLGATE_DIFF_SEED)] : [8, 11, 36]
// The fair queue also replays seeds that once differed: 2 (a waiter queued and evicted in one call),
// 3 (tickets of refused tokens, tied scores), 21 (parked waiters when nothing is held), 19 and 30
// (a burst of acquires in one turn, once one merged call: a later token ranked ahead of an earlier
// one, evicted it or took the permit the earlier one's own call would have been handed).
const FAIR_SEEDS = process.env.TOLLGATE_DIFF_SEED ? SEEDS : [...SEEDS, 2, 3, 21, 19, 30]

/** mulberry32: a small seeded PRNG, so a failing sequence can be replayed. */
function prng(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

interface Side {
  acquire(options?: { timeoutMs?: number; signal?: AbortSignal }): Promise<Lease>
  tryAcquire(): Promise<Lease | undefined>
}

/** The lock objects of one family on one store, by actor name. `M` is mortal: short, never renewed. */
const mortalOptions = () => ({ ttlMs: 200, autoRenew: false })

function actorsOf(family: Family, store: Store): Record<string, Side> {
  const long = { ttlMs: 5000 }
  const mortal = { ttlMs: 200, autoRenew: false }
  if (family === 'rmutex') {
    return {
      A: createReentrantMutex(store, NAME, { owner: 'A', ...long }),
      B: createReentrantMutex(store, NAME, { owner: 'B', ...long }),
      F: createReentrantMutex(store, NAME, long), // a fresh owner per call
      M: createReentrantMutex(store, NAME, { owner: 'M', ...mortal }),
    }
  }
  if (family === 'sem') {
    // W asks for both permits at once (weight 2): FIFO with weights (issue 28 #12).
    const heavy = createSemaphore(store, NAME, { permits: 2, ...long })
    return {
      S: createSemaphore(store, NAME, { permits: 2, ...long }),
      T: createSemaphore(store, NAME, { permits: 2, ...long, waiterTtlMs: 3000 }),
      W: {
        acquire: (options) => heavy.acquire({ ...options, weight: 2 }),
        tryAcquire: () => heavy.tryAcquire({ weight: 2 }),
      },
      M: createSemaphore(store, NAME, { permits: 2, ...mortal }),
    }
  }
  if (family === 'fair') {
    // A fair queue (docs/middleware.md, "Overload") of 2 permits: three classes, three flows (b weighs 2, c capped
    // at 1 permit), a weight-2 request, and a fleet bound of 3 waiters that evicts lower classes.
    const overload = { flowWeights: { b: 2 }, flowMax: { c: 1 }, maxQueued: 3 }
    const sem = createSemaphore(store, NAME, { permits: 2, ...long, overload })
    const side = (priority: 'critical' | 'standard' | 'sheddable', flow: string, weight = 1): Side => ({
      acquire: (options) => sem.acquire({ ...options, priority, flow, weight }),
      tryAcquire: () => sem.tryAcquire({ priority, flow, weight }),
    })
    const mortal = createSemaphore(store, NAME, { permits: 2, ...mortalOptions(), overload })
    return {
      Ca: side('critical', 'a'),
      Sa: side('sheddable', 'a'),
      Sb: side('sheddable', 'b'),
      Nb: side('standard', 'b'),
      Nc: side('standard', 'c'),
      W: side('standard', 'a', 2),
      M: {
        acquire: (o) => mortal.acquire({ ...o, flow: 'a' }),
        tryAcquire: () => mortal.tryAcquire({ flow: 'a' }),
      },
    }
  }
  const a = createReadWriteLock(store, NAME, { owner: 'A', ...long })
  const b = createReadWriteLock(store, NAME, { owner: 'B', ...long })
  const f = createReadWriteLock(store, NAME, long)
  const m = createReadWriteLock(store, NAME, { owner: 'M', ...mortal })
  return { Ar: a.read, Aw: a.write, Br: b.read, Bw: b.write, Fr: f.read, Fw: f.write, Mw: m.write }
}

/** What one call came to. */
interface Call {
  actor: string
  /** Who owns it in the store: a fixed owner's name, or the call itself for a fresh owner. */
  owner?: string
  status: string
  lease?: Lease
  abort?: AbortController
  /** A short acquire: the run is not settled before its timeout has fired (local ms). */
  until?: number
}

/** One store's run of a sequence: its lock objects and every call made so far. */
class Run {
  readonly calls: Call[] = []
  readonly actors: Record<string, Side>
  constructor(
    readonly family: Family,
    readonly store: Store,
  ) {
    this.actors = actorsOf(family, store)
  }

  track(call: Call, pending: Promise<Lease | undefined>): void {
    // A fresh owner (F, and every semaphore call) is its own; the others are fixed owners.
    call.owner =
      this.family === 'sem' || this.family === 'fair' || call.actor.startsWith('F')
        ? `#${this.calls.length}`
        : call.actor.slice(0, 1)
    this.calls.push(call)
    pending.then(
      (lease) => {
        call.status = lease ? 'granted' : 'none'
        call.lease = lease
      },
      (error: unknown) => {
        call.status =
          error instanceof AcquireTimeoutError
            ? 'timeout'
            : error instanceof LockUpgradeError
              ? `refused:${error.reason}`
              : error instanceof ShedError
                ? `shed:${error.reason}`
                : call.abort?.signal.aborted
                  ? 'aborted'
                  : `error:${(error as Error).name}`
      },
    )
  }

  /** What the store must report, derived from the calls alone: one holder per owner with a granted
   * call (a reader per owner with a granted read; W's calls hold two permits each), one queued per
   * owner with a waiting call. */
  expected(): string {
    const owners = (status: string, mode?: 'r' | 'w') =>
      new Set(
        this.calls
          .filter((c) => c.status === status && (!mode || c.actor.endsWith(mode)))
          .map((c) => c.owner),
      ).size
    if (this.family === 'rw')
      return `readers=${owners('granted', 'r')} writer=${owners('granted', 'w') > 0} queued=${owners('pending')}`
    const heavy = this.calls.filter((c) => c.status === 'granted' && c.actor === 'W').length
    return `holders=${owners('granted') + heavy} queued=${owners('pending')}`
  }

  async stats(): Promise<string> {
    // The reentrant mutex keeps the mutex's keys (one name is one lock).
    // A fair queue is a semaphore's permit set.
    const kind = this.family === 'rmutex' ? 'mutex' : this.family === 'fair' ? 'sem' : this.family
    const space = keySpace(this.store.prefix, kind, NAME)
    if (this.family === 'rw') {
      const s = await this.store.rwlock.inspect(space)
      return `readers=${s.readers} writer=${s.writer} queued=${s.queued}`
    }
    if (this.family === 'fair') {
      const flows = ['a', 'b', 'c'].map(flowId)
      const s = await this.store.permits.inspectFair!(space, { maxQueued: 3 }, flows)
      const perFlow = flows.map((f) => {
        const x = s.flows[f]
        return `${x?.waiting ?? 0}/${x?.held ?? 0}/${x?.parked ?? 0}`
      })
      return `holders=${s.holders} queued=${s.queued} classes=${JSON.stringify(s.classes)} parked=${s.parked} evicted=${JSON.stringify(s.evicted)} flows=${perFlow.join(',')}`
    }
    const s = await this.store.permits.inspect(space)
    return `holders=${s.holders} queued=${s.queued}`
  }

  /** Statuses and fence ranks of every call, and the store's counts. */
  async snapshot(): Promise<string> {
    const fences = [...new Set(this.calls.flatMap((c) => (c.lease ? [c.lease.fencingToken] : [])))].sort(
      (x, y) => x - y,
    )
    const calls = this.calls.map((c, i) => {
      const rank = c.lease ? `#${fences.indexOf(c.lease.fencingToken)}` : ''
      return `${i}:${c.status}${rank}`
    })
    return `${await this.stats()} | ${calls.join(' ')}`
  }
}

/** The steps of a sequence, as functions applied to each run in the same way. */
function sequence(family: Family, seed: number): { label: string; apply(run: Run): Promise<void> }[] {
  const random = prng(seed)
  const pick = <T>(list: T[]): T => list[Math.floor(random() * list.length)] as T
  const names =
    family === 'rmutex'
      ? ['A', 'B', 'F']
      : family === 'sem'
        ? ['S', 'T', 'W']
        : family === 'fair'
          ? ['Ca', 'Sa', 'Sb', 'Nb', 'Nc', 'W']
          : ['Ar', 'Aw', 'Br', 'Bw', 'Fr', 'Fw']
  const steps: { label: string; apply(run: Run): Promise<void> }[] = []
  for (let i = 0; i < STEPS; i++) {
    const roll = random()
    const actor = pick(names)
    // Indexes are drawn now (the same for both runs) and resolved against each run's calls.
    const choice = random()
    if (roll < 0.22) {
      steps.push({
        label: `acquire ${actor}`,
        apply: async (run) =>
          run.track({ actor, status: 'pending' }, run.actors[actor]!.acquire({ timeoutMs: 4000 })),
      })
    } else if (roll < 0.29) {
      steps.push({
        label: `acquire ${actor} (60 ms)`,
        apply: async (run) =>
          run.track(
            { actor, status: 'pending', until: Date.now() + 60 },
            run.actors[actor]!.acquire({ timeoutMs: 60 }),
          ),
      })
    } else if (roll < 0.37) {
      steps.push({
        label: `acquire ${actor} (abortable)`,
        apply: async (run) => {
          const abort = new AbortController()
          run.track(
            { actor, status: 'pending', abort },
            run.actors[actor]!.acquire({ signal: abort.signal, timeoutMs: 4000 }),
          )
        },
      })
    } else if (roll < 0.47) {
      steps.push({
        label: `tryAcquire ${actor}`,
        apply: async (run) => run.track({ actor, status: 'pending' }, run.actors[actor]!.tryAcquire()),
      })
    } else if (roll < 0.55) {
      const others = [pick(names), pick(names)]
      steps.push({
        label: `burst ${actor} ${others.join(' ')}`,
        apply: async (run) => {
          for (const who of [actor, ...others])
            run.track({ actor: who, status: 'pending' }, run.actors[who]!.acquire({ timeoutMs: 4000 }))
        },
      })
    } else if (roll < 0.62) {
      // The owner of a waiting call asks again, at once or only if free: same-owner concurrency.
      const again = random() < 0.5
      steps.push({
        label: again ? 'acquire again for a waiting owner' : 'tryAcquire for a waiting owner',
        apply: async (run) => {
          const waiting = run.calls.filter((c) => c.status === 'pending')
          const who = waiting[Math.floor(choice * waiting.length)]?.actor
          if (!who) return
          const side = run.actors[who]!
          run.track(
            { actor: who, status: 'pending' },
            again ? side.acquire({ timeoutMs: 4000 }) : side.tryAcquire(),
          )
        },
      })
    } else if (roll < 0.75) {
      steps.push({
        label: 'release one',
        apply: async (run) => {
          const held = run.calls.filter((c) => c.status === 'granted')
          const call = held[Math.floor(choice * held.length)]
          if (!call) return
          call.status = 'released'
          await call.lease!.release()
        },
      })
    } else if (roll < 0.85) {
      // Not awaited: the tryAcquire is made in the same turn and must find the release done (G11).
      steps.push({
        label: `release one, then tryAcquire ${actor} in the same turn`,
        apply: async (run) => {
          const held = run.calls.filter((c) => c.status === 'granted')
          const call = held[Math.floor(choice * held.length)]
          if (!call) return
          call.status = 'released'
          const released = call.lease!.release()
          run.track({ actor, status: 'pending' }, run.actors[actor]!.tryAcquire())
          await released
        },
      })
    } else if (roll < 0.9) {
      steps.push({
        label: 'abort one',
        apply: async (run) => {
          const waiting = run.calls.filter((c) => c.status === 'pending' && c.abort)
          const call = waiting[Math.floor(choice * waiting.length)]
          if (!call) return
          call.abort!.abort()
        },
      })
    } else if (roll < 0.95) {
      steps.push({
        label: 'renew one',
        apply: async (run) => {
          const held = run.calls.filter((c) => c.status === 'granted')
          const call = held[Math.floor(choice * held.length)]
          if (!call) return
          await call.lease!.renew().then(
            () => {},
            () => {
              call.status = 'lost'
            },
          )
        },
      })
    } else {
      const mortal = family === 'rw' ? 'Mw' : 'M'
      steps.push({
        label: `expire (${mortal} takes it if free, for 200 ms)`,
        apply: async (run) => {
          run.track({ actor: mortal, status: 'pending' }, run.actors[mortal]!.tryAcquire())
          await sleep(400)
          const call = run.calls.at(-1)!
          if (call.status === 'granted') call.status = 'expired'
        },
      })
    }
  }
  return steps
}

/** Wait until a run's snapshot stops changing (every call settled or waiting, grants delivered). */
async function settle(run: Run): Promise<string> {
  let last = ''
  let stable = 0
  const deadline = Date.now() + 3000
  const timeoutsFired = Math.max(0, ...run.calls.map((c) => (c.status === 'pending' && c.until) || 0)) + 20
  while (Date.now() < deadline) {
    const now = await run.snapshot()
    stable = now === last ? stable + 1 : 0
    if (stable >= 3 && Date.now() > timeoutsFired) return now
    last = now
    await sleep(20)
  }
  return last
}

async function cleanUp(run: Run): Promise<void> {
  for (const call of run.calls) {
    call.abort?.abort()
    await call.lease?.release().catch(() => {})
  }
  await sleep(50)
  for (const call of run.calls) await call.lease?.release().catch(() => {})
  await run.store.close()
}

for (const kind of ['standalone', 'cluster'] as const) {
  describe(`memory and Redis agree step by step [${kind}]`, () => {
    for (const family of ['rmutex', 'sem', 'rw', 'fair'] as Family[]) {
      const all = family === 'fair' ? FAIR_SEEDS : SEEDS
      const seeds = kind === 'cluster' ? all.slice(0, 1) : all
      for (const seed of seeds) {
        it(`G11 G12: ${family}, seed ${seed}`, async () => {
          const prefix = uniquePrefix().slice(0, -1)
          const memory = new Run(family, createMemoryStore({ prefix }))
          const redis = new Run(family, storeFor(kind, prefix).store)
          const steps = sequence(family, seed)
          const log: string[] = []
          try {
            for (const [i, step] of steps.entries()) {
              await Promise.all([step.apply(memory), step.apply(redis)])
              const [m, r] = await Promise.all([settle(memory), settle(redis)])
              const expected = memory.expected()
              log.push(`${i} ${step.label}\n  memory ${m}\n  redis  ${r}\n  calls  ${expected}`)
              const where = `at step ${i} (${step.label}); seed ${seed} (TOLLGATE_DIFF_SEED=${seed})`
              if (m !== r) throw new Error(`memory and ${kind} differ ${where}\n${log.join('\n')}`)
              // Both agree; they must also agree with what the calls add up to (no lost or extra count).
              if (!m.startsWith(`${expected} ${family === 'fair' ? 'classes=' : '|'}`))
                throw new Error(`the stores disagree with the calls ${where}\n${log.join('\n')}`)
            }
            if (process.env.TOLLGATE_DIFF_PRINT) console.log(`${family} seed ${seed}\n${log.join('\n')}`)
            expect(log).toHaveLength(STEPS)
          } finally {
            await Promise.all([cleanUp(memory), cleanUp(redis)])
          }
        }, 120_000)
      }
    }
  })
}

describe('the adaptive family: memory and Redis agree call by call [standalone]', () => {
  it('G11: seeded reports (counts, clients, latency buckets), leaves and commits of 3 replicas give the same replies', async () => {
    const WINDOW = 200
    const prefix = uniquePrefix().slice(0, -1)
    const stores = [createMemoryStore({ prefix }), storeFor('standalone', prefix).store]
    const space = keySpace(prefix, 'sem', 'route:diff')
    const random = prng(37)
    const log: string[] = []
    let stepped = -1
    /** One call on both stores; their replies (without the clock) must be the same. */
    const both = async (label: string, call: (store: Store) => Promise<unknown>) => {
      const replies = await Promise.all(stores.map(call))
      const [memory, redis] = replies.map((reply) => JSON.stringify(reply))
      log.push(`${label}: memory ${memory}\n    redis  ${redis}`)
      if (memory !== redis) throw new Error(`memory and Redis differ at ${label}\n${log.join('\n')}`)
      return replies[0]
    }
    /** A report with random counts, clients and buckets (made once: both stores get the same). */
    const reportOf = (replica: string, window: number, leave = false): AdaptiveReport => {
      const buckets = Array.from({ length: Math.floor(random() * 4) }, (_, b) => {
        const count = 1 + Math.floor(random() * 5)
        return [
          10 * b + Math.floor(random() * 10),
          count,
          count * Math.floor(1000 + random() * 50_000),
        ] as const
      })
      const requests = buckets.reduce((sum, [, count]) => sum + count, 0)
      return {
        replica,
        window,
        requests,
        drops: Math.floor(random() * 3),
        latencyUs: buckets.reduce((sum, [, , us]) => sum + us, 0),
        maxInFlight: Math.floor(random() * 8),
        clients: requests > 0 ? 1 + Math.floor(random() * 4) : 0,
        clientsOver: Math.floor(random() * 3),
        latency: buckets,
        windowMs: WINDOW,
        leaderTtlMs: 3 * WINDOW,
        stateTtlMs: 60_000,
        leave,
      }
    }
    const report = async (label: string, r: AdaptiveReport) => {
      const reply = (await both(label, async (store) => {
        const { now: _, ...rest } = await store.adaptive!.report(space, r)
        return rest
      })) as { stepped: number }
      stepped = reply.stepped
    }
    let last = 0
    try {
      for (let round = 0; round < 8; round++) {
        // Each round in the middle of the next window: both clocks name the same one.
        while (Math.floor(Date.now() / WINDOW) * WINDOW <= last || Date.now() % WINDOW < 60) await sleep(5)
        const current = Math.floor(Date.now() / WINDOW) * WINDOW
        last = current
        // Every replica reports the window just ended (the same seed on both stores: the same data),
        // one of them twice (a report sent again); the leader is told the window before.
        for (const replica of ['a', 'b', 'c', 'b'])
          await report(`${round} report ${replica}`, reportOf(replica, current - WINDOW))
        await both(`${round} commit`, (store) =>
          store.adaptive!.commit(space, {
            window: current - 2 * WINDOW,
            based: stepped,
            state: JSON.stringify({ limit: round }),
            stateTtlMs: 60_000,
            windowMs: WINDOW,
          }),
        )
        if (random() < 0.2) await report(`${round} leave c`, reportOf('c', current, true))
      }
      if (process.env.TOLLGATE_DIFF_PRINT) console.log(log.join('\n'))
      // The sequence did what it is for: a leader was told a window to step, buckets and all, and
      // steps were saved.
      expect(log.some((line) => / commit: memory true/.test(line))).toBe(true)
      expect(log.some((line) => line.includes('"previous":{') && line.includes('"latency":[['))).toBe(true)
    } finally {
      await Promise.all(stores.map((store) => store.close()))
    }
  }, 30_000)
})
