// Who owns an acquisition of a reentrant lock: a fixed owner, the async call chain, or the call.
import { AsyncLocalStorage } from 'node:async_hooks'
import { createHash } from 'node:crypto'
import type { KeySpace } from '../core/keys.js'
import { nonEmptyString } from '../core/options.js'
import { newToken } from '../core/client/lock-client.js'
import type { Store } from '../core/protocol/store.js'

/**
 * Who owns an acquisition of a reentrant lock: a fixed `owner` option (e.g. a job id), else the
 * async call chain of `withLease` (Node has no threads; a Java ThreadLocal becomes an
 * AsyncLocalStorage scope), else a fresh owner per call.
 */
export interface OwnerScope {
  /** The owner token of the calling async chain (fixed owner > enclosing withLease > fresh token). */
  token(): string
  /** Run `fn` with `token` as this lock's owner for the rest of its async chain. */
  run<T>(token: string, fn: () => Promise<T>): Promise<T>
}

// Owner scope of the current async call chain: lock identity -> owner token.
const scopes = new AsyncLocalStorage<ReadonlyMap<string, string>>()

/** The owner scope of one lock (`space` on `store`); `owner` is the user's option, validated here. */
export function ownerScope(store: Store, space: KeySpace, owner: unknown): OwnerScope {
  const fixedToken = owner === undefined ? undefined : ownerToken(nonEmptyString('owner', owner, 1024))
  const identity = `${storeId(store)}\n${space.base}`
  return {
    token: () => fixedToken ?? scopes.getStore()?.get(identity) ?? newToken(),
    run: (token, fn) => {
      const outer = scopes.getStore()
      if (outer?.get(identity) === token) return fn()
      const scope = new Map(outer)
      scope.set(identity, token)
      return scopes.run(scope, fn)
    },
  }
}

const storeIds = new WeakMap<Store, number>()
let nextStoreId = 0
/** Reentrancy scopes are per lock identity: the same name on two stores is two locks. */
function storeId(store: Store): number {
  let id = storeIds.get(store)
  if (id === undefined) {
    id = nextStoreId++
    storeIds.set(store, id)
  }
  return id
}

/** Owner names go into tokens, which must stay free of spaces and newlines (grant message format). */
function ownerToken(owner: string): string {
  return `o.${createHash('sha256').update(owner, 'utf8').digest('base64url')}`
}
