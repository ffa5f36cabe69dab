// createRedisStore(): what it takes (an ioredis or node-redis client, or a URL), its options, and the
// store it makes (store.ts).
import { ConfigError } from '../errors.js'
import { defined, isPlainObjectOrUndefined, keyPrefix, positiveInt, rejectUnknown } from '../options.js'
import type { Store } from '../protocol/store.js'
import { asClient, connectUrl } from './client.js'
import { RedisStore } from './store.js'

export interface RedisStoreOptions {
  /** Prefix of every key and channel. Must not contain braces (they would move the hash tag).
   * @default 'tollgate' */
  prefix?: string
  /** A store call that takes longer fails with StoreUnavailableError, so no caller hangs because
   * Redis hangs. A permit granted by a call that timed out is given back when its reply arrives.
   * @default 2000 */
  commandTimeoutMs?: number
}

/**
 * What `createRedisStore()` takes as a client: an ioredis `Redis` or `Cluster` instance (ioredis 5 or
 * 6), or a node-redis (v5) client from `createClient()` or cluster from `createCluster()`, connected
 * (or connecting). Typed by fields every such instance has, so that this package's types need no Redis
 * client installed (a memory-store user may have none); the rest is checked when the store is made.
 */
export type RedisClient = IoredisClient | NodeRedisClient

/** An ioredis `Redis` or `Cluster`. */
export interface IoredisClient {
  readonly isCluster: boolean
  readonly status: string
}

/** A node-redis client or cluster. */
export interface NodeRedisClient {
  readonly isOpen: boolean
  readonly sendCommand: (...args: never[]) => unknown
}

const DEFAULTS = Object.freeze({ prefix: 'tollgate', commandTimeoutMs: 2000 })

/**
 * A store on Redis standalone or Redis Cluster. Pass the ioredis or node-redis client you already
 * have (it stays yours: `close()` does not quit it; a node-redis client must be connected, or
 * connecting, before the first call) or a `redis://` URL (then the store connects one with ioredis,
 * and owns and closes it).
 */
export function createRedisStore(client: RedisClient | string, options?: RedisStoreOptions): Store {
  isPlainObjectOrUndefined('options', options)
  rejectUnknown(options, ['prefix', 'commandTimeoutMs'], {
    timeout: 'it is `commandTimeoutMs`',
    commandTimeout: 'it is `commandTimeoutMs`',
  })
  const config = { ...DEFAULTS, ...defined(options) }
  const prefix = keyPrefix('prefix', config.prefix)
  const commandTimeoutMs = positiveInt('commandTimeoutMs', config.commandTimeoutMs, 600_000)
  if (typeof client === 'string') {
    if (!/^rediss?:\/\//.test(client))
      throw new ConfigError('client', 'an ioredis or node-redis client, or a redis:// URL', client)
    return new RedisStore(connectUrl(client), true, prefix, commandTimeoutMs)
  }
  const given = asClient(client)
  if (!given)
    throw new ConfigError(
      'client',
      'an ioredis Redis or Cluster, a node-redis client or cluster, or a redis:// URL',
      client,
    )
  return new RedisStore(given, false, prefix, commandTimeoutMs)
}
