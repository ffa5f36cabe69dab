// The ioredis client as the store sees it: recognised by its shape, never by its classes, so a
// process that uses only the memory store never loads ioredis (nor needs it installed), and ioredis 5
// and 6 are both taken. The store loads ioredis itself only to connect a `redis://` URL.
import type { Cluster, Redis } from 'ioredis'
import { ConfigError } from '../errors.js'

/** An ioredis `Redis` or `Cluster` (5 or 6), as the store uses it. */
export type Client = Redis | Cluster

const METHODS = ['duplicate', 'call', 'evalsha', 'info', 'quit', 'on'] as const

/** `value` as a client, when it is shaped as an ioredis `Redis` or `Cluster`; else undefined. */
export function asClient(value: unknown): Client | undefined {
  if (typeof value !== 'object' || value === null) return undefined
  const candidate = value as Record<string, unknown>
  if (typeof candidate.isCluster !== 'boolean' || typeof candidate.status !== 'string') return undefined
  if (!METHODS.every((method) => typeof candidate[method] === 'function')) return undefined
  if (candidate.isCluster && typeof candidate.nodes !== 'function') return undefined
  return value as Client
}

export function isCluster(client: Client): client is Cluster {
  return client.isCluster
}

/** Whether `error` is an error reply of the server, not a connection's failure: ioredis's ReplyError,
 * of any copy of ioredis. Its name is its class's, which a minifier renames, so it is also known by
 * what ioredis attaches to every error reply: the command it answered. */
export function isReplyError(error: unknown): error is Error {
  if (!(error instanceof Error)) return false
  if (error.name === 'ReplyError') return true
  const command = (error as { command?: { name?: unknown } }).command
  return typeof command === 'object' && command !== null && typeof command.name === 'string'
}

/** A new ioredis connection to `url`, ioredis loaded now (the store owns it). */
export async function connectUrl(url: string): Promise<Redis> {
  let ioredis: { Redis?: typeof Redis; default?: unknown }
  try {
    ioredis = (await import('ioredis')) as typeof ioredis
  } catch (error) {
    if (!isMissing(error)) throw error
    throw new ConfigError('client', {
      message:
        'createRedisStore() connects a redis:// URL with ioredis, which is not installed: run "npm install ioredis", or pass a client you made',
    })
  }
  const RedisClass = ioredis.Redis ?? (ioredis.default as { Redis?: typeof Redis } | undefined)?.Redis
  if (typeof RedisClass !== 'function') throw new Error('the installed ioredis exports no Redis class')
  return new RedisClass(url, { lazyConnect: false })
}

/** Whether the import failed because ioredis itself is not installed (not one of its own parts). */
function isMissing(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown }
  const notFound = code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND'
  return notFound && typeof message === 'string' && /['"]ioredis['"]/.test(message)
}
