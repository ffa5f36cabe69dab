// A hold renewed past its first ttl costs what a fresh one costs per call (issue 37, part 3). An
// owner's acquisitions after its first are members of A, scored by a lease expiry so that a release
// can find and sweep the members of a hold that ran out (its owner died). Renewals must keep those
// scores ahead of the clock: when they did not, one ttl after the hold was taken every member of the
// live hold was due, and each release re-scored 100 of them. Counted on a private server (INFO
// commandstats: the commands each call runs inside Redis, exact however loaded the machine is).
// The leases are renewed by hand, in calls of MAX_RENEW_BATCH as the scheduler sends them, so no
// renewal runs while a call is counted.
import { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createRedisStore, type Store } from '../../src/index.js'
import { MAX_RENEW_BATCH } from '../../src/core/client/renewal.js'
import { keySpace, type KeySpace } from '../../src/core/keys.js'
import type { Acquisition, RenewReply } from '../../src/core/protocol/store.js'
import { type RedisServerHandle, startRedisServer } from '../helpers/redis-server.js'

/** Acquisitions of the aged owner: 10 sweeps of 100 before the fix, so each of CALLS calls pays one. */
const HOLDS = 1_000
const CALLS = 10
const TTL_MS = 1_500
const WAITER_TTL_MS = 5_000

let server: RedisServerHandle
let admin: Redis
let store: Store

/** Commands run inside scripts so far: every INFO commandstats count but FCALL's own and the probes'. */
async function commandsInside(): Promise<number> {
  let total = 0
  for (const [, name, count] of (await admin.info('commandstats')).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm))
    if (!['fcall', 'info', 'function|load'].includes(name as string)) total += Number(count)
  return total
}

/** Commands inside Redis per run of `call`, over CALLS runs (the i-th run gets i); `before(i)` runs
 * first each time, uncounted. */
async function perCall(
  call: (i: number) => Promise<unknown>,
  before?: (i: number) => Promise<unknown>,
): Promise<number> {
  let total = 0
  for (let i = 0; i < CALLS; i++) {
    await before?.(i)
    const start = await commandsInside()
    await call(i)
    total += (await commandsInside()) - start
  }
  return total / CALLS
}

/** Renew every acquisition in calls of MAX_RENEW_BATCH (as the renewal scheduler does); all must hold. */
async function renewAll(renew: (holds: Acquisition[]) => Promise<RenewReply>, holds: Acquisition[]) {
  let now = 0
  for (let from = 0; from < holds.length; from += MAX_RENEW_BATCH) {
    const reply = await renew(holds.slice(from, from + MAX_RENEW_BATCH))
    expect(reply.expiresAt.every((at) => at > reply.now)).toBe(true)
    now = reply.now
  }
  return now
}

/** Renew at a third of the ttl until the server clock has passed every first expiry (at least twice). */
async function age(
  renew: (holds: Acquisition[]) => Promise<RenewReply>,
  holds: Acquisition[],
  firstExpiry: number,
): Promise<number> {
  let renewals = 0
  let now = 0
  while (renewals < 2 || now <= firstExpiry) {
    await new Promise((resolve) => setTimeout(resolve, TTL_MS / 3))
    now = await renewAll(renew, holds)
    renewals++
  }
  return renewals
}

beforeAll(async () => {
  server = await startRedisServer()
  admin = new Redis({ host: server.host, port: server.port })
  store = createRedisStore(new Redis({ host: server.host, port: server.port }), { prefix: 'aged' })
})

afterAll(async () => {
  await store?.close()
  await admin?.quit().catch(() => admin.disconnect())
  await server?.stop()
})

/** The owner 'job' takes HOLDS acquisitions; returns them and the last first expiry. */
async function holdMany(
  take: (op: string) => Promise<{ granted: boolean; expiresAt?: number }>,
): Promise<{ holds: Acquisition[]; firstExpiry: number }> {
  const holds: Acquisition[] = []
  let firstExpiry = 0
  for (let from = 0; from < HOLDS; from += 100) {
    const ops = Array.from({ length: 100 }, (_, k) => `a${from + k}`)
    const replies = await Promise.all(ops.map(take))
    for (const [k, reply] of replies.entries()) {
      expect(reply.granted).toBe(true)
      firstExpiry = Math.max(firstExpiry, reply.expiresAt ?? 0)
      holds.push({ token: 'job', op: ops[k] })
    }
  }
  return { holds, firstExpiry }
}

/** One call of the table in issue 37, on the name of `space`: `hold` takes an acquisition `op` of the
 * owner 'job', `renew` renews some, `call` is the call counted (run `i` of `phase`), after
 * `before`, uncounted; `release` gives acquisition `op` back. */
interface Case {
  hold(op: string): Promise<{ granted: boolean; expiresAt?: number }>
  renew(holds: Acquisition[]): Promise<RenewReply>
  call(phase: 'fresh' | 'aged', i: number): Promise<unknown>
  before?(phase: 'fresh' | 'aged', i: number): Promise<unknown>
  release(op: string): Promise<string>
  /** Whether each call gives one of the owner's acquisitions back (the last ones first). */
  takesOne?: boolean
}

const readRequest = { mode: 'read' as const, ttlMs: TTL_MS, enqueue: true, waiterTtlMs: WAITER_TTL_MS }
const permitRequest = { ttlMs: TTL_MS, permits: 1, enqueue: true, waiterTtlMs: WAITER_TTL_MS }

function readLock(
  name: string,
  call: (space: KeySpace, phase: 'fresh' | 'aged', i: number) => Promise<unknown>,
) {
  const space = keySpace('aged', 'rw', name)
  return {
    hold: (op: string) => store.rwlock.acquire(space, { ...readRequest, token: 'job', op }),
    renew: (holds: Acquisition[]) => store.rwlock.renew(space, 'read', TTL_MS, holds),
    call: (phase: 'fresh' | 'aged', i: number) => call(space, phase, i),
    release: (op: string) => store.rwlock.release(space, 'job', 'read', op),
  } satisfies Case
}

function reentrantMutex(name: string): Case {
  const space = keySpace('aged', 'mutex', name)
  const permits = store.permits
  const waiter = (phase: string, i: number) => ({ token: `${phase}-${i}`, op: `w${i}` })
  return {
    hold: (op) => permits.acquire(space, { ...permitRequest, token: 'job', op }),
    renew: (holds) => permits.renew(space, TTL_MS, holds),
    // Another owner asks and queues (the mutex is held), uncounted; then it gives up, counted.
    before: async (phase, i) =>
      expect((await permits.acquire(space, { ...permitRequest, ...waiter(phase, i) })).granted).toBe(false),
    call: async (phase, i) => {
      const { token, op } = waiter(phase, i)
      expect(await permits.release(space, token, 1, op)).toBe('dequeued')
    },
    release: (op) => permits.release(space, 'job', 1, op),
  }
}

// Before: the numbers of issue 37 (10,000 acquisitions, a ttl of 1.5 s), fresh against aged.
const CASES: [string, () => Case][] = [
  [
    'read lock: the release of one acquisition (before: 17.9 against 318 commands)',
    () => ({
      ...readLock('release-one', async (space, phase, i) => {
        const op = `a${HOLDS - 1 - i - (phase === 'aged' ? CALLS : 0)}`
        expect(await store.rwlock.release(space, 'job', 'read', op)).toBe('decremented')
      }),
      takesOne: true,
    }),
  ],
  [
    "read lock: another reader's acquire + release (before: 37 against 337)",
    () =>
      readLock('other-reader', async (space, phase, i) => {
        const token = `${phase}-${i}`
        expect((await store.rwlock.acquire(space, { ...readRequest, token, op: token })).granted).toBe(true)
        expect(await store.rwlock.release(space, token, 'read', token)).toBe('freed')
      }),
  ],
  ['reentrant mutex: a waiter giving up (before: 32.7 against 332)', () => reentrantMutex('waiter')],
]

describe('a hold renewed past its first ttl costs what a fresh one costs per call', () => {
  it.each(CASES)(
    `%s; ${HOLDS} acquisitions`,
    async (_label, make) => {
      const c = make()
      const { holds, firstExpiry } = await holdMany((op) => c.hold(op))
      const counted = (phase: 'fresh' | 'aged') =>
        perCall((i) => c.call(phase, i), c.before && ((i) => c.before!(phase, i)))
      const fresh = await counted('fresh')
      // Acquisitions a release case gave back are renewed no more.
      const live = c.takesOne ? holds.slice(0, HOLDS - CALLS) : holds
      const renewals = await age((batch) => c.renew(batch), live, firstExpiry)
      const aged = await counted('aged')
      expect(aged, JSON.stringify({ fresh, aged, renewals })).toBeLessThanOrEqual(fresh * 1.2)
      // What must not change: the aged hold still holds every acquisition left, and frees with the last.
      const left = c.takesOne ? live.slice(0, live.length - CALLS) : live
      for (const [k, { op }] of left.entries())
        expect(await c.release(op!)).toBe(k === left.length - 1 ? 'freed' : 'decremented')
      expect(await admin.keys('aged:*')).toEqual([])
    },
    30_000,
  )
})
