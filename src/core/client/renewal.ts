import { debuglog } from 'node:util'
import type { Acquisition, RenewReply } from '../protocol/store.js'

const debug = debuglog('tollgate:renewal')

/** Renew at a third of the remaining lease (Redisson's watchdog rhythm). */
const RENEW_FRACTION = 1 / 3
/** Leases due within this window of each other go out in the same batch. */
const BATCH_WINDOW_MS = 25
const RETRY_MIN_MS = 50
const RETRY_MAX_MS = 1000

interface Entry {
  dueAt: number
  failures: number
}

/** Who renews a lease: one store call renews many leases of one group (a primitive) and ttl. */
export interface RenewGroup {
  readonly ttlMs: number
  renewTokens(ttlMs: number, holds: readonly Acquisition[]): Promise<RenewReply>
}

/** What the scheduler needs of a lease (lease.ts PermitLease). */
export interface Renewable {
  readonly name: string
  readonly token: string
  /** A reentrant owner's acquisition id: renewed only while it holds (G4). */
  readonly op?: string | undefined
  readonly context: RenewGroup
  /** Local-clock ms when the lease runs out. */
  readonly localDeadline: number
  /** Neither released nor lost. */
  readonly active: boolean
  applyRenewal(now: number, expiresAt: number): void
  lose(reason: string, cause?: unknown): void
}

/**
 * One process-wide scheduler for every auto-renewed lease: one unref'd timer, batched calls (one
 * store call renews all due leases of one name and ttl). A failing renewal is retried until the lease
 * deadline, then the lease is declared lost. No timer callback ever throws.
 */
export class RenewalScheduler {
  private readonly entries = new Map<Renewable, Entry>()
  private timer: NodeJS.Timeout | undefined
  private timerAt = Number.POSITIVE_INFINITY

  add(lease: Renewable): void {
    const entry = { dueAt: dueAt(lease), failures: 0 }
    this.entries.set(lease, entry)
    if (entry.dueAt < this.timerAt) this.armAt(entry.dueAt) // O(1): no scan on the hot path
  }

  delete(lease: Renewable): void {
    this.entries.delete(lease)
    if (this.entries.size === 0 && this.timer) {
      clearTimeout(this.timer)
      this.timer = undefined
      this.timerAt = Number.POSITIVE_INFINITY
    }
  }

  get size(): number {
    return this.entries.size
  }

  private arm(): void {
    let next = Number.POSITIVE_INFINITY
    for (const entry of this.entries.values()) next = Math.min(next, entry.dueAt)
    if (next === Number.POSITIVE_INFINITY || next >= this.timerAt) return
    this.armAt(next)
  }

  private armAt(next: number): void {
    if (this.timer) clearTimeout(this.timer)
    this.timerAt = next
    this.timer = setTimeout(() => this.fire(), Math.max(0, next - Date.now()))
    this.timer.unref()
  }

  private fire(): void {
    this.timer = undefined
    this.timerAt = Number.POSITIVE_INFINITY
    const now = Date.now()
    const batches = new Map<RenewGroup, Map<number, Renewable[]>>()
    for (const [lease, entry] of this.entries) {
      if (entry.dueAt > now + BATCH_WINDOW_MS) continue
      if (lease.localDeadline <= now) {
        this.entries.delete(lease)
        lease.lose('it expired before it could be renewed')
        continue
      }
      entry.dueAt = Number.POSITIVE_INFINITY // in flight
      let byTtl = batches.get(lease.context)
      if (!byTtl) {
        byTtl = new Map()
        batches.set(lease.context, byTtl)
      }
      const batch = byTtl.get(lease.context.ttlMs)
      if (batch) batch.push(lease)
      else byTtl.set(lease.context.ttlMs, [lease])
    }
    for (const byTtl of batches.values()) for (const batch of byTtl.values()) void this.renewBatch(batch)
    this.arm()
  }

  private async renewBatch(batch: Renewable[]): Promise<void> {
    const first = batch[0] as Renewable
    try {
      const reply = await first.context.renewTokens(
        first.context.ttlMs,
        batch.map((lease) => ({ token: lease.token, op: lease.op })),
      )
      batch.forEach((lease, i) => {
        const entry = this.entries.get(lease)
        if (!entry) return // released meanwhile
        lease.applyRenewal(reply.now, reply.expiresAt[i] ?? 0)
        entry.failures = 0
        if (lease.active) entry.dueAt = dueAt(lease)
      })
    } catch (error) {
      debug('renewal of %s failed: %o', first.name, error)
      const now = Date.now()
      for (const lease of batch) {
        const entry = this.entries.get(lease)
        if (!entry) continue
        entry.failures++
        const retryIn = Math.min(RETRY_MAX_MS, RETRY_MIN_MS * 2 ** entry.failures)
        if (now + retryIn >= lease.localDeadline) {
          // One last try right before the deadline; after it, the lease is lost.
          entry.dueAt = Math.max(now, lease.localDeadline - 2 * RETRY_MIN_MS)
          if (entry.dueAt <= now) {
            this.entries.delete(lease)
            lease.lose('renewal kept failing until the lease expired', error)
          }
        } else {
          entry.dueAt = now + retryIn
        }
      }
    }
    this.arm()
  }
}

function dueAt(lease: Renewable): number {
  const now = Date.now()
  return now + Math.max(10, (lease.localDeadline - now) * RENEW_FRACTION)
}

export const renewals = new RenewalScheduler()
