// createReadWriteLock(): a writer-preferring read/write lock per name, its two sides and its stats.
import type { AcquireOptions } from '../core/client/lock-client.js'
import type { Lease } from '../core/client/lease.js'
import { RwClient } from '../core/client/rw-client.js'
import type { RwMode, RwStats, Store } from '../core/protocol/store.js'
import { type Mutex, runHolding } from './mutex.js'
import { checkAcquireOptions, type LockOptions, parseLockOptions } from '../core/options.js'
import { claimName } from './names.js'
import { ownerScope } from './owner-scope.js'

export type { RwMode, RwStats as ReadWriteLockStats } from '../core/protocol/store.js'

export interface ReadWriteLockOptions extends LockOptions {
  /** A fixed owner identity (e.g. a job id): every acquire with the same owner re-enters. Without it,
   * the owner is the async call chain of `withLease`: nested calls re-enter, unrelated concurrent
   * calls (in this process or any other) are different owners. */
  owner?: string
}

/** One side of a read/write lock: the same acquire / tryAcquire / withLease and Lease as a mutex. */
export interface ReadWriteLockSide extends Mutex {
  readonly mode: RwMode
}

export interface ReadWriteLock {
  readonly name: string
  /** Shared: any number of readers hold it together, never while a writer holds the write side. Once
   * a writer waits, new readers queue behind it (G6). Inside the same owner's write lock it is
   * granted at once (a downgrade) with the write lease's fencing token. */
  readonly read: ReadWriteLockSide
  /** Exclusive: one writer, and no reader. Re-entrant for the same owner. An owner that holds only
   * the read lock is refused at once with LockUpgradeError (an upgrade would deadlock). */
  readonly write: ReadWriteLockSide
  /** Live readers, whether a writer holds, and the queue length (one store call, no scan). */
  stats(): Promise<RwStats>
}

/**
 * A distributed writer-preferring read/write lock (one lease per reader, not one shared `read` field). Every reader holds its own
 * lease, renewed and expiring on its own (G2), so one reader's release or death never affects
 * another's; a writer excludes everyone (G1). Waiters of both modes share one FIFO queue (G5): a
 * writer at its head enters when the last holder leaves, and a run of readers at its head enters
 * together. Fencing tokens increase across both modes (G7); wake-ups come by notification (G10).
 * Reentrancy follows the owner (explicit `owner`, else the async scope of `withLease`).
 */
export function createReadWriteLock(
  store: Store,
  name: string,
  options?: ReadWriteLockOptions,
): ReadWriteLock {
  const lock = bucketReadWriteLock(store, name, options)
  // Claimed for as long as either side's client lives (a caller may keep only `lock.read.acquire`).
  for (const client of clients.get(lock) ?? []) claimName(store, name, 'read/write lock', client)
  return lock
}

/** The clients of each lock's two sides (what their calls keep alive). */
const clients = new WeakMap<ReadWriteLock, RwClient[]>()

/** createReadWriteLock() without claiming its name: the admission's buckets (see bucketSemaphore()).
 * Not part of the public API. */
export function bucketReadWriteLock(
  store: Store,
  name: string,
  options?: ReadWriteLockOptions,
): ReadWriteLock {
  const settings = parseLockOptions('rw', store, name, options, { own: ['owner'] })
  const scope = ownerScope(store, settings.space, options?.owner)

  const made: RwClient[] = []
  const side = (mode: RwMode): ReadWriteLockSide => {
    const client = new RwClient(settings, mode)
    made.push(client)
    return {
      name,
      mode,
      acquire: (opts?: AcquireOptions) => {
        checkAcquireOptions(opts)
        return client.acquire(scope.token(), opts)
      },
      tryAcquire: () => client.tryAcquire(scope.token()),
      withLease: async <T>(fn: (lease: Lease) => T | Promise<T>, opts?: AcquireOptions) => {
        checkAcquireOptions(opts)
        const lease = await client.acquire(scope.token(), opts)
        return scope.run(lease.token, () => runHolding(lease, fn))
      },
    }
  }

  const lock: ReadWriteLock = {
    name,
    read: side('read'),
    write: side('write'),
    stats: () => store.rwlock.inspect(settings.space),
  }
  clients.set(lock, made)
  return lock
}
