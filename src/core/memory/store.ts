// The embedded store for one process: the permit sets (permit-sets.ts) and read/write locks
// (rwlocks.ts) in memory, and wake-ups delivered like pub/sub messages (on a later turn).
import type { KeySpace } from '../keys.js'
import { defined, isPlainObjectOrUndefined, keyPrefix, rejectUnknown } from '../options.js'
import type { Grant, Store, Unsubscribe } from '../protocol/store.js'
import { nowMs } from './clock.js'
import { MemoryAdaptive } from './adaptive.js'
import { MemoryPermitSets } from './permit-sets.js'
import { MemoryRwLocks } from './rwlocks.js'

export interface MemoryStoreOptions {
  /** @default 'tollgate' */
  prefix?: string
}

/**
 * The embedded store for a single process: the same fair permit set as lua/permit-*.lua and the same
 * read/write lock as lua/rwlock-*.lua, in memory (G11). Limits are per process: use
 * createRedisStore() to share them across instances.
 */
export function createMemoryStore(options?: MemoryStoreOptions): Store {
  isPlainObjectOrUndefined('options', options)
  rejectUnknown(options, ['prefix'])
  const config = { prefix: 'tollgate', ...defined(options) }
  return new MemoryStore(keyPrefix('prefix', config.prefix))
}

interface Listener {
  onGrant(grant: Grant): void
  onShed: ((token: string) => void) | undefined
}

class MemoryStore implements Store {
  readonly kind = 'memory'
  readonly notificationsHealthy = true
  private readonly listeners = new Map<string, Set<Listener>>()
  readonly permits = new MemoryPermitSets((space, grants, shed) => this.publish(space, grants, shed))
  readonly rwlock = new MemoryRwLocks((space, grants) => this.publish(space, grants))
  readonly adaptive = new MemoryAdaptive()
  // Names whose leases simply ran out are forgotten by a sweep, as Redis expires their keys. The
  // interval holds the store weakly: a store nobody references any more (and never closed, e.g. the
  // store of its own of a local adaptive limit) is collected, and its interval stops.
  private readonly sweeper = sweepWhileReferenced(this)

  constructor(readonly prefix: string) {}

  /** Number of names with state (permit sets and read/write locks): the memory twin of "keys left in
   * Redis". */
  get size(): number {
    return this.permits.sets.size + this.rwlock.size
  }

  async subscribe(
    space: KeySpace,
    onGrant: (grant: Grant) => void,
    onShed?: (token: string) => void,
  ): Promise<Unsubscribe> {
    let set = this.listeners.get(space.channel)
    if (!set) {
      set = new Set()
      this.listeners.set(space.channel, set)
    }
    const listener: Listener = { onGrant, onShed }
    set.add(listener)
    return () => {
      const current = this.listeners.get(space.channel)
      if (current?.delete(listener) && current.size === 0) this.listeners.delete(space.channel)
    }
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper)
    this.listeners.clear()
  }

  /** @internal The sweep's work (sweepWhileReferenced). */
  sweep(): void {
    const now = nowMs()
    this.permits.sweep(now)
    this.rwlock.sweep(now)
    this.adaptive.sweep(now)
  }

  /** Tell the space's subscribers about grants and shed waiters (a fair queue's evictions): later,
   * like a pub/sub message, never inside the caller's call stack. */
  private publish(space: KeySpace, grants: Grant[], shed?: readonly string[]): void {
    const listeners = this.listeners.get(space.channel)
    if (!listeners) return
    setImmediate(() => {
      for (const grant of grants) for (const listener of listeners) listener.onGrant(grant)
      if (shed) for (const token of shed) for (const listener of listeners) listener.onShed?.(token)
    })
  }
}

/** Sweep `store` every second for as long as something else references it (or until close()). */
function sweepWhileReferenced(store: MemoryStore): NodeJS.Timeout {
  const ref = new WeakRef(store)
  const timer: NodeJS.Timeout = setInterval(() => {
    const live = ref.deref()
    if (live) live.sweep()
    else clearInterval(timer)
  }, 1000).unref()
  return timer
}
