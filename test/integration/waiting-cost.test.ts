// What waiting and bursts cost in Redis commands. G10: a blocked waiter costs ~0 commands per second.
// A burst of acquires (or releases) of one name in one event-loop turn is two script calls (the
// first goes straight, the rest gather in one batch while it is in flight). Counted with INFO
// commandstats on private servers (the shared ones see other test files' traffic), so the counts
// are exact.
import { Cluster, Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { keySpace } from '../../src/core/keys.js'
import { createMutex, createRedisStore, createSemaphore, type Lease, type Store } from '../../src/index.js'
import { eventually, sleep } from '../helpers/contract.js'
import { commandCount, scriptCallCount } from '../helpers/redis.js'
import {
  type RedisClusterHandle,
  type RedisServerHandle,
  startCluster,
  startRedisServer,
} from '../helpers/redis-server.js'

const WAITERS = 20
const WAIT_MS = 2000

let server: RedisServerHandle
let cluster: RedisClusterHandle
const clients: (Redis | Cluster)[] = []

beforeAll(async () => {
  ;[server, cluster] = await Promise.all([startRedisServer(), startCluster(3)])
})
afterAll(async () => {
  for (const c of clients) c.disconnect()
  await Promise.all([server?.stop(), cluster?.stop()])
})

/** Until `counter` sees 250 ms without a command (at most 5 s). */
async function quiet(counter: Redis | Cluster): Promise<void> {
  let last = await commandCount(counter)
  for (const until = Date.now() + 5000; Date.now() < until;) {
    await sleep(250)
    const now = await commandCount(counter)
    if (now === last) return
    last = now
  }
}

const PRIMITIVES = {
  mutex: (store: Store, name: string) => createMutex(store, name),
  semaphore: (store: Store, name: string) => createSemaphore(store, name, { permits: 1 }),
}

describe.each([
  ['standalone', 'mutex'],
  ['cluster', 'mutex'],
  ['standalone', 'semaphore'],
  ['cluster', 'semaphore'],
] as const)('waiting cost [%s, %s]', (kind, primitive) => {
  it(`G10: ${WAITERS} waiters blocked for ${WAIT_MS} ms add fewer than ${WAITERS} commands`, async () => {
    const lock = PRIMITIVES[primitive]
    const name = `${kind}-${primitive}`
    const connect = () => {
      const client = kind === 'standalone' ? new Redis(server.port, server.host) : new Cluster(cluster.nodes)
      clients.push(client)
      return client
    }
    const counter = connect() // INFO only; commandCount excludes INFO itself
    const store = createRedisStore(connect(), { prefix: 'cost' })
    const holderStore = createRedisStore(connect(), { prefix: 'cost' })
    const holder: Lease = await lock(holderStore, name).acquire()
    const waits = Array.from({ length: WAITERS }, () =>
      lock(store, name)
        .acquire({ timeoutMs: 30_000 })
        .then((lease) => lease.release()),
    )
    const space = keySpace('cost', primitive === 'mutex' ? 'mutex' : 'sem', name)
    await eventually(async () => (await store.permits.inspect(space)).queued === WAITERS)
    // The waiters' channel confirmed by Redis (a subscription of it resolves then): until then they
    // re-check by backoff (G10's fallback), which a loaded machine can stretch past any fixed pause.
    await store.subscribe(space, () => {})
    // Settled: each waiter's subscription confirmed and its race-closing re-check done, seen as
    // 250 ms without a command (a waiter still re-checking by backoff is counted below).
    await quiet(counter)
    const before = await commandCount(counter)
    await sleep(WAIT_MS)
    const during = (await commandCount(counter)) - before
    expect(during).toBeLessThan(WAITERS)
    await holder.release()
    await Promise.all(waits)
    await Promise.all([store.close(), holderStore.close()])
  })
})

describe.each(['standalone', 'cluster'] as const)('bursts [%s]', (kind) => {
  it('G10: 100 tryAcquires of one name in one turn are two script calls, and so are their 100 releases', async () => {
    const client = kind === 'standalone' ? new Redis(server.port, server.host) : new Cluster(cluster.nodes)
    const counter = kind === 'standalone' ? new Redis(server.port, server.host) : new Cluster(cluster.nodes)
    clients.push(client, counter)
    const store = createRedisStore(client, { prefix: 'burst' })
    const sem = createSemaphore(store, kind, { permits: 60 })
    await (await sem.acquire()).release() // scripts loaded, connection ready
    const scripts = () => scriptCallCount(counter)

    let before = await scripts()
    const leases = await Promise.all(Array.from({ length: 100 }, () => sem.tryAcquire()))
    expect(leases.filter((lease) => lease !== undefined)).toHaveLength(60)
    expect((await scripts()) - before).toBe(2)

    before = await scripts()
    await Promise.all(leases.map((lease) => lease?.release()))
    expect((await scripts()) - before).toBe(2)
    expect((await sem.stats()).holders).toBe(0)
    await store.close()
  })
})
