// node-redis (v5) clients for test files, connected to the topology the global setup started (or to
// any endpoint, e.g. a fault proxy); every client made here is closed after the test file.
// TOLLGATE_TEST_CLIENT=node-redis makes the contract and fault-proxy helpers give their stores a
// node-redis client instead of an ioredis one (`npm run test:node-redis`, which CI runs too).
import { createClient, createCluster } from 'redis'
import { afterAll } from 'vitest'
import { within } from '../../src/core/timeout.js'
import type { RedisEndpoint } from './redis-server.js'
import { topology } from './redis.js'

/** Whether this run gives the stores node-redis clients (TOLLGATE_TEST_CLIENT=node-redis). */
export const NODE_REDIS = process.env.TOLLGATE_TEST_CLIENT === 'node-redis'

export type NodeRedisClient = ReturnType<typeof createClient>
export type NodeRedisCluster = ReturnType<typeof createCluster>

const clients = new Set<NodeRedisClient | NodeRedisCluster>()

afterAll(async () => {
  await Promise.all([...clients].map((client) => closeNodeRedis(client)))
})

/** A node-redis client or cluster of any type mapping. */
interface Closable {
  readonly isOpen: boolean
  close(): Promise<unknown>
  destroy(): void
}

/** Close a client made here: close() (it waits for pending commands, which a stopped server or proxy
 * never answers), destroy() after 1 s. */
export async function closeNodeRedis(client: Closable): Promise<void> {
  clients.delete(client as NodeRedisClient)
  if (!client.isOpen) return
  const destroy = () => {
    try {
      client.destroy()
    } catch {
      // closed meanwhile
    }
  }
  if (!(await within(client.close(), 1000)).ok) destroy()
}

/** A node-redis client of `endpoint`, connecting (commands wait for the connection); closed after
 * the file. `retryMs` is its reconnect delay. */
export function nodeRedisClient(
  endpoint: RedisEndpoint = topology().standalone,
  retryMs = 20,
  user: { username?: string; password?: string } = {},
): NodeRedisClient {
  const client = createClient({
    socket: { host: endpoint.host, port: endpoint.port, reconnectStrategy: () => retryMs },
    ...user,
  })
  client.on('error', () => {})
  clients.add(client)
  void client.connect().catch(() => {})
  return client
}

/** A node-redis cluster client of the test Cluster (or of `nodes`, each reached at `address(node)`),
 * connecting; closed after the file. */
export function nodeRedisCluster(
  nodes: readonly RedisEndpoint[] = topology().cluster,
  address: (node: RedisEndpoint) => RedisEndpoint = (node) => node,
  user: { username?: string; password?: string } = {},
): NodeRedisCluster {
  const nodeAddressMap = Object.fromEntries(nodes.map((node) => [`${node.host}:${node.port}`, address(node)]))
  const cluster = createCluster({
    rootNodes: nodes.map((node) => {
      const { host, port } = address(node)
      return { socket: { host, port } }
    }),
    nodeAddressMap,
    defaults: { socket: { reconnectStrategy: () => 20 }, ...user },
  })
  cluster.on('error', () => {})
  clients.add(cluster)
  void cluster.connect().catch(() => {})
  return cluster
}

/** A node-redis client of the test topology's standalone server, or a cluster client of its Cluster. */
export function nodeRedisOf(kind: 'standalone' | 'cluster'): NodeRedisClient | NodeRedisCluster {
  return kind === 'standalone' ? nodeRedisClient() : nodeRedisCluster()
}
