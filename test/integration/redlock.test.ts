// RedLock over independent Redis masters: the three independents of the global setup, plus private
// servers (startRedisServer) for every test that stops or pauses a node.
import type { Redis } from 'ioredis'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { keySpace } from '../../src/core/keys.js'
import {
  ConfigError,
  createMemoryStore,
  createRedisStore,
  createRedlock,
  LeaseLostError,
  type Redlock,
  type RedlockOptions,
  RedlockQuorumError,
  type Store,
} from '../../src/index.js'
import { contend, type ContendResult, redisChecker } from '../fixtures/contend.js'
import { type ChildHandle, spawnChild } from '../helpers/child.js'
import { eventually, keysUnder, permitHolders, sleep } from '../helpers/contract.js'
import { connectIndependent, connectStandalone, connectTo, uniquePrefix } from '../helpers/redis.js'
import { type RedisServerHandle, startRedisServer } from '../helpers/redis-server.js'

const WORKER = new URL('../fixtures/redlock-worker.ts', import.meta.url)

let prefix: string
const stores: Store[] = []
/** Private servers of the current test and every client connected to them. */
const privates = new Map<number, { server: RedisServerHandle; clients: Redis[] }>()

beforeEach(() => {
  prefix = uniquePrefix().slice(0, -1)
})

afterEach(async () => {
  await Promise.all(stores.splice(0).map((store) => store.close()))
  // A client of a stopped server keeps its unanswered commands in the ioredis offline queue, and its
  // quit() waits behind them: bring the server back so they drain, quit, then stop it for good.
  const all = [...privates.values()]
  privates.clear()
  await Promise.all(
    all.map(async ({ server, clients }) => {
      if (!server.running) await server.restart()
      await Promise.all(clients.map((client) => client.quit().catch(() => client.disconnect())))
      await server.stop()
    }),
  )
})

/** A node: a client (for inspecting keys) and a store on its own connection. */
interface Node {
  client: Redis
  store: Store
}

function node(client: Redis): Node {
  const store = createRedisStore(client, { prefix })
  stores.push(store)
  return { client, store }
}

/** Fresh connections to the three independent servers of the global setup. */
function independents(): Node[] {
  return [0, 1, 2].map((i) => node(connectIndependent(i)))
}

/** A client that reconnects quickly, so a restarted server drains its offline queue at once. */
function connectNode(endpoint: { host: string; port: number }): Redis {
  const client = connectTo(endpoint, { retryStrategy: (times) => Math.min(times * 20, 200) })
  privates.get(endpoint.port)?.clients.push(client)
  return client
}

async function privateServers(count: number): Promise<{ servers: RedisServerHandle[]; nodes: Node[] }> {
  const started = await Promise.all(Array.from({ length: count }, () => startRedisServer()))
  for (const server of started) privates.set(server.port, { server, clients: [] })
  return { servers: started, nodes: started.map((server) => node(connectNode(server))) }
}

function redlock(nodes: Node[], name: string, options?: RedlockOptions): Redlock {
  return createRedlock(
    nodes.map((n) => n.store),
    name,
    options,
  )
}

/** Another connection to the same server (closed after the file). */
function reconnect(n: Node): Redis {
  return connectNode({ host: n.client.options.host as string, port: n.client.options.port as number })
}

/** Another client of the same lock, on connections of its own. Its first call connects and loads the
 * scripts, which the default 50 ms per node does not always cover on a busy machine (a timed-out node
 * turns "held by another owner" into a quorum error): 1000 ms per node unless the test says. */
function rival(nodes: Node[], name: string, options?: RedlockOptions): Redlock {
  return createRedlock(
    nodes.map((n) => node(reconnect(n)).store),
    name,
    { perNodeTimeoutMs: 1000, ...options },
  )
}

async function keyCounts(nodes: Node[]): Promise<number[]> {
  return Promise.all(nodes.map(async (n) => (await keysUnder(n.client, prefix)).length))
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise
  } catch (error) {
    return error
  }
  throw new Error('expected a rejection')
}

describe('redlock', () => {
  it('G1 G7: admits one holder at a time across this process and two children, with increasing fences', async () => {
    const name = 'contended'
    const checkerKey = `${prefix}:checker`
    const options: RedlockOptions = { ttlMs: 5000, retryDelayMs: 5, retryJitterMs: 20, perNodeTimeoutMs: 250 }
    const durationMs = 3000
    const workers = await Promise.all(
      [0, 1].map(async () => {
        const child: ChildHandle = spawnChild(WORKER)
        await child.waitFor('ready', 15_000)
        return child
      }),
    )
    const request = { type: 'contend', prefix, name, contenders: 4, connections: 2, durationMs, maxHoldMs: 3 }
    for (const worker of workers) worker.send({ ...request, checkerKey, options })
    const nodes = independents()
    const local = contend(
      [redlock(nodes, name, options), rival(nodes, name, options)],
      redisChecker(connectStandalone(), checkerKey),
      { contenders: 4, durationMs, maxHoldMs: 3 },
    )
    const results: ContendResult[] = [
      await local,
      ...((await Promise.all(
        workers.map((w) => w.waitFor('contended', 60_000)),
      )) as unknown as ContendResult[]),
    ]
    expect(results.map((r) => r.violations)).toEqual([0, 0, 0])
    expect(Math.max(...results.map((r) => r.maxInside))).toBe(1)
    // Every process got the lock, and the lock changed hands many times.
    for (const r of results) expect(r.acquisitions).toBeGreaterThan(0)
    const total = results.reduce((sum, r) => sum + r.acquisitions, 0)
    expect(total).toBeGreaterThan(30)
    // Fences in entry order strictly increase across processes (one host: the nodes share a clock).
    const fences = (await connectStandalone().lrange(`${checkerKey}:fences`, 0, -1)).map(Number)
    expect(fences).toHaveLength(total)
    for (let i = 1; i < fences.length; i++) expect(fences[i]).toBeGreaterThan(fences[i - 1] as number)
    // Every lease was released on every node (a late grant's release may still be in flight; a
    // leaked key would live for the 5 s TTL).
    await eventually(async () => (await keyCounts(nodes)).every((count) => count === 0), 2000)
  }, 30_000)

  it('G1 G3: holds the lock on every node, excludes a rival, and releases everywhere (idempotently)', async () => {
    const nodes = independents()
    const lock = redlock(nodes, 'basic', { ttlMs: 10_000 })
    expect(lock.nodes).toBe(3)
    expect(lock.quorum).toBe(2)
    const before = Date.now()
    const lease = await lock.acquire()
    // Validity estimate: no later than start + ttl − drift (100 + 2 ms).
    expect(lease.expiresAt).toBeLessThanOrEqual(Date.now() + 10_000 - 102)
    expect(lease.expiresAt).toBeGreaterThan(before + 10_000 - 102 - 200)
    expect(lease.key).toBe(keySpace(prefix, 'redlock', 'basic').base)
    // The holder on every node, a lone holder: one key, F, holding it with its fence (the attempt was
    // decided by a majority: the third node's grant may still be on its way).
    await eventually(async () => (await keyCounts(nodes)).every((count) => count === 1))
    const other = rival(nodes, 'basic', { ttlMs: 10_000 })
    expect(await other.tryAcquire()).toBeUndefined()
    await expect(other.acquire({ timeoutMs: 300 })).rejects.toBeInstanceOf(RedlockQuorumError)
    await lease.release()
    await lease.release()
    expect(await keyCounts(nodes)).toEqual([0, 0, 0])
    expect(lease.signal.aborted).toBe(false)
    const next = await other.withLease(async (l) => {
      expect(await lock.tryAcquire()).toBeUndefined()
      return l.fencingToken
    })
    expect(next).toBeGreaterThan(lease.fencingToken)
    expect(await keyCounts(nodes)).toEqual([0, 0, 0])
  })

  it('G3: stops retrying when the signal aborts, leaving only the holder on the nodes', async () => {
    const nodes = independents()
    const holder = await redlock(nodes, 'aborted').acquire()
    const waiter = rival(nodes, 'aborted', { retryDelayMs: 20, retryJitterMs: 10 })
    const started = Date.now()
    const error = await rejection(waiter.acquire({ signal: AbortSignal.timeout(150) }))
    expect((error as Error).name).toBe('TimeoutError')
    expect(Date.now() - started).toBeLessThan(150 + 200)
    expect(await keyCounts(nodes)).toEqual([2, 2, 2]) // the holder's keys only (H and F, since the rival asked)
    await holder.release()
    expect(await keyCounts(nodes)).toEqual([0, 0, 0])
  })

  it('G1: acquires and releases with one node of three down', async () => {
    const {
      servers: [down],
      nodes: [third],
    } = await privateServers(1)
    const [a, b] = independents()
    const nodes = [a, b, third] as Node[]
    const lock = redlock(nodes, 'one-down', { ttlMs: 10_000, perNodeTimeoutMs: 1000 })
    await (await lock.acquire()).release() // all three up: scripts loaded, connections ready
    await down!.stop()
    const started = Date.now()
    const lease = await lock.acquire({ timeoutMs: 0 })
    // Decided as soon as two nodes granted: the dead one is not waited for (1000 ms).
    expect(Date.now() - started).toBeLessThan(500)
    expect(await keyCounts([a!, b!])).toEqual([1, 1]) // a lone holder: F
    expect(await rival(nodes, 'one-down').tryAcquire()).toBeUndefined() // 2 refused, 1 failed
    await lease.release()
    expect(await keyCounts([a!, b!])).toEqual([0, 0])
    const again = await rival(nodes, 'one-down', { perNodeTimeoutMs: 100 }).acquire({ timeoutMs: 0 })
    await again.release()
  })

  it('G14: fails clearly in bounded time with two nodes of three down, leaving no key on the live node', async () => {
    const { servers: down, nodes: dead } = await privateServers(2)
    const [live] = independents()
    const nodes = [live!, ...dead]
    const lock = redlock(nodes, 'two-down', {
      ttlMs: 10_000,
      perNodeTimeoutMs: 100,
      retryCount: 2,
      retryDelayMs: 50,
      retryJitterMs: 50,
    })
    await (await lock.acquire()).release()
    await Promise.all(down.map((server) => server.stop()))

    let started = Date.now()
    const error = (await rejection(lock.acquire())) as RedlockQuorumError
    const tookMs = Date.now() - started
    expect(error).toBeInstanceOf(RedlockQuorumError)
    expect(error.code).toBe('ERR_TOLLGATE_QUORUM')
    expect(error).toMatchObject({ granted: 1, failed: 2, busy: 0, nodes: 3, quorum: 2, attempts: 3 })
    expect(error.validityExpired).toBe(false)
    expect(error.message).toContain('only 1 of 3 nodes granted it')
    expect(error.message).toContain('after 3 attempts')
    // 3 attempts x (100 ms timeout + release on the dead nodes, 100 ms) + 2 pauses of <= 100 ms.
    expect(tookMs).toBeLessThan(1500)
    expect(await keyCounts([live!])).toEqual([0])

    // The time bound alone also ends it; tryAcquire throws rather than reporting contention.
    const unbounded = redlock(nodes, 'two-down', { ttlMs: 10_000, perNodeTimeoutMs: 100, retryDelayMs: 20 })
    started = Date.now()
    const timedOut = (await rejection(unbounded.acquire({ timeoutMs: 400 }))) as RedlockQuorumError
    expect(timedOut).toBeInstanceOf(RedlockQuorumError)
    expect(Date.now() - started).toBeLessThan(400 + 2 * 100 + 400)
    expect(timedOut.attempts).toBeGreaterThan(1)
    await expect(unbounded.tryAcquire()).rejects.toBeInstanceOf(RedlockQuorumError)
    expect(await keyCounts([live!])).toEqual([0])
  })

  it('G1: refuses a majority that completes after the validity window, and cleans up every node', async () => {
    const { nodes: slow } = await privateServers(2)
    const [fast] = independents()
    const nodes = [fast!, ...slow]
    // Validity window: 2000 − (20 + 900) = 1080 ms; nodes may take up to 2000 ms to answer.
    const options = { ttlMs: 2000, clockDriftMs: 900, perNodeTimeoutMs: 2000, autoRenew: false }
    const lock = redlock(nodes, 'late', options)
    await (await lock.acquire()).release()
    await Promise.all(slow.map((n) => reconnect(n).call('CLIENT', 'PAUSE', '1500', 'ALL')))
    const started = Date.now()
    const error = (await rejection(lock.tryAcquire())) as RedlockQuorumError
    const tookMs = Date.now() - started
    expect(error).toBeInstanceOf(RedlockQuorumError)
    expect(error.validityExpired).toBe(true)
    expect(error.granted).toBeGreaterThanOrEqual(2)
    expect(error.message).toContain('validity')
    expect(tookMs).toBeGreaterThan(1080)
    // Released everywhere before tryAcquire returned: the fast node's key would live until ~2000 ms
    // and the slow nodes' until ~3500 ms otherwise.
    expect(await keyCounts(nodes)).toEqual([0, 0, 0])
    // Once the nodes answer in time again, the lock is free.
    const lease = await lock.acquire({ timeoutMs: 0 })
    await lease.release()
  })

  it('G3: releases a grant that arrives after its node timed out', async () => {
    const { nodes: slow } = await privateServers(2)
    const [fast] = independents()
    const nodes = [fast!, ...slow]
    const lock = redlock(nodes, 'timed-out', { ttlMs: 10_000, perNodeTimeoutMs: 100 })
    await (await lock.acquire()).release()
    await Promise.all(slow.map((n) => reconnect(n).call('CLIENT', 'PAUSE', '400', 'ALL')))
    const error = (await rejection(lock.tryAcquire())) as RedlockQuorumError
    expect(error).toMatchObject({ granted: 1, failed: 2, validityExpired: false })
    expect(await keyCounts([fast!])).toEqual([0])
    // After the pause the slow nodes run the acquire (a grant with a 10 s TTL) and then the release.
    await sleep(500)
    await eventually(async () => (await keyCounts(slow)).every((count) => count === 0), 1000)
  })

  it('G4: keeps the lock past 3 x TTL by renewal and aborts the signal once the majority is gone', async () => {
    const { servers: doomed, nodes: mortal } = await privateServers(2)
    const [survivor] = independents()
    const nodes = [survivor!, ...mortal]
    const unhandled: unknown[] = []
    const onUnhandled = (reason: unknown) => unhandled.push(reason)
    process.on('unhandledRejection', onUnhandled)
    try {
      const lost: LeaseLostError[] = []
      const lock = redlock(nodes, 'renewed', { ttlMs: 300, onLost: (error) => lost.push(error) })
      const lease = await lock.acquire()
      const firstExpiry = lease.expiresAt
      await sleep(1000)
      expect(lease.signal.aborted).toBe(false)
      expect(lease.expiresAt).toBeGreaterThan(firstExpiry + 500)
      expect(await rival(nodes, 'renewed').tryAcquire()).toBeUndefined()

      for (const server of doomed) server.kill('SIGKILL')
      await Promise.all(doomed.map((server) => server.exited()))
      const killedAt = Date.now()
      await eventually(() => lease.signal.aborted, 1000, 5)
      // Lost by the end of the validity the last majority granted (< 300 ms), not later.
      expect(Date.now() - killedAt).toBeLessThan(300 + 250)
      expect(lease.signal.reason).toBeInstanceOf(LeaseLostError)
      expect((lease.signal.reason as LeaseLostError).code).toBe('ERR_TOLLGATE_LEASE_LOST')
      expect(lost).toHaveLength(1)
      await expect(lease.renew()).rejects.toBeInstanceOf(LeaseLostError)
      await lease.release() // never throws, although two nodes are down and the lease is gone
      await sleep(50)
      expect(unhandled).toEqual([])
    } finally {
      process.off('unhandledRejection', onUnhandled)
    }
  })

  it('G4: loses the lease at once when a majority of nodes no longer holds it', async () => {
    const nodes = independents()
    const lock = redlock(nodes, 'wiped', { ttlMs: 10_000 })
    const lease = await lock.acquire()
    const space = keySpace(prefix, 'redlock', 'wiped')
    // The attempt was decided by a majority: the third node's grant may still be on its way. Once every
    // node holds it, two of them lose it, as after a restart without persistence.
    await eventually(async () => {
      const held = await Promise.all(nodes.map((n) => permitHolders(n.client, space)))
      return held.every((count) => count === 1)
    })
    await Promise.all(nodes.slice(1).map((n) => n.client.del(space.key('h'), space.key('m'), space.key('f'))))
    await expect(lease.renew()).rejects.toBeInstanceOf(LeaseLostError)
    expect(lease.signal.aborted).toBe(true)
    const next = await rival(nodes, 'wiped').acquire({ timeoutMs: 0 })
    await lease.release() // must not free the new owner's lock
    expect(await lock.tryAcquire()).toBeUndefined()
    await next.release()
  })
})

describe('redlock options', () => {
  it('rejects memory stores, fewer than three nodes and repeated stores, naming "stores"', () => {
    const [a, b, c] = independents().map((n) => n.store) as [Store, Store, Store]
    const memory = createMemoryStore()
    expect(() => createRedlock([a, b], 'x')).toThrow('"stores"')
    expect(() => createRedlock([a, b, memory], 'x')).toThrow(/"stores".*stores\[2\] is a memory store/)
    expect(() => createRedlock([a, b, a], 'x')).toThrow(/"stores".*stores\[2\] repeats stores\[0\]/)
    expect(() => createRedlock(a as never, 'x')).toThrow(ConfigError)
    expect(() => createRedlock([a, b, c], '')).toThrow('as the second argument')
    expect(createRedlock([a, b, c], 'ok').quorum).toBe(2)
  })

  it.each([
    [{ ttlMs: 0 }, 'ttlMs'],
    [{ ttlMs: 1.5 }, 'ttlMs'],
    [{ ttlMs: 50, clockDriftMs: 50 }, 'ttlMs'],
    [{ driftFactor: 1 }, 'driftFactor'],
    [{ driftFactor: -0.1 }, 'driftFactor'],
    [{ driftFactor: Number.NaN }, 'driftFactor'],
    [{ clockDriftMs: -1 }, 'clockDriftMs'],
    [{ retryCount: -1 }, 'retryCount'],
    [{ retryCount: 1.5 }, 'retryCount'],
    [{ retryDelayMs: -1 }, 'retryDelayMs'],
    [{ retryJitterMs: '5' }, 'retryJitterMs'],
    [{ perNodeTimeoutMs: 0 }, 'perNodeTimeoutMs'],
    [{ ttlMs: 1000, perNodeTimeoutMs: 1001 }, 'perNodeTimeoutMs'],
    [{ autoRenew: 'yes' }, 'autoRenew'],
    [{ acquireTimeoutMs: -1 }, 'acquireTimeoutMs'],
    [{ onLost: 5 }, 'onLost'],
  ])('rejects %o with a ConfigError naming %s', (options, option) => {
    const all = independents().map((n) => n.store)
    const make = () => createRedlock(all, 'x', options as never)
    expect(make).toThrow(ConfigError)
    expect(make).toThrow(`"${option}"`)
  })

  it('validates per-call acquire options', async () => {
    const lock = createRedlock(
      independents().map((n) => n.store),
      'x',
    )
    await expect(lock.acquire({ timeoutMs: -1 })).rejects.toThrow('"timeoutMs"')
  })
})
