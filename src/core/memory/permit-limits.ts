// The run-time limits of permit sets in memory, the twin of P of lib/permits.lua (permit-set-limit.lua
// writes it): an operator's override, or the fleet's adaptive limit and the version of its step.
import { nowMs } from './clock.js'

/** P of lib/permits.lua: an override, or the fleet's adaptive limit and the version of its step. */
export interface StoredLimit {
  permits: number
  adaptive: boolean
  version: number
}

/** Run-time limits per name (P in lib/permits.lua): an override (configuration, kept while the name
 * is idle), or the fleet's adaptive limit (`until`: it runs out then, as the key's expiry in Redis). */
export class StoredLimits {
  private readonly limits = new Map<string, StoredLimit & { until: number }>()

  /** The run-time limit of the name `base`, if one is set and has not run out. */
  get(base: string, now: number): StoredLimit | undefined {
    const stored = this.limits.get(base)
    if (stored && stored.until <= now) {
      this.limits.delete(base)
      return undefined
    }
    return stored
  }

  /** The permits in force for `base`: its run-time limit, else `requested`. */
  permits(base: string, requested: number): number {
    return this.get(base, nowMs())?.permits ?? requested
  }

  /** permit-set-limit.lua's write: set (or, undefined, drop) an override; with `adaptive`, the
   * fleet's limit, kept for `ttlMs`, written neither over an override nor over a limit of the same
   * or a later `version`. Returns whether it was written. */
  set(
    base: string,
    permits: number | undefined,
    adaptive: { ttlMs: number; version: number } | undefined,
    now: number,
  ): boolean {
    let written = true
    if (adaptive) {
      const current = this.get(base, now)
      if (current && !current.adaptive)
        written = false // an override wins while it is set
      else if (current && current.version >= adaptive.version)
        written = false // a later step's limit is there
      else if (permits !== undefined)
        this.limits.set(base, {
          permits,
          adaptive: true,
          until: now + adaptive.ttlMs,
          version: adaptive.version,
        })
    } else if (permits === undefined) {
      // Drops an override, never the fleet's adaptive limit.
      if (!this.get(base, now)?.adaptive) this.limits.delete(base)
    } else
      this.limits.set(base, {
        permits,
        adaptive: false,
        until: Number.POSITIVE_INFINITY,
        version: -1,
      })
    return written
  }
}
