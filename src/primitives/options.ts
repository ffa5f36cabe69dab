import type { LeaseLostError } from '../core/errors.js'
import { ConfigError } from '../core/errors.js'
import { keySpace } from '../core/keys.js'
import type { Lease } from '../core/lease.js'
import { defined, isPlainObjectOrUndefined, nonEmptyString, positiveInt } from '../core/options.js'
import type { PermitSettings } from '../core/permits.js'
import type { Store } from '../core/store.js'

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

/** Validate the shared options and build the settings of a permit client (throws ConfigError). */
export function lockSettings(
  kind: string,
  store: Store,
  name: unknown,
  options: LockOptions | undefined,
): PermitSettings {
  if (!isStore(store))
    throw new ConfigError('store', 'a store from createRedisStore() or createMemoryStore()', store)
  nonEmptyString('name', name)
  isPlainObjectOrUndefined('options', options)
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
    store,
    space: keySpace(store.prefix, kind, name as string),
    kind,
    ttlMs,
    autoRenew: config.autoRenew,
    waiterTtlMs,
    acquireTimeoutMs,
    onLost: config.onLost,
  }
}

/** Validate per-call acquire options. */
export function checkAcquireOptions(
  options: { signal?: AbortSignal; timeoutMs?: number; onQueued?: () => boolean | void } | undefined,
): void {
  if (options === undefined) return
  isPlainObjectOrUndefined('acquire options', options)
  const { timeoutMs, signal } = options
  if (
    timeoutMs !== undefined &&
    timeoutMs !== Number.POSITIVE_INFINITY &&
    !(Number.isInteger(timeoutMs) && timeoutMs >= 0)
  ) {
    throw new ConfigError('timeoutMs', 'an integer >= 0 or Infinity', timeoutMs)
  }
  if (signal !== undefined && !(signal instanceof AbortSignal))
    throw new ConfigError('signal', 'an AbortSignal', signal)
  const { onQueued } = options as { onQueued?: unknown }
  if (onQueued !== undefined && typeof onQueued !== 'function')
    throw new ConfigError('onQueued', 'a function', onQueued)
}

function isStore(value: unknown): value is Store {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as Store).acquire === 'function' &&
    typeof (value as Store).release === 'function'
  )
}
