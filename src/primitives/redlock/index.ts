// createRedlock(): a mutex over N >= 3 independent Redis masters.
import type { Lease } from '../../core/client/lease.js'
import type { AcquireOptions } from '../../core/client/lock-client.js'
import { checkAcquireOptions } from '../../core/options.js'
import type { Store } from '../../core/protocol/store.js'
import { runHolding } from '../mutex.js'
import { claimName } from '../names.js'
import { RedlockClient } from './client.js'
import { parseRedlock, type RedlockOptions } from './options.js'

export { REDLOCK_DEFAULTS, type RedlockOptions } from './options.js'

export interface Redlock {
  readonly name: string
  /** Number of independent nodes. */
  readonly nodes: number
  /** Grants needed for a lease: floor(nodes / 2) + 1. */
  readonly quorum: number
  /** Take the lock on a majority of the nodes, retrying with jitter. Rejects with a
   * RedlockQuorumError after `retryCount` retries or `timeoutMs` (default `acquireTimeoutMs`), or
   * with the signal's reason; nothing is left on any node then. */
  acquire(options?: AcquireOptions): Promise<Lease>
  /** One attempt. Resolves undefined when another owner holds the lock; rejects with a
   * RedlockQuorumError when the attempt failed because nodes failed or answered too late. */
  tryAcquire(): Promise<Lease | undefined>
  /** Run `fn` holding the lock and always release it; `fn`'s own error is never masked. */
  withLease<T>(fn: (lease: Lease) => T | Promise<T>, options?: AcquireOptions): Promise<T>
}

/**
 * RedLock over N >= 3 independent Redis masters (one `createRedisStore()` per master, never replicas
 * of each other or nodes of one cluster). Each node holds a 1-permit lock of the fair permit set in
 * try mode (lua/permit-*.lua, never queued), with the same random token per attempt on every node.
 *
 * An attempt asks every node at once, each within `perNodeTimeoutMs`, and succeeds only when a
 * majority granted AND time is left: `validity = ttlMs − drift − elapsed > 0`, elapsed measured from
 * the start of that attempt. A failed attempt releases on every node (also those that did not
 * answer: a late grant is released when it arrives). Renewal needs a majority within validity too;
 * release goes to every node and never throws.
 *
 * `lease.expiresAt` is a client-side estimate on the local clock: the end of the validity window.
 * `lease.fencingToken` is the largest per-node fencing token of the nodes that granted. Per node
 * these strictly increase and never fall below that node's microsecond clock, so across holders the
 * token increases as long as the nodes' clocks agree to within the time between two acquisitions and
 * none steps back. It is not a consensus counter: see docs/redlock.md for what RedLock does not
 * guarantee (process pauses, clock jumps, restarts without persistence).
 */
export function createRedlock(stores: readonly Store[], name: string, options?: RedlockOptions): Redlock {
  const client = new RedlockClient(parseRedlock(stores, name, options))
  const redlock: Redlock = {
    name,
    nodes: client.stores.length,
    quorum: client.quorum,
    acquire: async (opts) => {
      checkAcquireOptions(opts)
      return client.acquire(opts)
    },
    tryAcquire: () => client.tryAcquire(),
    withLease: async (fn, opts) => {
      checkAcquireOptions(opts)
      return runHolding(await client.acquire(opts), fn)
    },
  }
  claimName(client.stores, name, 'RedLock', client)
  return redlock
}
