// Stores whose every connection (commands and pub/sub) goes through fault proxies, so a test can
// drop replies and make ioredis resend (G12). Closed by the test (close()).
import type { Cluster, Redis, RedisOptions } from 'ioredis'
import { createRedisStore, type Store } from '../../src/index.js'
import { type FaultProxy, proxiedClient } from './fault-proxy.js'
import { closeNodeRedis, NODE_REDIS, nodeRedisClient, nodeRedisCluster } from './node-redis.js'
import { connectCluster, connectStandalone, topology } from './redis.js'

export interface ProxiedStore {
  store: Store
  client: Redis | Cluster
  /** One proxy (standalone) or one per master (cluster). */
  proxies: FaultProxy[]
  /** Drop the reply to the next command containing `match`, on whichever proxy carries it. */
  dropReply(match: string): Promise<void>
  /** Delay replies on connections that sent `filter` (all when undefined), on every proxy. */
  delay(ms: number, filter?: string): void
  /** Every proxy at once: see FaultProxy. */
  partition(): void
  dropReplies(): void
  refuse(): void
  heal(): Promise<void>
  cutAll(): void
  /** Resolves once any proxy forwarded a request containing `match`. */
  waitForRequest(match: string): Promise<void>
  close(): Promise<void>
}

export async function proxiedStore(
  kind: 'standalone' | 'cluster',
  prefix: string,
  options: { commandTimeoutMs?: number; client?: RedisOptions } = {},
): Promise<ProxiedStore> {
  const targets = kind === 'standalone' ? [topology().standalone] : topology().cluster
  const { client: clientOptions, ...storeOptions } = options
  const proxiedIoredis = await proxiedClient(targets, kind === 'cluster', clientOptions)
  const { proxies } = proxiedIoredis
  let { client } = proxiedIoredis
  let store: Store
  let own: Parameters<typeof closeNodeRedis>[0] | undefined
  if (!NODE_REDIS) store = createRedisStore(client, { prefix, ...storeOptions })
  else {
    // The store's node-redis client goes through the proxies; `client`, to look at the servers,
    // goes straight to them (ioredis options shape only ioredis's resends: node-redis resends none).
    client.disconnect()
    client = kind === 'standalone' ? connectStandalone() : connectCluster()
    const [proxy] = proxies as [FaultProxy]
    const made =
      kind === 'standalone'
        ? nodeRedisClient(proxy)
        : nodeRedisCluster(targets, (node) => proxies[targets.indexOf(node)] as FaultProxy)
    own = made
    store = createRedisStore(made, { prefix, ...storeOptions })
  }
  return {
    store,
    client,
    proxies,
    dropReply: async (match) => {
      await Promise.race(proxies.map((proxy) => proxy.dropReply(match)))
      for (const proxy of proxies) proxy.disarm()
    },
    delay: (ms, filter) => {
      for (const proxy of proxies) proxy.delay(ms, filter)
    },
    partition: () => proxies.forEach((proxy) => proxy.partition()),
    dropReplies: () => proxies.forEach((proxy) => proxy.dropReplies()),
    refuse: () => proxies.forEach((proxy) => proxy.refuse()),
    heal: async () => {
      await Promise.all(proxies.map((proxy) => proxy.heal()))
    },
    cutAll: () => proxies.forEach((proxy) => proxy.cutAll()),
    waitForRequest: (match) => Promise.race(proxies.map((proxy) => proxy.waitForRequest(match))),
    async close() {
      await store.close()
      client.disconnect()
      if (own) await closeNodeRedis(own)
      await Promise.all(proxies.map((proxy) => proxy.stop()))
    },
  }
}
