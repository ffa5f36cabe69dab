// The KEYS of each family's calls: every key a permit set, a fair queue or a read/write lock of one
// name may have (lua/lib/permits.lua, lua/lib/fair.lua, lua/lib/rwlock.lua), all under its hash tag,
// made once per name (they are on every call's hot path).
import type { KeySpace } from '../keys.js'

/** KEYS of each family of scripts (lua/lib/permits.lua, lua/lib/rwlock.lua), all under one hash tag. */
const PERMIT_PARTS = ['h', 'q', 'w', 'm', 'p', 'f', 'a'] as const
/** A fair queue's calls pass four more (lua/lib/fair.lua: D T K X), after the plain seven. */
const FAIR_PARTS = [...PERMIT_PARTS, 'd', 't', 'k', 'x'] as const
const RW_PARTS = ['r', 'x', 'q', 'w', 'm', 'a'] as const

const keyCache = new WeakMap<KeySpace, { permit?: string[]; rw?: string[]; fair?: string[] }>()

/** The KEYS of a space's scripts, built once per space (they are on every call's hot path): every key
 * a permit set (rw false) or a read/write lock (rw true) may have. */
export function scriptKeys(space: KeySpace, rw: boolean): string[] {
  let cached = keyCache.get(space)
  if (!cached) {
    cached = {}
    keyCache.set(space, cached)
  }
  if (rw) return (cached.rw ??= RW_PARTS.map((part) => space.key(part)))
  return (cached.permit ??= PERMIT_PARTS.map((part) => space.key(part)))
}

/** The KEYS of a fair queue's permit calls (the plain seven, then D T K X), built once per space. */
export function fairKeys(space: KeySpace): string[] {
  let cached = keyCache.get(space)
  if (!cached) {
    cached = {}
    keyCache.set(space, cached)
  }
  return (cached.fair ??= FAIR_PARTS.map((part) => space.key(part)))
}
