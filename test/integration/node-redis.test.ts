// The store on a node-redis (v5) client or cluster, beside ioredis: what differs between the two
// clients, on real servers. The suites that run again with node-redis clients (TOLLGATE_TEST_CLIENT=
// node-redis, `npm run test:node-redis`) prove the rest: every primitive, the Lua's reloads and call
// order, lost replies under a fault proxy, Cluster.
import type { Redis } from 'ioredis'
import { createClient, RESP_TYPES } from 'redis'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { keySpace } from '../../src/core/keys.js'
import type { Grant } from '../../src/core/protocol/store.js'
import {
  ConfigError,
  createMutex,
  createRedisStore,
  createSemaphore,
  type RedisClient,
  type Store,
  StoreUnavailableError,
} from '../../src/index.js'
import { eventually } from '../helpers/contract.js'
import { type FaultProxy, startFaultProxy } from '../helpers/fault-proxy.js'
import { closeNodeRedis, nodeRedisClient, nodeRedisOf } from '../helpers/node-redis.js'
import { connectCluster, connectStandalone, connectTo, uniquePrefix } from '../helpers/redis.js'
import { type RedisServerHandle, startRedisServer } from '../helpers/redis-server.js'

let server: RedisServerHandle
beforeAll(async () => {
  server = await startRedisServer()
}, 60_000)
afterAll(async () => {
  await server?.stop()
})

const opened: { close(): Promise<void> | void }[] = []
afterEach(async () => {
  for (const item of opened.splice(0).reverse()) await item.close()
})

function store(client: RedisClient, options: { commandTimeoutMs?: number } = {}): Store {
  const made = createRedisStore(client, { prefix: uniquePrefix().slice(0, -1), ...options })
  opened.push(made)
  return made
}

async function commandCalls(admin: Redis, command: string): Promise<number> {
  const stats = await admin.info('commandstats')
  return Number(new RegExp(`^cmdstat_${command}:calls=(\\d+)`, 'm').exec(stats)?.[1] ?? 0)
}

for (const kind of ['standalone', 'cluster'] as const) {
  describe(`a node-redis ${kind === 'standalone' ? 'client' : 'cluster'}`, () => {
    const client = () => nodeRedisOf(kind)
    const inspector = () => (kind === 'standalone' ? connectStandalone() : connectCluster())

    it('G1 G7: one holder at a time, fences that increase, the queue served in order', async () => {
      const prefix = uniquePrefix().slice(0, -1)
      const stores = Array.from({ length: 3 }, () => {
        const made = createRedisStore(client(), { prefix })
        opened.push(made)
        return made
      })
      const mutexes = stores.map((each) => createMutex(each, 'one'))
      const space = keySpace(stores[0]!.prefix, 'mutex', 'one')
      const first = await mutexes[0]!.acquire()
      const order: number[] = []
      const waiting: Promise<number>[] = []
      for (const [i, mutex] of mutexes.entries()) {
        waiting.push(
          mutex.acquire({ timeoutMs: 5000 }).then(async (lease) => {
            order.push(i)
            const fence = lease.fencingToken
            await lease.release()
            return fence
          }),
        )
        await eventually(async () => (await stores[0]!.permits.inspect(space)).queued === i + 1)
      }
      await first.release()
      const fences = await Promise.all(waiting)
      expect(order).toEqual([0, 1, 2])
      expect(fences.every((fence) => fence > first.fencingToken)).toBe(true)
      expect(new Set(fences).size).toBe(3)
    })

    it('G10: a subscription confirmed by Redis hears a grant published by another client', async () => {
      const mine = store(client())
      const space = keySpace(mine.prefix, 'sem', 'heard')
      const heard: Grant[] = []
      await mine.subscribe(space, (grant) => heard.push(grant))
      expect(mine.notificationsHealthy).toBe(true)
      await inspector().publish(space.channel, 'tk 7 8')
      await eventually(() => heard.length === 1, 2000)
      expect(heard[0]).toMatchObject({ token: 'tk', fence: 7 })
    })
  })
}

describe('a node-redis client: faults', () => {
  it('G10: the subscriber connection lost: unhealthy until subscribed again, then grants arrive', async () => {
    const proxy: FaultProxy = await startFaultProxy(server)
    opened.push({ close: () => proxy.stop() })
    const admin = connectTo(server)
    const mine = store(nodeRedisClient(proxy))
    const space = keySpace(mine.prefix, 'sem', 'lost')
    const heard: Grant[] = []
    await mine.subscribe(space, (grant) => heard.push(grant))
    expect(mine.notificationsHealthy).toBe(true)
    proxy.refuse() // every connection cut, and none accepted until heal()
    await eventually(() => !mine.notificationsHealthy, 2000)
    await proxy.heal()
    await eventually(() => mine.notificationsHealthy, 5000)
    await admin.publish(space.channel, 'again 3 4')
    await eventually(() => heard.length === 1, 2000)
    expect(heard[0]).toMatchObject({ token: 'again', fence: 3 })
  })

  it('G3: an acquire whose reply is lost is not resent by node-redis: it fails, and is given back', async () => {
    const proxy: FaultProxy = await startFaultProxy(server)
    opened.push({ close: () => proxy.stop() })
    const prefix = uniquePrefix().slice(0, -1)
    const cut = createRedisStore(nodeRedisClient(proxy), { prefix })
    const direct = createRedisStore(nodeRedisClient(server), { prefix })
    opened.push(cut, direct)
    const dropped = proxy.dropReply(keySpace(prefix, 'mutex', 'lost').key('h'))
    const acquiring = createMutex(cut, 'lost', { ttlMs: 60_000 }).acquire({ timeoutMs: 5000 })
    await dropped
    await expect(acquiring).rejects.toBeInstanceOf(StoreUnavailableError)
    // Redis ran it, nobody holds the lease, and it is free long before its 60 s TTL: given back.
    await eventually(async () => {
      const lease = await createMutex(direct, 'lost').tryAcquire()
      await lease?.release()
      return lease !== undefined
    }, 5000)
  })

  it('a store call within commandTimeoutMs while Redis does not answer, and calls again once it does', async () => {
    const proxy: FaultProxy = await startFaultProxy(server)
    opened.push({ close: () => proxy.stop() })
    const mine = store(nodeRedisClient(proxy), { commandTimeoutMs: 300 })
    const mutex = createMutex(mine, 'slow')
    await (await mutex.acquire()).release()
    proxy.partition()
    await expect(mutex.tryAcquire()).rejects.toThrow(/Redis did not answer within 300 ms/)
    await proxy.heal()
    proxy.cutAll() // the partition's connection lost bytes: node-redis starts a new one
    await eventually(async () => {
      const lease = await mutex.tryAcquire().catch(() => undefined)
      await lease?.release()
      return lease !== undefined
    }, 5000)
  })

  it('an error reply is known as one: a user without functions runs the same calls as EVALSHA', async () => {
    const admin = connectTo(server)
    await admin.call('ACL', 'SETUSER', 'nr-nofn', 'on', '>pw', '~*', '&*', '+@all', '-function', '-fcall')
    await admin.config('RESETSTAT')
    const mine = store(nodeRedisClient(server, 20, { username: 'nr-nofn', password: 'pw' }))
    const mutex = createMutex(mine, 'acl')
    for (let i = 0; i < 3; i++) await (await mutex.acquire()).release()
    // The first FCALL was refused (NOPERM), and every call ran as EVALSHA.
    expect(await commandCalls(admin, 'evalsha')).toBeGreaterThanOrEqual(6)
    expect(await commandCalls(admin, 'fcall')).toBe(0)
  })

  it('RESP3: the same replies', async () => {
    const resp3 = createClient({ socket: { host: server.host, port: server.port }, RESP: 3 })
    await resp3.connect()
    opened.push({ close: () => closeNodeRedis(resp3) })
    const sem = createSemaphore(store(resp3), 'resp3', { permits: 2 })
    const leases = await Promise.all([sem.acquire(), sem.acquire()])
    expect(await sem.tryAcquire()).toBeUndefined()
    expect(await sem.stats()).toMatchObject({ holders: 2, queued: 0, limit: 2 })
    await Promise.all(leases.map((lease) => lease.release()))
  })

  it("the user's type mapping does not reach the store's replies", async () => {
    const mapped = createClient({
      socket: { host: server.host, port: server.port },
      commandOptions: { typeMapping: { [RESP_TYPES.NUMBER]: String, [RESP_TYPES.BLOB_STRING]: Buffer } },
    })
    await mapped.connect()
    opened.push({ close: () => closeNodeRedis(mapped) })
    const sem = createSemaphore(store(mapped), 'mapped', { permits: 1 })
    const lease = await sem.acquire({ timeoutMs: 2000 })
    expect(lease.fencingToken).toBeGreaterThan(0)
    expect(await sem.tryAcquire()).toBeUndefined()
    await lease.release()
  })

  it('a client not connected yet: each call fails, naming the fix', async () => {
    const unopened = createClient({ socket: { host: server.host, port: server.port } })
    const mine = store(unopened)
    await expect(createMutex(mine, 'closed').tryAcquire()).rejects.toThrow(
      /node-redis client is not open: connect it \(await client\.connect\(\)\)/,
    )
  })

  it('anything else is refused when the store is made, naming both clients', () => {
    expect(() => createRedisStore({ isOpen: true } as unknown as RedisClient)).toThrow(ConfigError)
    expect(() => createRedisStore({ isOpen: true } as unknown as RedisClient)).toThrow(/node-redis/)
  })
})
