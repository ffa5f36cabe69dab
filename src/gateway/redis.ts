// The gateway's store: in-memory, or Redis (standalone, Sentinel or Cluster; TLS and a password from a
// file as configured) with the client built from the
// config, and a start-up check that the Redis user may do everything the scripts do.
import type { ConnectionOptions } from 'node:tls'
import { Cluster, Redis } from 'ioredis'
import { defined } from '../core/options.js'
import type { Logger as PinoLogger } from 'pino'
import type { PlainHistogram } from './ops/metrics.js'
import { keySpace } from '../core/keys.js'
import { within } from '../core/timeout.js'
import { createMemoryStore } from '../core/memory/store.js'
import { scriptKeys } from '../core/redis/call-keys.js'
import { createRedisStore } from '../core/redis/create.js'
import type { Store } from '../core/protocol/store.js'
import type { GatewayConfig, RedisTlsConfig } from './config/index.js'

const REDIS_ERROR_LOG_WINDOW_MS = 10_000

export function openStore(
  config: GatewayConfig,
  logger: PinoLogger,
): { store: Store; redis: Redis | Cluster | undefined } {
  const storeConfig = config.store
  if (storeConfig.kind === 'memory')
    return { store: createMemoryStore({ prefix: config.prefix }), redis: undefined }
  // No ioredis auto-pipelining: the store already sends the acquires (and releases) of a turn as one
  // script call, and auto-pipelining's per-command bookkeeping then costs more than it saves
  // (docs/cost.md, "Why the code is as it is").
  const reconnectOnError = reconnectOnFailover(config.commandTimeoutMs)
  const common = { enableAutoPipelining: false, reconnectOnError }
  let redis: Redis | Cluster
  if (storeConfig.kind === 'redis') {
    const url = new URL(storeConfig.url)
    const secure = url.protocol === 'rediss:'
    // ioredis lets a password in the URL win over the option: drop it when one was configured.
    if (storeConfig.password !== undefined) url.password = ''
    redis = new Redis(url.href, {
      ...common,
      ...defined({ password: storeConfig.password, tls: tlsOptions(storeConfig.tls, secure) }),
    })
  } else if (storeConfig.kind === 'sentinel') {
    const tls = tlsOptions(storeConfig.tls, false)
    redis = new Redis({
      ...common,
      sentinels: storeConfig.sentinels.map(({ host, port }) => ({ host, port })),
      name: storeConfig.name,
      // Subscribe to +switch-master: move to the new master as soon as Sentinel names it, rather
      // than when the old one fails a command.
      failoverDetector: true,
      ...defined({ password: storeConfig.password, tls, sentinelTLS: tls }),
      enableTLSForSentinelMode: tls !== undefined,
    })
  } else {
    const [first] = storeConfig.urls.map((url) => new URL(url))
    redis = new Cluster(
      storeConfig.urls.map((url) => {
        const { hostname, port } = new URL(url)
        return { host: hostname, port: Number(port || 6379) }
      }),
      {
        enableAutoPipelining: false,
        redisOptions: {
          reconnectOnError,
          username: first?.username ? decodeURIComponent(first.username) : undefined,
          password:
            storeConfig.password ?? (first?.password ? decodeURIComponent(first.password) : undefined),
          tls: tlsOptions(storeConfig.tls, first?.protocol === 'rediss:'),
        },
      },
    )
  }
  // Outages are reported once by the admissions' store health (and /readyz); connection errors are
  // logged here at most once per window so a flapping network does not flood the log.
  let loggedAt = 0
  redis.on('error', (error: Error) => {
    const now = Date.now()
    if (now - loggedAt < REDIS_ERROR_LOG_WINDOW_MS) return
    loggedAt = now
    logger.warn({ err: error }, 'redis connection error')
  })
  return {
    store: createRedisStore(redis, { prefix: config.prefix, commandTimeoutMs: config.commandTimeoutMs }),
    redis,
  }
}

/**
 * A master that became a replica (a Sentinel failover) answers writes with READONLY, and one whose
 * replica was just promoted (min-replicas-to-write) with NOREPLICAS: reconnect, which asks Sentinel
 * for the master, and resend the command (every script is idempotent, G12). NOREPLICAS also means
 * "the replica is down, no failover coming": resent only for `windowMs` from the first one of an
 * episode, then it fails the call like any other error.
 */
function reconnectOnFailover(windowMs: number): (error: Error) => 2 | false {
  let since: number | undefined
  return (error) => {
    if (error.message.startsWith('READONLY')) return 2
    if (!error.message.startsWith('NOREPLICAS')) return false
    const now = Date.now()
    if (since === undefined || now - since > 10 * windowMs) since = now
    return now - since <= windowMs ? 2 : false
  }
}

/** ioredis/tls options: undefined for plain TCP; the PEM texts and server name for TLS. */
function tlsOptions(tls: RedisTlsConfig | undefined, secureUrl: boolean): ConnectionOptions | undefined {
  if (!tls && !secureUrl) return undefined
  return defined({ ca: tls?.ca, cert: tls?.cert, key: tls?.key, servername: tls?.servername })
}

/** The Redis ACL rule the gateway needs, for a key prefix (docs/gateway/operate.md, "Redis ACL"). */
export function aclRule(prefix: string): string {
  const commands = [
    'fcall',
    'function|load',
    'evalsha',
    'eval',
    'publish',
    'subscribe',
    'unsubscribe',
    'ping',
    'info',
    'time',
    'exists',
    'get',
    'getdel',
    'set',
    'del',
    'pexpireat',
    'zadd',
    'zcard',
    'zcount',
    'zrange',
    'zrangebyscore',
    'zrank',
    'zrem',
    'zscore',
    'zmscore',
    'hset',
    'hget',
    'hmget',
    'hdel',
    'hincrby',
  ]
  return `~${prefix}:* &${prefix}:* +@connection ${commands.map((c) => `+${c}`).join(' ')}`
}

/** Thrown when Redis cannot serve the gateway: the Redis user lacks a permission it needs, or the
 * server is older than the scripts need (the CLI exits 2). */
export class RedisAccessError extends Error {}

/**
 * Run what the gateway does on a throw-away name: the permit scripts (grant, queue, hand-off with its
 * PUBLISH, release), the read/write lock scripts, and a SUBSCRIBE and PUBLISH on the prefix's
 * channels. A permission error (NOPERM) throws RedisAccessError naming the rule to grant; an
 * Redis that does not answer resolves with the error (the gateway starts, knows the store down, and
 * answers by each limit's outage policy until it answers); undefined when the check passed.
 */
export async function checkRedisAccess(
  store: Store,
  redis: Redis | Cluster,
  prefix: string,
): Promise<unknown> {
  const permits = keySpace(prefix, 'probe', `access-${process.pid}`)
  const lock = keySpace(prefix, 'probe', `access-rw-${process.pid}`)
  const request = { ttlMs: 5000, permits: 1, enqueue: true, waiterTtlMs: 5000 }
  try {
    await store.permits.acquire(permits, { ...request, token: 'probe-a' })
    await store.permits.acquire(permits, { ...request, token: 'probe-b' })
    await store.permits.release(permits, 'probe-a', 1) // hands over to probe-b: PUBLISH inside the script
    await store.permits.release(permits, 'probe-b', 1)
    await store.rwlock.acquire(lock, { ...request, token: 'probe', op: 'probe', mode: 'write' })
    await store.rwlock.release(lock, 'probe', 'write', 'probe')
    await redis.publish(permits.channel, '')
    const subscriber = redis.duplicate()
    subscriber.on('error', () => {})
    try {
      await subscriber.subscribe(permits.channel)
      await subscriber.unsubscribe(permits.channel)
    } finally {
      subscriber.disconnect()
    }
  } catch (error) {
    const message =
      String((error as Error)?.message ?? error) + String(((error as Error)?.cause as Error)?.message ?? '')
    // NOPERM from a command; from inside a script: "The user executing the script can't ...".
    if (/NOPERM|NOAUTH|WRONGPASS|user executing the script can't/i.test(message)) {
      // A script refused part-way leaves what it wrote before the refused command (Redis does not roll
      // a script back): a refused hand-off left the probe's holder keys for their 5 s. Best effort.
      await within(
        Promise.allSettled([redis.del(...scriptKeys(permits, false)), redis.del(...scriptKeys(lock, true))]),
        1000,
      )
      throw new RedisAccessError(
        `the Redis user may not do what the gateway needs (${message.replace(/\s+/g, ' ').slice(0, 200)}). ` +
          `Grant it, e.g.: ACL SETUSER <user> on >password ${aclRule(prefix)}`,
      )
    }
    // The store checks the server's version before its first call (core/redis/store.ts).
    if (/ is too old: tollgate needs Redis /.test(message)) throw new RedisAccessError(message)
    return error
  }
  return undefined
}

/**
 * The store with every Redis call of its two families timed (tollgate_redis_call_duration_seconds):
 * from the call to its reply, batching with the calls of the same turn included, as the request
 * waiting on it sees it.
 */
export function timedStore(store: Store, histogram: PlainHistogram): Store {
  const family = <F extends object>(name: string, inner: F): F => {
    const out = {} as Record<string, unknown>
    for (const method of Object.keys(inner) as (keyof F & string)[]) {
      const fn = inner[method]
      if (typeof fn !== 'function') continue
      const bound = histogram.series(`${name}.${method}`)
      out[method] = (...args: unknown[]) => {
        const started = performance.now()
        const done = () => bound.observe((performance.now() - started) / 1000)
        const result = (fn as (...a: unknown[]) => Promise<unknown>).apply(inner, args)
        result.then(done, done)
        return result
      }
    }
    return out as F
  }
  const permits = family('permits', store.permits)
  const rwlock = family('rwlock', store.rwlock)
  const adaptive = store.adaptive && family('adaptive', store.adaptive)
  const timed: Store & { readonly closed?: boolean } = {
    kind: store.kind,
    prefix: store.prefix,
    get notificationsHealthy() {
      return store.notificationsHealthy
    },
    // Read by store health and wait groups: a closed store fails its waiters instead of probing.
    get closed() {
      return (store as { closed?: boolean }).closed
    },
    permits,
    rwlock,
    ...(adaptive ? { adaptive } : {}),
    subscribe: (space, onGrant, onShed) => store.subscribe(space, onGrant, onShed),
    close: () => store.close(),
  }
  return timed
}
