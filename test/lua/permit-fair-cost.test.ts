// What a fair queue's calls cost in Redis commands, and what a plain bucket's calls must go on costing
// (issue 38: a bucket without `overload` costs exactly what it cost before). Counted with INFO
// commandstats on a private server (the shared ones see other files' traffic), so the counts are exact.
import { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { keySpace, type KeySpace } from '../../src/core/keys.js'
import { createRedisStore } from '../../src/index.js'
import { fairToken, flowId } from '../../src/core/fair.js'
import type { AcquireRequest, FairCall, PermitFamily } from '../../src/core/protocol/store.js'
import { type RedisServerHandle, startRedisServer } from '../helpers/redis-server.js'

let server: RedisServerHandle
let admin: Redis
let permits: PermitFamily
let seq = 0

beforeAll(async () => {
  server = await startRedisServer()
  admin = new Redis({ host: server.host, port: server.port })
  permits = createRedisStore(new Redis({ host: server.host, port: server.port })).permits
  await permits.inspect(space()) // loads the Lua: no step below counts FUNCTION LOAD
})
afterAll(async () => {
  admin?.disconnect()
  await server?.stop()
})

/** Calls of each command so far (INFO commandstats counts the commands a script runs too). */
async function stats(): Promise<Map<string, number>> {
  const calls = new Map<string, number>()
  for (const [, name, count] of (await admin.info('commandstats')).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm))
    if (name !== 'info') calls.set(name as string, Number(count))
  return calls
}

/** Until the server clock has moved on a millisecond: a step then never shares a millisecond with
 * the set-up (a PEXPIREAT ... GT to the same deadline is followed by an NX, one command more). */
async function nextMs(): Promise<void> {
  const ms = async () => {
    const [s, us] = await admin.time()
    return Number(s) * 1000 + Math.floor(Number(us) / 1000)
  }
  const start = await ms()
  while ((await ms()) === start);
}

/** The commands `step` ran, as "name:count" sorted by name. */
async function commands(step: () => Promise<unknown>): Promise<string> {
  await nextMs()
  const before = await stats()
  await step()
  const after = await stats()
  const out: string[] = []
  for (const [name, count] of [...after].sort(([a], [b]) => a.localeCompare(b))) {
    const delta = count - (before.get(name) ?? 0)
    if (delta > 0) out.push(`${name}:${delta}`)
  }
  return out.join(' ')
}

function space(): KeySpace {
  return keySpace('cost', 'sem', `n${seq++}`)
}

function plain(token: string, extra: Partial<AcquireRequest> = {}): AcquireRequest {
  // A lease shorter than the heartbeat: a hand-over's M expiry is then always two commands (GT, NX),
  // never one or two by the millisecond the call runs in.
  return { token, ttlMs: 3_000, permits: 1, enqueue: true, waiterTtlMs: 5_000, ...extra }
}

describe('a plain bucket costs what it cost before fair queues (must not change)', () => {
  it('uncontended acquire and release, contended acquire, hand-over and re-check run the same commands as main', async () => {
    const s = space()
    const steps: Record<string, string> = {}
    steps.acquire = await commands(() => permits.acquire(s, plain('a')))
    steps.release = await commands(() => permits.release(s, 'a', 1))
    await permits.acquire(s, plain('a'))
    steps.queue = await commands(() => permits.acquire(s, plain('b')))
    steps.recheck = await commands(() => permits.recheck(s, 1, 5_000, [{ token: 'b' }]))
    steps.handOver = await commands(() => permits.release(s, 'a', 1))
    steps.last = await commands(() => permits.release(s, 'b', 1))
    // Recorded on main (fbc3f88), before the fair queue's Lua.
    expect(steps).toEqual({
      acquire: 'exists:1 fcall:1 set:1 time:1',
      release: 'del:1 fcall:1 get:1 time:1',
      queue:
        'exists:1 fcall:1 get:2 hincrby:1 hset:1 pexpireat:5 set:2 time:1 zadd:3 zcard:1 zmscore:1 zrange:1',
      recheck:
        'exists:1 fcall:1 get:2 pexpireat:3 time:1 zadd:1 zcard:1 zrange:1 zrangebyscore:1 zrank:1 zscore:1',
      handOver:
        'exists:2 fcall:1 get:3 hdel:2 hmget:1 hset:1 pexpireat:5 publish:1 set:1 time:1 zadd:1 zcard:1 zmscore:2 zrange:2 zrangebyscore:1 zrem:3',
      last: 'del:1 exists:1 fcall:1 get:1 getdel:1 time:1 zmscore:1 zrem:1',
    })
  })
})

const FAIR: FairCall = { maxQueued: 0 }

function fairReq(token: string, permits = 1): AcquireRequest {
  return { ...plain(token), permits, fair: FAIR }
}

function flowToken(id: string, flow: string): string {
  return fairToken(id, 1, { priority: 4, flow: flowId(flow), flowWeight: 1, flowMax: 0 })
}

/** Admit every waiter of `s` (re-checks with room for all of them, at most 1000 grants a call). */
async function drain(s: KeySpace, waits: string[]): Promise<void> {
  for (let left = waits.length; left > 0; left -= 1000)
    await permits.recheck(s, waits.length + 2, 5_000, [], FAIR)
}

/** A fair bucket held by a keeper (it never goes idle, so its flows' tags stay), where `flows` flows
 * each had one request queued, admitted and released, and then a flow g two, one after the other:
 * the class clock is past every idle flow's finish tag, so each of them is dead weight in T. */
async function idleFlows(flows: number): Promise<KeySpace> {
  const s = space()
  await permits.acquire(s, fairReq(flowToken('keeper', 'keeper')))
  const idle = Array.from({ length: flows }, (_, i) => flowToken(`i${i}`, `idle${i}`))
  await Promise.all(idle.map((token) => permits.acquire(s, fairReq(token))))
  await drain(s, idle)
  await Promise.all(idle.map((token) => permits.release(s, token, 1, undefined, FAIR)))
  for (const id of ['g1', 'g2']) {
    const token = flowToken(id, 'g')
    await permits.acquire(s, fairReq(token))
    await permits.recheck(s, 2, 5_000, [{ token }], FAIR)
    await permits.release(s, token, 1, undefined, FAIR)
  }
  return s
}

/** A new flow's request queued, admitted (by a re-check) and released. */
async function cycle(s: KeySpace, id: string): Promise<string> {
  const token = flowToken(id, id)
  return commands(async () => {
    await permits.acquire(s, fairReq(token))
    await permits.recheck(s, 2, 5_000, [{ token }], FAIR)
    await permits.release(s, token, 1, undefined, FAIR)
  })
}

describe('a fair bucket', () => {
  it('idle flows do not raise the cost: a new flow runs the same commands with 1 and 10,000 idle flows', async () => {
    const one = await idleFlows(1)
    const many = await idleFlows(10_000)
    const t = (s: KeySpace) => admin.zcard(s.key('t'))
    const [oneBefore, manyBefore] = [await t(one), await t(many)]
    expect(manyBefore).toBeGreaterThanOrEqual(10_000)
    const withOne = await cycle(one, 'new1')
    const withMany = await cycle(many, 'new2')
    expect(withMany).toBe(withOne)
    // Each granting call prunes at most 16 dead tags (the new flow's own tag stays: it is ahead).
    expect(await t(one)).toBe(oneBefore)
    expect(await t(many)).toBe(manyBefore + 1 - 16)
  }, 60_000)

  it('O(log n): a fair acquire that queues runs the same commands behind 10 and 10,000 waiters', async () => {
    const queued = async (waiters: number) => {
      const s = space()
      await permits.acquire(s, fairReq(flowToken('keeper', 'keeper')))
      await Promise.all(
        Array.from({ length: waiters }, (_, i) =>
          permits.acquire(s, fairReq(flowToken(`w${i}`, `f${i % 50}`))),
        ),
      )
      return commands(() => permits.acquire(s, fairReq(flowToken('late', 'late'))))
    }
    const few = await queued(10)
    const lots = await queued(10_000)
    expect(lots).toBe(few)
  }, 60_000)

  it('records what the fair paths cost (uncontended acquire and release, queue, hand-over)', async () => {
    const s = space()
    const steps: Record<string, string> = {}
    steps.acquire = await commands(() => permits.acquire(s, fairReq(flowToken('a', 'x'))))
    steps.release = await commands(() => permits.release(s, flowToken('a', 'x'), 1, undefined, FAIR))
    await permits.acquire(s, fairReq(flowToken('a', 'x')))
    steps.queue = await commands(() => permits.acquire(s, fairReq(flowToken('b', 'y'))))
    steps.handOver = await commands(() => permits.release(s, flowToken('a', 'x'), 1, undefined, FAIR))
    steps.last = await commands(() => permits.release(s, flowToken('b', 'y'), 1, undefined, FAIR))
    // An uncapped weight-1 request of an idle fair bucket is a lone holder: the plain path's 3 commands.
    expect(steps.acquire).toBe('exists:1 fcall:1 set:1 time:1')
    expect(steps.release).toBe('del:1 fcall:1 get:1 time:1')
  })
})
