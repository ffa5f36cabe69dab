// Shared fixture of the Lua contract tests (test/lua/*.test.ts): a fresh name per test, typed calls of
// the registered scripts (KEYS, channel, then ARGV exactly as each lua/*.lua header states) and probes
// of the keys they leave behind. Real Redis only: the standalone server of the global setup. The
// calls go through ioredis, or node-redis under TOLLGATE_TEST_CLIENT=node-redis (fcall()): each
// script's replies are the same through either client.
import type { Redis } from 'ioredis'
import { expect } from 'vitest'
import { keySpace, type KeySpace } from '../../src/core/keys.js'
import { functionName, loadLibraries, type ScriptName } from '../../src/core/redis/scripts.js'
import { eventually, keysUnder } from '../helpers/contract.js'
import { NODE_REDIS, type NodeRedisClient, nodeRedisClient } from '../helpers/node-redis.js'
import { connectStandalone, uniquePrefix } from '../helpers/redis.js'

export type Arg = string | number

export const PERMIT_PARTS = ['h', 'q', 'w', 'm', 'p', 'f', 'a'] as const
export const RW_PARTS = ['r', 'x', 'q', 'w', 'm', 'a'] as const
export type PermitPart = (typeof PERMIT_PARTS)[number]
export type RwPart = (typeof RW_PARTS)[number]

let shared: Redis | undefined

let loaded: Promise<void> | undefined

/** One client per test file (closed by helpers/redis.ts after the file). */
export function client(): Redis {
  shared ??= connectStandalone()
  return shared
}

/** node-redis clients by the ioredis client they stand in for (the same server). */
const nodeRedis = new WeakMap<Redis, NodeRedisClient>()

/** FCALL `fn` with `keys` then `argv`, as the store calls it: through `redis` (ioredis), or under
 * TOLLGATE_TEST_CLIENT=node-redis through a node-redis client of the same server (its RESP2 replies,
 * as node-redis decodes them). */
export function fcall(redis: Redis, fn: string, keys: readonly string[], ...argv: Arg[]): Promise<unknown> {
  if (!NODE_REDIS) return redis.fcall(fn, keys.length, ...keys, ...argv)
  return scriptClientOf(redis).sendCommand(['FCALL', fn, String(keys.length), ...keys, ...argv.map(String)])
}

/** Once the client fcall() goes through is connected (node-redis's is made on the first call): a
 * test that reads the server's clock and then calls a script must not pay for a connection between. */
export async function connected(redis: Redis): Promise<void> {
  await redis.ping()
  if (NODE_REDIS) await scriptClientOf(redis).sendCommand(['PING'])
}

/** The node-redis client of the same server that stands in for `redis`, made once. */
function scriptClientOf(redis: Redis): NodeRedisClient {
  let other = nodeRedis.get(redis)
  if (!other) {
    const { host = '127.0.0.1', port = 6379 } = redis.options
    nodeRedis.set(redis, (other = nodeRedisClient({ host, port })))
  }
  return other
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** The Redis server clock in ms and µs (G9: the scripts never read any other clock). */
export async function serverClock(redis: Redis = client()): Promise<{ ms: number; us: number }> {
  const [s, us] = await redis.time()
  const micros = Number(s) * 1_000_000 + Number(us)
  return { ms: Math.floor(micros / 1000), us: micros }
}

/** What every name fixture offers: its keys, its channel and probes of their state. */
export class NameFixture<Part extends string> {
  readonly prefix: string
  readonly space: KeySpace
  readonly key: Record<Part, string>
  readonly keys: string[]
  readonly redis: Redis

  constructor(kind: 'sem' | 'rw', parts: readonly Part[], redis: Redis, name = 'n') {
    this.redis = redis
    this.prefix = uniquePrefix().slice(0, -1)
    this.space = keySpace(this.prefix, kind, name)
    this.key = Object.fromEntries(parts.map((part) => [part, this.space.key(part)])) as Record<Part, string>
    this.keys = parts.map((part) => this.key[part])
  }

  get channel(): string {
    return this.space.channel
  }

  /** Call a script on this name, as the store does (FCALL of its function, the libraries loaded
   * once): KEYS, the channel, then `argv`. */
  async run(script: ScriptName, ...argv: Arg[]): Promise<unknown> {
    await (loaded ??= loadLibraries(this.redis))
    return fcall(this.redis, functionName(script), this.keys, this.channel, ...argv)
  }

  /** The parts (h, q, ...) that exist as keys under this test's prefix, sorted. Fails on a key that
   * is not one of the name's parts. */
  async parts(): Promise<string[]> {
    const found = await keysUnder(this.redis, this.prefix)
    const byKey = new Map(Object.entries(this.key).map(([part, key]) => [key as string, part]))
    return found
      .map((key) => {
        const part = byKey.get(key)
        if (part === undefined) throw new Error(`unexpected key ${key}`)
        return part
      })
      .sort()
  }

  /** PTTL of a part (-2 missing, -1 no expiry). */
  pttl(part: Part): Promise<number> {
    return this.redis.pttl(this.key[part])
  }

  /** Absolute expiry (ms, server clock) of a part: PEXPIRETIME (-2 missing, -1 no expiry). */
  expireAt(part: Part): Promise<number> {
    return this.redis.pexpiretime(this.key[part])
  }

  /** Every key of the name carries an expiry (pttl > 0), except the parts in `persistent`. */
  async expectAllExpire(persistent: readonly Part[] = []): Promise<void> {
    for (const part of await this.parts()) {
      const ttl = await this.pttl(part as Part)
      if (persistent.includes(part as Part)) expect(ttl, `pttl of ${part}`).toBe(-1)
      else expect(ttl, `pttl of ${part}`).toBeGreaterThan(0)
    }
  }

  /** The part exists with an expiry no earlier than `deadline` (ms, server clock). */
  async expectExpiresNoEarlierThan(part: Part, deadline: number): Promise<void> {
    expect(await this.pttl(part), `pttl of ${part}`).toBeGreaterThan(0)
    expect(await this.expireAt(part), `pexpiretime of ${part}`).toBeGreaterThanOrEqual(deadline)
  }

  /** ZSET members with their scores as numbers. */
  async zset(part: Part): Promise<Record<string, number>> {
    const flat = await this.redis.zrange(this.key[part], 0, -1, 'WITHSCORES')
    const out: Record<string, number> = {}
    for (let i = 0; i < flat.length; i += 2) out[flat[i]!] = Number(flat[i + 1])
    return out
  }

  /** ZSET members in score order. */
  members(part: Part): Promise<string[]> {
    return this.redis.zrange(this.key[part], 0, -1)
  }

  hash(part: Part): Promise<Record<string, string>> {
    return this.redis.hgetall(this.key[part])
  }

  /** Every key of the name with its type-specific value and absolute expiry: compare two of these to
   * prove a call changed nothing. */
  async snapshot(): Promise<Record<string, { value: unknown; expireAt: number }>> {
    const out: Record<string, { value: unknown; expireAt: number }> = {}
    for (const part of await this.parts()) {
      const key = this.key[part as Part]
      const type = await this.redis.type(key)
      const value =
        type === 'zset'
          ? await this.redis.zrange(key, 0, -1, 'WITHSCORES')
          : type === 'hash'
            ? await this.redis.hgetall(key)
            : await this.redis.get(key)
      out[part] = { value, expireAt: await this.redis.pexpiretime(key) }
    }
    return out
  }

  /** Record what is published on the name's channel (a dedicated subscriber connection). */
  async listen(): Promise<Listener> {
    const sub = this.redis.duplicate()
    sub.on('error', () => {})
    const messages: string[] = []
    sub.on('message', (channel: string, message: string) => {
      if (channel === this.channel) messages.push(message)
    })
    await sub.subscribe(this.channel)
    return {
      messages,
      async next(count = 1, timeoutMs = 1000) {
        await eventually(() => messages.length >= count, timeoutMs, 2)
        return messages.slice(0, count)
      },
      async quiet(ms = 30) {
        await sleep(ms)
        return [...messages]
      },
      async close() {
        try {
          await sub.quit()
        } catch {
          sub.disconnect()
        }
      },
    }
  }
}

export interface Listener {
  /** Messages received so far, in order. */
  readonly messages: string[]
  /** The first `count` messages, once they have arrived. */
  next(count?: number, timeoutMs?: number): Promise<string[]>
  /** Wait a moment and return every message received (to prove nothing more was published). */
  quiet(ms?: number): Promise<string[]>
  close(): Promise<void>
}

/** A granted permit's row in permit-acquire's reply. */
export type Granted = [1, number, number, number]
/** A queued (or refused, position -1) row in permit-acquire's reply. */
export type Queued = [0, number, number]
export type AcquireRow = Granted | Queued

export interface PermitAcquireOptions {
  ttl?: number
  permits?: number
  /** 0 = try, 1 = queue */
  mode?: 0 | 1
  waiterTtl?: number
  /** acquisition id ('' = none) */
  op?: string
}

/** A fresh permit name (KEYS H Q W M P F) on the shared client. */
export class PermitName extends NameFixture<PermitPart> {
  constructor(redis: Redis = client(), name = 'n') {
    super('sem', PERMIT_PARTS, redis, name)
  }

  /** F as a lone holder ("<fence> <expiresAt> <token>", lib/permits.lua), or undefined when F is a
   * bare fence or missing. */
  async lone(): Promise<{ fence: number; expiresAt: number; token: string } | undefined> {
    const value = await this.redis.get(this.key.f)
    const [fence, expiresAt, token] = value?.split(' ') ?? []
    if (token === undefined) return undefined
    return { fence: Number(fence), expiresAt: Number(expiresAt), token }
  }

  /** Every holder and its lease expiry, wherever the name keeps it: H, or F for a lone holder. */
  async holders(): Promise<Record<string, number>> {
    const lone = await this.lone()
    return { ...(await this.zset('h')), ...(lone ? { [lone.token]: lone.expiresAt } : {}) }
  }

  /** permit-acquire: ARGV ttl, permits, mode, waiter ttl, acquisition id, tokens. */
  async acquire(tokens: string | string[], o: PermitAcquireOptions = {}): Promise<[number, ...AcquireRow[]]> {
    const list = typeof tokens === 'string' ? [tokens] : tokens
    return (await this.run(
      'tgPermitAcquire',
      o.ttl ?? 10_000,
      o.permits ?? 1,
      o.mode ?? 1,
      o.waiterTtl ?? 5_000,
      o.op ?? '',
      ...list,
    )) as [number, ...AcquireRow[]]
  }

  /** permit-release: ARGV permits, acquisition id, tokens -> [grants, ...codes]. */
  async release(tokens: string | string[], permits = 1, op = ''): Promise<[string, ...number[]]> {
    const list = typeof tokens === 'string' ? [tokens] : tokens
    return (await this.run('tgPermitRelease', permits, op, ...list)) as [string, ...number[]]
  }

  /** permit-renew: ARGV ttl, pairs (token, acquisition id) -> [now, ...expiresAt]. */
  async renew(ttl: number, ...pairs: [string, string][]): Promise<number[]> {
    return (await this.run('tgPermitRenew', ttl, ...pairs.flat())) as number[]
  }

  /** permit-recheck: ARGV permits, waiter ttl, pairs -> [now, nextExpiry, ...rows]. */
  async recheck(permits: number, waiterTtl: number, ...pairs: [string, string][]): Promise<unknown[]> {
    return (await this.run('tgPermitRecheck', permits, waiterTtl, ...pairs.flat())) as unknown[]
  }

  /** permit-inspect -> [holders, queued, override, now, adaptive limit]. */
  async inspect(): Promise<[number, number, number, number, number]> {
    return (await this.run('tgPermitInspect')) as [number, number, number, number, number]
  }

  /** permit-set-limit: ARGV permits (0 = drop the override), the caller's own permits -> [holders, now,
   * written]. */
  async setLimit(permits: number, own = 1): Promise<[number, number, number]> {
    return (await this.run('tgPermitSetLimit', permits, own)) as [number, number, number]
  }
}

export type RwMode = 'r' | 'w'

export interface RwAcquireOptions {
  ttl?: number
  /** 0 = try, 1 = queue */
  mode?: 0 | 1
  waiterTtl?: number
}

/** A fresh read/write lock name (KEYS R X Q W M A) on the shared client. */
export class RwName extends NameFixture<RwPart> {
  constructor(redis: Redis = client(), name = 'n') {
    super('rw', RW_PARTS, redis, name)
  }

  /** rwlock-acquire: ARGV token, mode, ttl, enqueue, waiter ttl, acquisition id -> [code, a, b, now]. */
  async acquire(
    token: string,
    mode: RwMode,
    op: string,
    o: RwAcquireOptions = {},
  ): Promise<[number, number, number, number]> {
    return (await this.run(
      'tgRwAcquire',
      token,
      mode,
      o.ttl ?? 10_000,
      o.mode ?? 1,
      o.waiterTtl ?? 5_000,
      op,
    )) as [number, number, number, number]
  }

  /** rwlock-release: ARGV token, mode, acquisition id -> code. */
  async release(token: string, mode: RwMode, op: string): Promise<number> {
    return (await this.run('tgRwRelease', token, mode, op)) as number
  }

  /** rwlock-renew: ARGV mode, ttl, pairs -> [now, ...expiresAt]. */
  async renew(mode: RwMode, ttl: number, ...pairs: [string, string][]): Promise<number[]> {
    return (await this.run('tgRwRenew', mode, ttl, ...pairs.flat())) as number[]
  }

  /** rwlock-recheck: ARGV waiter ttl, pairs -> [now, nextExpiry, ...rows]. */
  async recheck(waiterTtl: number, ...pairs: [string, string][]): Promise<unknown[]> {
    return (await this.run('tgRwRecheck', waiterTtl, ...pairs.flat())) as unknown[]
  }

  /** rwlock-inspect -> [readers, writers, queued, now]. */
  async inspect(): Promise<[number, number, number, number]> {
    return (await this.run('tgRwInspect')) as [number, number, number, number]
  }
}

/** Parse one published grant line "<tok> <fence> <expiresAt>[ <acquisition> ...]". */
export function grantLine(line: string): { token: string; fence: number; expiresAt: number; ops: string[] } {
  const [token, fence, expiresAt, ...ops] = line.split(' ')
  return { token: token!, fence: Number(fence), expiresAt: Number(expiresAt), ops }
}

/** Every key of a name sits in one hash tag (G8): the first {...} of each key is the same. */
export function hashTags(keys: readonly string[]): Set<string> {
  return new Set(keys.map((key) => /\{([^}]*)\}/.exec(key)?.[1] ?? key))
}
