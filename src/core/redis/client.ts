// The ioredis client as the store sees it. ioredis is an optional peer: it is recognised by its shape,
// never by its classes, so a process that uses only the memory store never loads it (nor needs it
// installed), and ioredis 5 and 6 are both taken. The store loads ioredis itself only for a
// `redis://` URL, when it is asked to connect one.
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

/** Whether `error` is an error reply of the server (ioredis's ReplyError, of any copy of ioredis). */
export function isReplyError(error: unknown): error is Error {
  return error instanceof Error && error.name === 'ReplyError'
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

function isMissing(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code
  return code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND'
}
