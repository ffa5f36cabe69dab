// The Redis client as the store sees it: the part of ioredis's surface the store uses (connection.ts).
// An ioredis `Redis` or `Cluster` (5 or 6) has it as is; a node-redis client (v5) gets it from
// node-redis.ts. A client is recognised by its shape, never by its classes,
// so a process that uses only the memory store never loads a Redis client (nor needs one installed).
// The store loads ioredis itself only to connect a `redis://` URL.
import type { Redis } from 'ioredis'
import { ConfigError } from '../errors.js'
import type { Client, ClusterConnection } from './connection.js'
import { fromNodeRedis, isNodeRedis, isNodeRedisReply } from './node-redis.js'

export type { Client, ClusterConnection, Connection, Corkable, Subscriber } from './connection.js'

const METHODS = ['duplicate', 'call', 'evalsha', 'info', 'quit', 'on'] as const

/** `value` as a client: an ioredis `Redis` or `Cluster` as is, a node-redis client or cluster through
 * its adapter; undefined for anything else. */
export function asClient(value: unknown): Client | undefined {
  if (typeof value !== 'object' || value === null) return undefined
  if (isNodeRedis(value)) return fromNodeRedis(value)
  const candidate = value as Record<string, unknown>
  if (typeof candidate.isCluster !== 'boolean' || typeof candidate.status !== 'string') return undefined
  if (!METHODS.every((method) => typeof candidate[method] === 'function')) return undefined
  if (candidate.isCluster && typeof candidate.nodes !== 'function') return undefined
  return value as Client
}

export function isCluster(client: Client): client is ClusterConnection {
  return client.isCluster
}

/** The master ('host:port') that serves `slot`, as the client knows it now; undefined while unknown. */
export function slotMaster(client: ClusterConnection, slot: number): string | undefined {
  const adapted = client as { masterOf?: (slot: number) => string | undefined; slots?: string[][] }
  return adapted.masterOf ? adapted.masterOf(slot) : adapted.slots?.[slot]?.[0]
}

/** Whether `error` is an error reply of the server, not a connection's failure: ioredis's ReplyError,
 * of any copy of ioredis, or one that node-redis.ts marked. ioredis's name is its class's, which a
 * minifier renames, so it is also known by what ioredis attaches to every error reply: the command
 * it answered. */
export function isReplyError(error: unknown): error is Error {
  if (!(error instanceof Error)) return false
  if (error.name === 'ReplyError' || isNodeRedisReply(error)) return true
  const command = (error as { command?: { name?: unknown } }).command
  return typeof command === 'object' && command !== null && typeof command.name === 'string'
}

/** A new ioredis connection to `url`, ioredis loaded now (the store owns it). */
export async function connectUrl(url: string): Promise<Client> {
  let ioredis: { Redis?: typeof Redis; default?: unknown }
  try {
    ioredis = (await import('ioredis')) as typeof ioredis
  } catch (error) {
    if (!isMissing(error)) throw error
    throw new ConfigError('client', {
      message:
        'createRedisStore() connects a redis:// URL with ioredis, which is not installed: run "npm install ioredis", or pass a client you made (ioredis or node-redis)',
    })
  }
  const RedisClass = ioredis.Redis ?? (ioredis.default as { Redis?: typeof Redis } | undefined)?.Redis
  if (typeof RedisClass !== 'function') throw new Error('the installed ioredis exports no Redis class')
  return new RedisClass(url, { lazyConnect: false }) as unknown as Client
}

/** Whether the import failed because ioredis itself is not installed (not one of its own parts). */
function isMissing(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown }
  const notFound = code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND'
  return notFound && typeof message === 'string' && /['"]ioredis['"]/.test(message)
}
