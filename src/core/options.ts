// Every validator of options, in one place: bad values throw a ConfigError at construction that names
// the option (p-limit, express-rate-limit's parseOptions), never a silent fallback.
import { type AbortSignalLike, isAbortSignalLike } from './abort.js'
import type { Lease } from './client/lease.js'
import { ConfigError, type LeaseLostError } from './errors.js'
import { type KeySpace, keySpace } from './keys.js'
import type { Store } from './protocol/store.js'

/** Drop `undefined` values so that spreading over frozen defaults keeps the default (express-rate-limit). */
export function defined<T extends object>(options: T | undefined): Partial<T> {
  const out: Partial<T> = {}
  if (!options) return out
  for (const [k, v] of Object.entries(options)) if (v !== undefined) (out as Record<string, unknown>)[k] = v
  return out
}

export function positiveInt(option: string, value: unknown, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > max) {
    throw new ConfigError(option, `an integer from 1 to ${max}`, value)
  }
  return value
}

export function optionalPositiveInt(option: string, value: unknown): number | undefined {
  return value === undefined ? undefined : positiveInt(option, value)
}

export function nonEmptyString(option: string, value: unknown, max = 65_536): string {
  if (typeof value !== 'string' || value.length === 0 || value.length > max) {
    throw new ConfigError(option, `a non-empty string of at most ${max} characters`, value)
  }
  return value
}

/** A key prefix ends up in front of the hash tag, so braces in it would move the tag. */
export function keyPrefix(option: string, value: unknown): string {
  const prefix = nonEmptyString(option, value, 256)
  if (/[{}\s]/u.test(prefix)) throw new ConfigError(option, 'a prefix without braces or whitespace', value)
  return prefix
}

export function optionalFunction<F>(option: string, value: unknown): F | undefined {
  if (value === undefined) return undefined
  if (typeof value !== 'function') throw new ConfigError(option, 'a function', value)
  return value as F
}

/**
 * Refuse an option nobody knows (ConfigError naming it) with the most useful advice: a hint for names
 * users bring from elsewhere (`hints`, then the lock options' own), else the known name it is a typo
 * of, else the list of known names. Unknown options are errors everywhere: a typo never leaves a
 * default silently in force.
 */
export function rejectUnknown(
  options: object | undefined,
  known: readonly string[],
  hints: Readonly<Record<string, string>> = {},
): void {
  if (options === undefined) return
  for (const key of Object.keys(options)) {
    if (known.includes(key)) continue
    const synonym = Object.hasOwn(SYNONYMS, key) ? SYNONYMS[key] : undefined
    const hint = Object.hasOwn(hints, key)
      ? hints[key]
      : synonym !== undefined && known.includes(synonym)
        ? `did you mean "${synonym}"?`
        : Object.hasOwn(LOCK_HINTS, key)
          ? LOCK_HINTS[key]
          : undefined
    const typo = hint === undefined ? closestName(key, known) : undefined
    const advice =
      hint ?? (typo === undefined ? `the options are ${known.join(', ')}` : `did you mean "${typo}"?`)
    throw new ConfigError(
      key,
      { message: `Unknown option "${key}": ${advice}` },
      (options as Record<string, unknown>)[key],
    )
  }
}

/**
 * The name in `known` that `name` is likely a typo of: the same but for case, or one edit away (two
 * from six characters on), a swap of neighbours counting as one edit. Only error paths call it.
 */
export function closestName(name: string, known: readonly string[]): string | undefined {
  if (name.length > 64) return undefined
  const typed = name.toLowerCase()
  let best: string | undefined
  let bestDistance = typed.length < 6 ? 1 : 2
  for (const candidate of known) {
    const distance = editDistance(typed, candidate.toLowerCase(), bestDistance)
    if (distance < bestDistance || (distance === bestDistance && best === undefined)) {
      best = candidate
      bestDistance = distance
    }
  }
  return best
}

/** Optimal string alignment distance of a and b (insertions, deletions, substitutions and swaps of
 * neighbours), or `limit + 1` when it is above `limit`. */
function editDistance(a: string, b: string, limit: number): number {
  if (Math.abs(a.length - b.length) > limit) return limit + 1
  let before: number[] = []
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    const current = [i]
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1
      let d = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + cost)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        d = Math.min(d, before[j - 2]! + 1)
      current.push(d)
    }
    before = previous
    previous = current
  }
  return Math.min(previous[b.length]!, limit + 1)
}

/** Other libraries' names for one of ours (p-limit's `concurrency`, Bottleneck's `maxConcurrent`...):
 * "did you mean" ours where it is an option of the call. */
const SYNONYMS: Readonly<Record<string, string>> = {
  limit: 'permits',
  max: 'permits',
  concurrency: 'permits',
  maxConcurrent: 'permits',
  size: 'permits',
}

/** Names of other libraries' options (Redisson, redis-semaphore, redlock) and our own misspellings. */
const LOCK_HINTS: Readonly<Record<string, string>> = {
  ttl: 'the lease length is `ttlMs`',
  leaseTime: 'the lease length is `ttlMs`',
  lockTimeout: 'the lease length is `ttlMs`',
  expire: 'the lease length is `ttlMs`',
  timeout: 'the default wait is `acquireTimeoutMs`; one call’s is acquire({ timeoutMs })',
  timeoutMs: 'the default wait is `acquireTimeoutMs`; one call’s is acquire({ timeoutMs })',
  acquireTimeout: 'the default wait is `acquireTimeoutMs`',
  waitTime: 'the default wait is `acquireTimeoutMs`',
  waiterTtl: 'it is `waiterTtlMs`',
  retryInterval: 'waiters are woken by notification, never by polling: there is no interval',
  refreshInterval: 'leases are renewed at a third of `ttlMs` while `autoRenew` is on',
  onLockLost: 'it is `onLost`',
  owner: 'only createReentrantMutex() and createReadWriteLock() take an `owner`',
  permits: 'only createSemaphore() takes `permits`',
  limit: 'a semaphore’s cap is `permits` (createSemaphore())',
  max: 'a semaphore’s cap is `permits` (createSemaphore())',
  concurrency: 'a semaphore’s cap is `permits` (createSemaphore())',
  size: 'a semaphore’s cap is `permits` (createSemaphore())',
  maxConcurrent: 'a semaphore’s cap is `permits` (createSemaphore())',
  prefix: 'the key prefix is the store’s: createRedisStore(client, { prefix })',
  keyPrefix: 'the key prefix is `prefix`',
  signal: 'pass a `signal` to acquire() or withLease()',
}

export function isPlainObjectOrUndefined(option: string, value: unknown): void {
  if (value !== undefined && (typeof value !== 'object' || value === null || Array.isArray(value))) {
    throw new ConfigError(option, 'an options object', value)
  }
}

/** Options shared by every lock-like primitive. */
export interface LockOptions {
  /** Lease length; auto-renewal keeps a held lease alive at about a third of it.
   * @default 30000 */
  ttlMs?: number
  /** Renew held leases automatically until release (Redisson's watchdog). @default true */
  autoRenew?: boolean
  /** Default wait of `acquire()`; Infinity waits until a permit frees or the signal aborts.
   * @default 10000 */
  acquireTimeoutMs?: number
  /** A waiter that stops heart-beating (its process died) leaves the queue this long after its last
   * beat; live waiters beat at a third of it, batched per name and process. @default 10000 */
  waiterTtlMs?: number
  /** Called when a held lease is lost (after its signal aborted). Must not throw. */
  onLost?: (error: LeaseLostError, lease: Lease) => void
}

export const LOCK_DEFAULTS = Object.freeze({
  ttlMs: 30_000,
  autoRenew: true,
  acquireTimeoutMs: 10_000,
  waiterTtlMs: 10_000,
})

const MAX_TTL_MS = 24 * 3600 * 1000

/** Every key of LockOptions. */
const LOCK_OPTION_KEYS = [
  'ttlMs',
  'autoRenew',
  'acquireTimeoutMs',
  'waiterTtlMs',
  'onLost',
] as const satisfies readonly (keyof LockOptions)[]

/** What a lock client is built from: the validated lock options, the store and the name's keys. */
export interface LockSettings {
  store: Store
  space: KeySpace
  kind: string
  ttlMs: number
  autoRenew: boolean
  waiterTtlMs: number
  acquireTimeoutMs: number
  onLost?: ((error: LeaseLostError, lease: Lease) => void) | undefined
}

/** How users call each lock-like primitive's factory (named in messages about its arguments). */
const LOCK_CALLS: Readonly<Record<string, string>> = {
  sem: 'createSemaphore(store, name, options)',
  mutex: 'createMutex(store, name, options)',
  rmutex: 'createReentrantMutex(store, name, options)',
  rw: 'createReadWriteLock(store, name, options)',
}

/**
 * Check a lock-like factory's arguments in the order they come (store, name, options object, unknown
 * options), so a forgotten argument is named as such rather than blamed on an option. `own`: the
 * primitive's options besides LockOptions; `example`: given when the options are required.
 */
export function checkLockArguments(
  kind: string,
  store: unknown,
  name: unknown,
  options: unknown,
  own: readonly string[] = [],
  example?: string,
): void {
  const call = LOCK_CALLS[kind] ?? `${kind}(store, name, options)`
  storeArgument(call, store)
  nameArgument(call, name)
  optionsArgument(call, options, example)
  rejectUnknown(options as object | undefined, [...own, ...LOCK_OPTION_KEYS])
}

/** The first argument of `call` (e.g. 'createSemaphore(store, name, options)'): a store. */
export function storeArgument(call: string, value: unknown): Store {
  if (isStore(value)) return value
  const client = typeof (value as { defineCommand?: unknown } | null)?.defineCommand === 'function'
  const advice = client ? '; an ioredis client goes in createRedisStore(client) first' : ''
  throw new ConfigError(
    'store',
    {
      message: `${call}: expected a store from createRedisStore() or createMemoryStore() as the first argument${advice}`,
    },
    value,
  )
}

/** The second argument of `call`: a name, 1 to 65,536 characters. */
export function nameArgument(call: string, value: unknown): string {
  if (typeof value === 'string' && value.length > 0 && value.length <= 65_536) return value
  const expected =
    typeof value === 'string'
      ? 'a name of 1 to 65536 characters as the second argument'
      : typeof value === 'object' && value !== null
        ? 'a name string as the second argument, before the options'
        : 'a name string as the second argument'
  throw new ConfigError('name', { message: `${call}: expected ${expected}` }, value)
}

/** The third argument of `call`: an options object, or nothing unless `example` (of what to pass) is
 * given. */
export function optionsArgument(call: string, value: unknown, example?: string): object | undefined {
  if (value === undefined && example === undefined) return undefined
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) return value
  const e = example === undefined ? '' : `, e.g. ${example}`
  throw new ConfigError(
    'options',
    { message: `${call}: expected an options object as the third argument${e}` },
    value,
  )
}

/** Validate the options every lock-like primitive shares (ConfigError naming the option), after its
 * arguments (checkLockArguments). `own`: the primitive's other options, which it reads itself. */
export function parseLockOptions(
  kind: string,
  store: unknown,
  name: unknown,
  options: LockOptions | undefined,
  { keyKind = kind, own = [] }: LockKind = {},
): LockSettings {
  checkLockArguments(kind, store, name, options, own)
  const config = { ...LOCK_DEFAULTS, ...defined(options) }
  const ttlMs = positiveInt('ttlMs', config.ttlMs, MAX_TTL_MS)
  const waiterTtlMs = positiveInt('waiterTtlMs', config.waiterTtlMs, MAX_TTL_MS)
  if (waiterTtlMs < 100) throw new ConfigError('waiterTtlMs', 'at least 100 ms', waiterTtlMs)
  const acquireTimeoutMs = config.acquireTimeoutMs
  if (acquireTimeoutMs !== Number.POSITIVE_INFINITY) positiveInt('acquireTimeoutMs', acquireTimeoutMs)
  if (typeof config.autoRenew !== 'boolean') throw new ConfigError('autoRenew', 'a boolean', config.autoRenew)
  if (config.onLost !== undefined && typeof config.onLost !== 'function') {
    throw new ConfigError('onLost', 'a function', config.onLost)
  }
  return {
    store: store as Store,
    space: keySpace((store as Store).prefix, keyKind, name as string),
    kind,
    ttlMs,
    autoRenew: config.autoRenew,
    waiterTtlMs,
    acquireTimeoutMs,
    onLost: config.onLost,
  }
}

export interface LockKind {
  /** The kind in the keys, when it differs from `kind` (the reentrant mutex keeps the mutex's keys). */
  keyKind?: string
  /** The primitive's options besides LockOptions (e.g. a semaphore's `permits`). */
  own?: readonly string[]
}

/** Validate per-call acquire options. */
export function checkAcquireOptions(
  options: { signal?: AbortSignalLike; timeoutMs?: number; onQueued?: () => boolean | void } | undefined,
  /** Options of this primitive's own (a semaphore's `weight`). */
  own: readonly string[] = [],
): void {
  if (options === undefined) return
  isPlainObjectOrUndefined('acquire options', options)
  rejectUnknown(options, ['signal', 'timeoutMs', 'onQueued', ...own], {
    timeout: 'it is `timeoutMs`',
    acquireTimeoutMs: 'one call’s wait is `timeoutMs`',
    waitTime: 'it is `timeoutMs`',
    weight: 'only a semaphore’s acquire takes a `weight`',
    permits: 'a semaphore’s acquire takes a `weight` (the permits it counts for)',
    priority: 'only a semaphore made with the `overload` option takes a `priority`',
    flow: 'only a semaphore made with the `overload` option takes a `flow`',
  })
  const { timeoutMs, signal } = options
  if (
    timeoutMs !== undefined &&
    timeoutMs !== Number.POSITIVE_INFINITY &&
    !(Number.isInteger(timeoutMs) && timeoutMs >= 0)
  ) {
    throw new ConfigError('timeoutMs', 'an integer >= 0 or Infinity', timeoutMs)
  }
  if (signal !== undefined && !isAbortSignalLike(signal))
    throw new ConfigError(
      'signal',
      'an AbortSignal (or an object with aborted and add/removeEventListener)',
      signal,
    )
  const { onQueued } = options as { onQueued?: unknown }
  if (onQueued !== undefined && typeof onQueued !== 'function')
    throw new ConfigError('onQueued', 'a function', onQueued)
}

/** A store from createRedisStore() or createMemoryStore() (the one check every factory makes). */
export function storeOption(
  option: string,
  value: unknown,
  what = 'a store from createRedisStore() or createMemoryStore()',
): Store {
  if (!isStore(value)) throw new ConfigError(option, what, value)
  return value
}

function isStore(value: unknown): value is Store {
  const store = value as Store
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof store.permits?.acquire === 'function' &&
    typeof store.rwlock?.acquire === 'function' &&
    typeof store.subscribe === 'function'
  )
}

/** An integer from 0 to max. */
export function nonNegativeInt(option: string, value: unknown, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > max) {
    throw new ConfigError(option, `an integer from 0 to ${max}`, value)
  }
  return value
}
