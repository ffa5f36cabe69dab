// RedLock's options, validated once (ConfigError naming the option).
import { ConfigError, type LeaseLostError } from '../../core/errors.js'
import type { Lease } from '../../core/client/lease.js'
import {
  defined,
  nameArgument,
  nonNegativeInt,
  optionsArgument,
  positiveInt,
  rejectUnknown,
  storeOption,
} from '../../core/options.js'
import type { Store } from '../../core/protocol/store.js'
import { driftOf } from './quorum.js'

export interface RedlockOptions {
  /** Lease length on every node; auto-renewal extends it at about a third of the validity left.
   * @default 30000 */
  ttlMs?: number
  /** Clock drift allowed between the nodes and this process, as a fraction of the TTL. The lease is
   * valid for `ttlMs − drift − elapsed`, with `drift = ceil(ttlMs × driftFactor) + clockDriftMs`.
   * @default 0.01 */
  driftFactor?: number
  /** Fixed part of the drift allowance (timer granularity, tiny TTLs). @default 2 */
  clockDriftMs?: number
  /** Retries after the first attempt of `acquire()`; Infinity retries until `acquireTimeoutMs`.
   * @default Infinity */
  retryCount?: number
  /** Pause between attempts. @default 200 */
  retryDelayMs?: number
  /** Up to this much is added at random to every pause, so contenders do not retry in lockstep
   * and split the votes again. @default 100 */
  retryJitterMs?: number
  /** How long one node may take to answer one call. A node that answers later counts as failed for
   * that attempt (a grant it gave late is handed back). Keep it far below the TTL: a majority that
   * is only complete after `ttlMs − drift` is refused anyway.
   * @default min(50, max(1, floor(ttlMs / 10))) */
  perNodeTimeoutMs?: number
  /** Renew held leases automatically until release. @default true */
  autoRenew?: boolean
  /** Default bound of `acquire()` over all its attempts; Infinity retries until `retryCount` runs
   * out or the signal aborts. @default 10000 */
  acquireTimeoutMs?: number
  /** Called when a held lease is lost (after its signal aborted). Must not throw. */
  onLost?: (error: LeaseLostError, lease: Lease) => void
}

export const REDLOCK_DEFAULTS = Object.freeze({
  ttlMs: 30_000,
  driftFactor: 0.01,
  clockDriftMs: 2,
  retryCount: Number.POSITIVE_INFINITY,
  retryDelayMs: 200,
  retryJitterMs: 100,
  autoRenew: true,
  acquireTimeoutMs: 10_000,
})

/** Every key of RedlockOptions. */
const REDLOCK_OPTION_KEYS = [
  'ttlMs',
  'driftFactor',
  'clockDriftMs',
  'retryCount',
  'retryDelayMs',
  'retryJitterMs',
  'perNodeTimeoutMs',
  'autoRenew',
  'acquireTimeoutMs',
  'onLost',
] as const satisfies readonly (keyof RedlockOptions)[]

export const MIN_NODES = 3
const REDLOCK_CALL = 'createRedlock(stores, name, options)'
const MAX_TTL_MS = 24 * 3600 * 1000
const MAX_DELAY_MS = 3600 * 1000

export interface RedlockSettings {
  stores: Store[]
  name: string
  ttlMs: number
  driftFactor: number
  clockDriftMs: number
  retryCount: number
  retryDelayMs: number
  retryJitterMs: number
  perNodeTimeoutMs: number
  autoRenew: boolean
  acquireTimeoutMs: number
  onLost: RedlockOptions['onLost']
}

export function parseRedlock(
  stores: unknown,
  name: unknown,
  options: RedlockOptions | undefined,
): RedlockSettings {
  if (!Array.isArray(stores) || stores.length < MIN_NODES) {
    throw new ConfigError(
      'stores',
      `an array of at least ${MIN_NODES} stores from createRedisStore(), one per independent Redis master`,
      Array.isArray(stores) ? `${stores.length} store(s)` : stores,
    )
  }
  stores.forEach((value: unknown, i) => {
    const store = storeOption('stores', value, `a store from createRedisStore() at stores[${i}]`)
    if (store.kind !== 'redis') {
      throw new ConfigError('stores', `Redis stores only: stores[${i}] is a ${store.kind} store`)
    }
    if (stores.indexOf(store) !== i) {
      throw new ConfigError(
        'stores',
        `distinct stores: stores[${i}] repeats stores[${stores.indexOf(store)}]`,
      )
    }
  })
  nameArgument(REDLOCK_CALL, name)
  optionsArgument(REDLOCK_CALL, options)
  rejectUnknown(options, REDLOCK_OPTION_KEYS, {
    retryDelay: 'it is `retryDelayMs`',
    retryJitter: 'it is `retryJitterMs`',
    automaticExtensionThreshold: 'leases are renewed at a third of the validity while `autoRenew` is on',
    waiterTtlMs: 'a RedLock does not queue: it retries (`retryCount`, `retryDelayMs`)',
  })
  const config = { ...REDLOCK_DEFAULTS, ...defined(options) }
  const ttlMs = positiveInt('ttlMs', config.ttlMs, MAX_TTL_MS)
  const { driftFactor } = config
  if (typeof driftFactor !== 'number' || !(driftFactor >= 0 && driftFactor < 1)) {
    throw new ConfigError('driftFactor', 'a number from 0 up to (not including) 1', driftFactor)
  }
  const clockDriftMs = nonNegativeInt('clockDriftMs', config.clockDriftMs, MAX_TTL_MS)
  const drift = driftOf(ttlMs, driftFactor, clockDriftMs)
  if (drift >= ttlMs) {
    throw new ConfigError(
      'ttlMs',
      `more than the drift allowance ceil(ttlMs × driftFactor) + clockDriftMs = ${drift} ms`,
      ttlMs,
    )
  }
  const retryCount = config.retryCount
  if (retryCount !== Number.POSITIVE_INFINITY) nonNegativeInt('retryCount', retryCount)
  const retryDelayMs = nonNegativeInt('retryDelayMs', config.retryDelayMs, MAX_DELAY_MS)
  const retryJitterMs = nonNegativeInt('retryJitterMs', config.retryJitterMs, MAX_DELAY_MS)
  const perNodeTimeoutMs = positiveInt(
    'perNodeTimeoutMs',
    config.perNodeTimeoutMs ?? Math.max(1, Math.min(50, Math.floor(ttlMs / 10))),
    ttlMs,
  )
  const acquireTimeoutMs = config.acquireTimeoutMs
  if (acquireTimeoutMs !== Number.POSITIVE_INFINITY) nonNegativeInt('acquireTimeoutMs', acquireTimeoutMs)
  if (typeof config.autoRenew !== 'boolean') throw new ConfigError('autoRenew', 'a boolean', config.autoRenew)
  if (config.onLost !== undefined && typeof config.onLost !== 'function') {
    throw new ConfigError('onLost', 'a function', config.onLost)
  }
  return {
    stores: [...(stores as Store[])],
    name: name as string,
    ttlMs,
    driftFactor,
    clockDriftMs,
    retryCount,
    retryDelayMs,
    retryJitterMs,
    perNodeTimeoutMs,
    autoRenew: config.autoRenew,
    acquireTimeoutMs,
    onLost: config.onLost,
  }
}
