// What a fair queue's calls cost in Redis commands, and what a plain bucket's calls must go on costing
// (issue 38: a bucket without `overload` costs exactly what it cost before). Counted with INFO
// commandstats on a private server (the shared ones see other files' traffic), so the counts are exact.
import { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { keySpace, type KeySpace } from '../../src/core/keys.js'
import { createRedisStore } from '../../src/index.js'
import type { AcquireRequest, PermitFamily } from '../../src/core/protocol/store.js'
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

/** The commands `step` ran, as "name:count" sorted by name. */
async function commands(step: () => Promise<unknown>): Promise<string> {
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
  return { token, ttlMs: 10_000, permits: 1, enqueue: true, waiterTtlMs: 5_000, ...extra }
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
        'exists:2 fcall:1 get:3 hdel:2 hmget:1 hset:1 pexpireat:4 publish:1 set:1 time:1 zadd:1 zcard:1 zmscore:2 zrange:2 zrangebyscore:1 zrem:3',
      last: 'del:1 exists:1 fcall:1 get:1 getdel:1 time:1 zmscore:1 zrem:1',
    })
  })
})
