// Is the store up? Once a store call has failed, the store is known down: admissions fail fast (503 at
// once, or straight through with failOpen) instead of each waiting commandTimeoutMs for its own
// failure, and one background probe asks the store until it answers again (G14). One line is logged
// when an outage starts and one when it ends, never one per request.
import { StoreUnavailableError } from '../core/errors.js'
import { keySpace } from '../core/keys.js'
import type { Store } from '../core/protocol/store.js'

export interface HealthLogger {
  warn(message: string, meta?: Record<string, unknown>): void
  error(message: string, meta?: Record<string, unknown>): void
}

const PROBE_MIN_MS = 100
const PROBE_MAX_MS = 2000

export class StoreHealth {
  /** True from a failed store call until a probe answers. */
  down = false
  /** Admissions answered without asking the store during the current outage. */
  failedFast = 0
  private downSince = 0
  /** The longest wait between two probes (outage: 'share' asks every PROBE_MIN_MS: fastProbe()). */
  private probeMaxMs = PROBE_MAX_MS
  private logger: HealthLogger | undefined
  private readonly listeners = new Set<(down: boolean) => void>()

  constructor(private readonly store: Store) {}

  /** Probe every PROBE_MIN_MS, without backing off: every process of a fleet in outage: 'share'
   * notices the store's return within that (outage.ts). */
  fastProbe(): void {
    this.probeMaxMs = PROBE_MIN_MS
  }

  /** Be told when the store goes down or comes back. Returns the unsubscribe. */
  onChange(listener: (down: boolean) => void): () => void {
    this.listeners.add(listener)
    return () => this.listeners.delete(listener)
  }

  /** A store call failed: from now on the store is down until a probe answers. */
  failed(error: unknown, logger: HealthLogger): void {
    if (!(error instanceof StoreUnavailableError) || this.down) return
    if ((this.store as { closed?: boolean }).closed) return
    this.down = true
    this.downSince = Date.now()
    this.failedFast = 0
    this.logger = logger
    logger.error('tollgate: store unavailable; failing fast until it answers again', {
      error: error.message,
    })
    for (const listener of this.listeners) listener(true)
    void this.probe()
  }

  private async probe(): Promise<void> {
    const space = keySpace(this.store.prefix, 'probe', 'health')
    let wait = PROBE_MIN_MS
    while (this.down) {
      await new Promise((resolve) => setTimeout(resolve, wait).unref())
      if ((this.store as { closed?: boolean }).closed) return
      try {
        await this.store.permits.inspect(space)
      } catch {
        wait = Math.min(this.probeMaxMs, wait * 2)
        continue
      }
      this.down = false
      this.logger?.warn('tollgate: store available again', {
        downMs: Date.now() - this.downSince,
        failedFast: this.failedFast,
      })
      for (const listener of this.listeners) listener(false)
    }
  }
}

const healths = new WeakMap<Store, StoreHealth>()

/** The health of a store, shared by everything that uses it in this process. */
export function storeHealth(store: Store): StoreHealth {
  let health = healths.get(store)
  if (!health) {
    health = new StoreHealth(store)
    healths.set(store, health)
  }
  return health
}
