// G10: wake-ups reach a waiter. Store.subscribe() resolves once a grant published from then on will
// arrive, and the store is healthy only while that holds for every channel it listens to; waiters
// that are not covered re-check with backoff instead. The subscriber connection goes through a fault
// proxy that holds its replies back, to open the window between its TCP connect and its ready check
// that ioredis 5 mishandles (redis/ioredis#2037): a SUBSCRIBE written there put the connection in
// subscriber mode, the ready check failed, and ioredis reconnected without the channel, while the
// store reported itself healthy. That lost wake-up made a waiter sleep until its heartbeat (3.3 s at
// the default waiterTtlMs): the dead-waiters test failed in about 1 run of 8 under load.
import type { Redis } from 'ioredis'
import { afterEach, describe, expect, it } from 'vitest'
import { keySpace } from '../../src/core/keys.js'
import type { Grant } from '../../src/core/protocol/store.js'
import { createRedisStore, createSemaphore, type Store } from '../../src/index.js'
import { eventually, sleep } from '../helpers/contract.js'
import { type FaultProxy, proxiedClient } from '../helpers/fault-proxy.js'
import { connectStandalone, topology, uniquePrefix } from '../helpers/redis.js'

let proxy: FaultProxy | undefined
const stores: Store[] = []
afterEach(async () => {
  await Promise.all(stores.splice(0).map((store) => store.close()))
  await proxy?.stop()
  proxy = undefined
})

/** A store whose connections (the subscriber's too) go through a fault proxy. */
async function proxiedStore(prefix: string): Promise<{ store: Store; client: Redis }> {
  const proxied = await proxiedClient([topology().standalone], false)
  proxy = proxied.proxies[0]
  const client = proxied.client as Redis
  const store = createRedisStore(client, { prefix })
  stores.push(store)
  // One call first: the store's version check (an INFO on this connection) is behind us.
  const sem = createSemaphore(store, 'warm', { permits: 1 })
  await (await sem.acquire()).release()
  return { store, client }
}

describe('wake-up subscriptions [standalone]', () => {
  it('G10: a channel subscribed while the subscriber connection is between connect and ready hears its grants', async () => {
    const prefix = uniquePrefix().slice(0, -1)
    const { store, client } = await proxiedStore(prefix)
    const heard = { x: [] as Grant[], y: [] as Grant[] }
    const x = keySpace(prefix, 'sem', 'x')
    const y = keySpace(prefix, 'sem', 'y')
    // Every reply held 300 ms: the subscriber connection stays between connect and ready that long.
    proxy?.delay(300)
    // The handshake ioredis sends once connected, before its ready check (an INFO).
    const handshake = proxy?.waitForRequest('LIB-NAME')
    const first = store.subscribe(x, (grant) => heard.x.push(grant)) // opens the subscriber connection
    await handshake // the new connection is connected, and not ready
    const second = store.subscribe(y, (grant) => heard.y.push(grant))
    proxy?.delay(0)
    await Promise.all([first, second])
    expect(store.notificationsHealthy).toBe(true)
    // Published by anyone from now on, a grant reaches its listener (another process's release).
    await client.publish(x.channel, 'tx 1 2')
    await client.publish(y.channel, 'ty 3 4')
    await eventually(() => heard.x.length === 1 && heard.y.length === 1, 2000)
    expect(heard.x[0]).toMatchObject({ token: 'tx', fence: 1 })
    expect(heard.y[0]).toMatchObject({ token: 'ty', fence: 3 })
  })

  it('G10: after the subscriber connection is cut, the store is unhealthy until every channel is subscribed again, then grants arrive', async () => {
    const prefix = uniquePrefix().slice(0, -1)
    const { store } = await proxiedStore(prefix)
    const heard: Grant[] = []
    const space = keySpace(prefix, 'sem', 'z')
    await store.subscribe(space, (grant) => heard.push(grant))
    expect(store.notificationsHealthy).toBe(true)
    proxy?.refuse() // Redis is gone: every connection cut, and none accepted
    await eventually(() => !store.notificationsHealthy, 2000)
    // While the network is down, no reconnect can subscribe again: the store says so.
    await sleep(200)
    expect(store.notificationsHealthy).toBe(false)
    await proxy?.heal()
    await eventually(() => store.notificationsHealthy, 5000)
    const other = connectStandalone()
    await other.publish(space.channel, 'tz 5 6')
    await eventually(() => heard.length === 1, 2000)
  })

  it('G10: a store over a client made with lazyConnect (its subscriber connection is lazy too) wakes waiters by pub/sub', async () => {
    const prefix = uniquePrefix().slice(0, -1)
    const lazy = connectStandalone({ lazyConnect: true })
    await lazy.connect()
    const store = createRedisStore(lazy, { prefix })
    const releaser = createRedisStore(connectStandalone(), { prefix })
    stores.push(store, releaser)
    const held = await createSemaphore(releaser, 'lazy', { permits: 1 }).acquire()
    const waiting = createSemaphore(store, 'lazy', { permits: 1 }).acquire({ timeoutMs: 10_000 })
    await eventually(() => store.notificationsHealthy, 5000)
    await sleep(100) // the waiter's re-checks back off from here: only a message can wake it at once
    const releasedAt = performance.now()
    await held.release()
    const lease = await waiting
    expect(performance.now() - releasedAt).toBeLessThan(500)
    await lease.release()
  })

  it('G10: waiters of a store whose subscriber connection was slow to get ready are woken by another process`s release at once', async () => {
    const prefix = uniquePrefix().slice(0, -1)
    const { store } = await proxiedStore(prefix)
    const releaser = createRedisStore(connectStandalone(), { prefix })
    stores.push(releaser)
    const names = ['a', 'b', 'c']
    const held = await Promise.all(names.map((n) => createSemaphore(releaser, n, { permits: 1 }).acquire()))
    proxy?.delay(150)
    // The first waiter's queued reply opens the subscriber connection; the others subscribe while it
    // gets ready.
    const waiting = names.map((n, i) =>
      sleep(i * 60).then(() => createSemaphore(store, n, { permits: 1 }).acquire({ timeoutMs: 10_000 })),
    )
    await sleep(1500)
    proxy?.delay(0)
    await eventually(() => store.notificationsHealthy, 5000)
    const releasedAt = performance.now()
    await Promise.all(held.map((lease) => lease.release()))
    const leases = await Promise.all(waiting)
    // By pub/sub (a heartbeat re-check would come 3.3 s after queueing, at the default waiterTtlMs).
    expect(performance.now() - releasedAt).toBeLessThan(1000)
    await Promise.all(leases.map((lease) => lease.release()))
  })
})
