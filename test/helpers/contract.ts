// The contract suite runner: one describe block per store kind (standalone Redis, Redis Cluster,
// memory), each test with its own key prefix, so every primitive is proven on all three (G11).
import { Cluster, type Redis } from 'ioredis'
import { afterEach, beforeEach, describe } from 'vitest'
import type { KeySpace } from '../../src/core/keys.js'
import { createMemoryStore, createRedisStore, type Store } from '../../src/index.js'
import { NODE_REDIS, nodeRedisOf } from './node-redis.js'
import { connectCluster, connectStandalone, uniquePrefix } from './redis.js'

export type StoreKind = 'standalone' | 'cluster' | 'memory'
export const STORE_KINDS: readonly StoreKind[] = ['standalone', 'cluster', 'memory']
export const REDIS_KINDS: readonly StoreKind[] = ['standalone', 'cluster']

export interface StoreFixture {
  kind: StoreKind
  /** Key prefix of this test (no trailing colon). */
  prefix: string
  /** The store of this test. */
  store: Store
  /** The Redis client behind `store` (undefined for memory). */
  client: Redis | Cluster | undefined
  /** Another store on a separate connection with the same prefix (the same store for memory, which
   * has no connections), to spread contenders over connections. */
  another(): Store
}

/** A store (with its own connection) for a kind and prefix; closed by the caller. `client` is an
 * ioredis client of the same server, to look at it: the store's own under TOLLGATE_TEST_CLIENT unset,
 * else the store has a node-redis client of its own. */
export function storeFor(
  kind: StoreKind,
  prefix: string,
): { store: Store; client: Redis | Cluster | undefined } {
  if (kind === 'memory') return { store: createMemoryStore({ prefix }), client: undefined }
  const client = kind === 'standalone' ? connectStandalone() : connectCluster()
  if (!NODE_REDIS) return { store: createRedisStore(client, { prefix }), client }
  const own = nodeRedisOf(kind)
  return { store: createRedisStore(own, { prefix }), client }
}

/**
 * describe(title) once per store kind; `run` gets a getter for the current test's fixture.
 * Stores made by the fixture are closed after each test.
 */
export function describeStores(
  title: string,
  run: (fixture: () => StoreFixture, kind: StoreKind) => void,
  kinds: readonly StoreKind[] = STORE_KINDS,
): void {
  for (const kind of kinds) {
    describe(`${title} [${kind}]`, () => {
      let current: StoreFixture | undefined
      const stores: Store[] = []
      beforeEach(() => {
        const prefix = uniquePrefix().slice(0, -1)
        const { store, client } = storeFor(kind, prefix)
        stores.push(store)
        current = {
          kind,
          prefix,
          store,
          client,
          another: () => {
            if (kind === 'memory') return store
            const extra = storeFor(kind, prefix).store
            stores.push(extra)
            return extra
          },
        }
      })
      afterEach(async () => {
        await Promise.all(stores.splice(0).map((s) => s.close()))
        current = undefined
      })
      run(() => {
        if (!current) throw new Error('fixture used outside a test')
        return current
      }, kind)
    })
  }
}

/** Keys under a prefix (Redis: SCAN over every master; memory: not applicable). */
export async function keysUnder(client: Redis | Cluster, prefix: string): Promise<string[]> {
  const nodes = client instanceof Cluster ? client.nodes('master') : [client]
  const found: string[] = []
  for (const node of nodes) {
    let cursor = '0'
    do {
      const [next, keys] = await node.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000)
      cursor = next
      found.push(...keys)
    } while (cursor !== '0')
  }
  return found
}

/** Live holders of a permit set in Redis, wherever it keeps them (lua/lib/permits.lua): members of H,
 * and a lone holder kept in F ("<fence> <expiresAt> <token>"). */
export async function permitHolders(client: Redis | Cluster, space: KeySpace): Promise<number> {
  const [seconds, micros] = await client.time()
  const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)
  const inH = await client.zcount(space.key('h'), `(${now}`, '+inf')
  const [, expiresAt, token] = (await client.get(space.key('f')))?.split(' ') ?? []
  return inH + (token !== undefined && Number(expiresAt) > now ? 1 : 0)
}

/** Take every holder of a permit set away behind its holders' backs (a failover that lost them): H,
 * and F with a lone holder in it. */
export async function dropPermitHolders(client: Redis | Cluster, space: KeySpace): Promise<void> {
  await client.del(space.key('h'), space.key('f'))
}

/** Keys a fixture's store holds under its prefix (memory: names with state). */
export async function storedKeys(fx: StoreFixture): Promise<number> {
  if (fx.client) return (await keysUnder(fx.client, fx.prefix)).length
  return (fx.store as unknown as { size: number }).size
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** Poll a condition with a deadline (for observing state, never to make a test pass by waiting). */
export async function eventually(
  check: () => Promise<boolean> | boolean,
  timeoutMs = 5000,
  everyMs = 10,
): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`)
    await sleep(everyMs)
  }
}
