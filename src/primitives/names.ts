// One name is one lock. The mutex and the reentrant mutex share their keys (a reentrant owner and a
// plain call exclude each other in one FIFO queue); the semaphore, the read/write lock and RedLock
// keep keys of their own kind, so one name may not be two of them: a process that creates a second
// kind of lock on a name its store already uses for another kind gets a ConfigError naming both.
// The check is per process: two processes that use one name for two kinds still get two locks
// (their keys differ by kind; docs/api.md, "One name, one lock").
import { ConfigError } from '../core/errors.js'
import type { Store } from '../core/protocol/store.js'

/** The kinds of lock whose keys differ: a name belongs to one of them per store. */
export type LockFamily = 'mutex' | 'semaphore' | 'read/write lock' | 'RedLock'

interface Claim {
  readonly family: LockFamily
  /** Live primitives of the name (a primitive that is collected gives its name up). */
  holders: number
}

const claims = new WeakMap<Store, Map<string, Claim>>()

/** A collected primitive gives up its claim (so a name can change kind once its locks are gone). */
const collected = new FinalizationRegistry<{ names: Map<string, Claim>; name: string }>(({ names, name }) => {
  const claim = names.get(name)
  if (claim && --claim.holders <= 0) names.delete(name)
})

/** Claim `name` on each of `stores` for `family`, for as long as `primitive` lives; throws ConfigError
 * (claiming nothing) when the name is another kind of lock on one of them. */
export function claimName(
  stores: Store | readonly Store[],
  name: string,
  family: LockFamily,
  primitive: object,
): void {
  const all = Array.isArray(stores) ? (stores as readonly Store[]) : [stores as Store]
  const tables = all.map((store) => {
    let names = claims.get(store)
    if (!names) {
      names = new Map()
      claims.set(store, names)
    }
    const claim = names.get(name)
    if (claim && claim.family !== family) {
      throw new ConfigError(
        'name',
        `a name that is not another kind of lock on this store: "${name}" is a ${claim.family} on this store, and one name is one lock (choose another name for this ${family})`,
      )
    }
    return names
  })
  for (const names of tables) {
    const claim = names.get(name)
    if (claim) claim.holders++
    else names.set(name, { family, holders: 1 })
    collected.register(primitive, { names, name })
  }
}
