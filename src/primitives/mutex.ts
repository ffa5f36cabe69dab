// createMutex() and createReentrantMutex(): a permit set of one permit, per name.
import { debuglog } from 'node:util'
import type { Lease } from '../core/client/lease.js'
import { type AcquireOptions, type LockClient } from '../core/client/lock-client.js'
import { PermitClient } from '../core/client/permit-client.js'
import type { Store } from '../core/protocol/store.js'
import { checkAcquireOptions, type LockOptions, parseLockOptions } from '../core/options.js'
import { claimName } from './names.js'
import { ownerScope } from './owner-scope.js'

const debug = debuglog('tollgate:mutex')

export type { AcquireOptions } from '../core/client/lock-client.js'
export type MutexOptions = LockOptions

export interface Mutex {
  readonly name: string
  /** Wait for the lock (FIFO across processes). Rejects with AcquireTimeoutError after `timeoutMs`
   * or with the signal's reason; either way nothing is left in the queue. */
  acquire(options?: AcquireOptions): Promise<Lease>
  /** Take the lock only if it is free and nobody queues for it; contention is not an error. */
  tryAcquire(): Promise<Lease | undefined>
  /** Run `fn` holding the lock and always release it; `fn`'s own error is never masked. */
  withLease<T>(fn: (lease: Lease) => T | Promise<T>, options?: AcquireOptions): Promise<T>
}

/**
 * A distributed mutex: one holder at a time (G1), a dead holder's lease expires on the store's clock
 * (G2), waiters are served in FIFO order across processes (G5).
 */
export function createMutex(store: Store, name: string, options?: MutexOptions): Mutex {
  const client = new PermitClient(parseLockOptions('mutex', store, name, options), 1)
  // Claimed for as long as the client lives: every call of the mutex keeps it alive.
  claimName(store, name, 'mutex', client)
  return { name, ...freshOwnerCalls(client) }
}

/** acquire / tryAcquire / withLease where every call is a new owner (mutex, semaphore). */
export function freshOwnerCalls(client: LockClient): Omit<Mutex, 'name'> {
  return {
    acquire: (opts) => {
      checkAcquireOptions(opts)
      return client.acquire(undefined, opts)
    },
    tryAcquire: () => client.tryAcquire(undefined),
    withLease: async (fn, opts) => {
      checkAcquireOptions(opts)
      return runHolding(await client.acquire(undefined, opts), fn)
    },
  }
}

export interface ReentrantMutexOptions extends LockOptions {
  /** A fixed owner identity (e.g. a job id): every acquire with the same owner re-enters. Without it,
   * the owner is the async call chain of `withLease`: nested calls re-enter, unrelated concurrent
   * calls in the same process exclude each other. */
  owner?: string
}

/**
 * A reentrant mutex (an owner's acquisitions kept with its hold in the permit set): the same owner may
 * acquire again and must release as often. Acquire N times, release N times frees it. It is the
 * mutex of its name: it shares createMutex()'s keys, so a plain call and an owner exclude each other
 * and queue in one FIFO order (one name is one lock).
 */
export function createReentrantMutex(store: Store, name: string, options?: ReentrantMutexOptions): Mutex {
  const settings = parseLockOptions('rmutex', store, name, options, { keyKind: 'mutex', own: ['owner'] })
  const client = new PermitClient(settings, 1)
  const scope = ownerScope(store, client.space, options?.owner)

  const mutex: Mutex = {
    name,
    acquire: (opts) => {
      checkAcquireOptions(opts)
      return client.acquire(scope.token(), opts)
    },
    tryAcquire: () => client.tryAcquire(scope.token()),
    withLease: async (fn, opts) => {
      checkAcquireOptions(opts)
      const lease = await client.acquire(scope.token(), opts)
      return scope.run(lease.token, () => runHolding(lease, fn))
    },
  }
  claimName(store, name, 'mutex', client)
  return mutex
}

/** Run fn with the lease and release it afterwards. A release failure after fn succeeded is reported
 * through the lease's events only: the work is done and the lease expires on its own. */
export async function runHolding<T>(lease: Lease, fn: (lease: Lease) => T | Promise<T>): Promise<T> {
  let result: T
  try {
    result = await fn(lease)
  } catch (error) {
    await lease.release().catch((releaseError) => debug('release after failure failed: %o', releaseError))
    throw error
  }
  await lease.release().catch((releaseError) => debug('release failed: %o', releaseError))
  return result
}
