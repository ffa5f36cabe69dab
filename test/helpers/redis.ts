// Redis clients for test files, connected to the topology started by the global setup. Every client
// made here is closed after the test file (afterAll registered on import).
import { randomUUID } from 'node:crypto'
import { Cluster, type ClusterOptions, Redis, type RedisOptions } from 'ioredis'
import { afterAll, inject } from 'vitest'
import type { RedisEndpoint, RedisTopology } from './redis-server.js'

export type RedisClient = Redis | Cluster

const clients = new Set<RedisClient>()

afterAll(closeAllClients)

export function topology(): RedisTopology {
  return inject('redis')
}

// Connection errors (e.g. after a private server was stopped on purpose) are only logged by ioredis
// when nobody listens; commands still reject. Tests that care can add their own 'error' listener.
function track<T extends RedisClient>(client: T): T {
  client.on('error', () => {})
  clients.add(client)
  return client
}

/** A client for any endpoint, e.g. a private server from startRedisServer(); closed after the file. */
export function connectTo(endpoint: RedisEndpoint, options: RedisOptions = {}): Redis {
  return track(new Redis({ host: endpoint.host, port: endpoint.port, enableReadyCheck: true, ...options }))
}

export function connectStandalone(options: RedisOptions = {}): Redis {
  return connectTo(topology().standalone, options)
}

/** Client for the i-th (0..2) independent standalone server, as used by RedLock-style tests. */
export function connectIndependent(i: number, options: RedisOptions = {}): Redis {
  const endpoint = topology().independents[i]
  if (!endpoint) throw new Error(`no independent redis server #${i}`)
  return connectTo(endpoint, options)
}

export function connectCluster(options: ClusterOptions = {}): Cluster {
  return track(new Cluster(topology().cluster, { enableReadyCheck: true, lazyConnect: false, ...options }))
}

/** quit() every tracked client (disconnect() if that takes over 1 s or fails). */
export async function closeAllClients(): Promise<void> {
  const closing = [...clients].map(async (client) => {
    clients.delete(client)
    if (client.status === 'end') return
    const timer = setTimeout(() => client.disconnect(), 1_000)
    try {
      await client.quit()
    } catch {
      client.disconnect()
    } finally {
      clearTimeout(timer)
    }
  })
  await Promise.all(closing)
}

/** A fresh key prefix so tests sharing a server never see each other's keys. */
export function uniquePrefix(): string {
  return `t:${randomUUID()}:`
}

async function nodeCommandCount(node: Redis, name?: string): Promise<number> {
  const info = await node.info('commandstats')
  let total = 0
  for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    const command = match[1]!
    if (name === undefined ? command !== 'info' : command === name.toLowerCase()) total += Number(match[2])
  }
  return total
}

/** Script calls recorded in INFO commandstats: FCALL (the store's default), EVALSHA and EVAL (its
 * fallback when the server refuses functions). */
export async function scriptCallCount(client: RedisClient): Promise<number> {
  const counts = await Promise.all(['fcall', 'evalsha', 'eval'].map((name) => commandCount(client, name)))
  return counts.reduce((sum, count) => sum + count, 0)
}

/**
 * Calls recorded in INFO commandstats: of one command (e.g. 'evalsha', or 'client|setname' for
 * subcommands) or, without a name, of all commands except INFO itself (so probing does not skew the
 * count). On a Cluster, sums over all masters. The counts are server-wide, so tests that run in
 * parallel on the same server add to them: exact assertions need a private server.
 */
export async function commandCount(client: RedisClient, name?: string): Promise<number> {
  const nodes = client instanceof Cluster ? client.nodes('master') : [client]
  const counts = await Promise.all(nodes.map((node) => nodeCommandCount(node, name)))
  return counts.reduce((sum, count) => sum + count, 0)
}
