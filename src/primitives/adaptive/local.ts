// The stores of scope 'local' adaptive limits: one in memory per process and shared store, which
// keeps each bucket's last state.
//
// scope 'local': this process's own limit from its own samples, each window, on a store of its own in
// memory: N replicas then run N limits, as a per-instance limiter does (Envoy's adaptive concurrency,
// Netflix's concurrency-limits). The benchmark compares the two (`npm run bench -- adaptive`). That
// store is one per process and shared store (localStoreOf), and keeps each bucket's last state: a
// limit made again for the same bucket (a gateway's reload) shares the permit set with the holders
// and waiters of the one it replaces (the limit binds them all, as on Redis) and goes on from its
// state.
import { createMemoryStore } from '../../core/memory/store.js'
import type { Store } from '../../core/protocol/store.js'
import type { ControllerState } from './controller.js'

/** Shared store -> the memory store of this process's local limits over it. */
const localStores = new WeakMap<Store, Store>()
/** Local store -> bucket -> the last state of its local limit. */
const localStates = new WeakMap<Store, Map<string, ControllerState>>()

/** The store of this process's local adaptive limits over `store` (one per process and store: a limit
 * made again for a bucket finds the permit set, holders and state of the one it replaces). */
export function localStoreOf(store: Store): Store {
  let local = localStores.get(store)
  if (!local) {
    local = createMemoryStore({ prefix: store.prefix })
    localStores.set(store, local)
  }
  return local
}

/** The last state of the local limit of `bucket` (its permit set's base) on the local store `local`. */
export function lastLocalState(local: Store, bucket: string): ControllerState | undefined {
  return localStates.get(local)?.get(bucket)
}

/** Keep `state` as the last state of the local limit of `bucket` on `local`. */
export function keepLocalState(local: Store, bucket: string, state: ControllerState): void {
  const states = localStates.get(local) ?? new Map<string, ControllerState>()
  localStates.set(local, states.set(bucket, state))
}
