// Lease renewal: each lease renews at a third of its remaining time, and leases of one primitive
// due together go out in one batched store call (at most MAX_RENEW_BATCH).
import { debuglog } from 'node:util'
import { monoNow } from '../clock.js'
import type { Acquisition, RenewReply } from '../protocol/store.js'

const debug = debuglog('tollgate:renewal')

/** Renew at a third of the remaining lease (Redisson's watchdog rhythm). */
const RENEW_FRACTION = 1 / 3
/** Leases due within this window of each other go out in the same batch. */
const BATCH_WINDOW_MS = 25
/** Most leases one renewal call carries. Each costs ~1.3-2.3 µs of Redis time (docs/cost.md: 10,000
 * leases of one reentrant owner renewed in calls of 200, commandstats of FCALL; a call of 500 ran up
 * to 1.7 ms by SLOWLOG), so a call stays under a millisecond whatever a process holds: 10,000 leases
 * of one name are 50 calls, never one call that stalls Redis for every other client. */
export const MAX_RENEW_BATCH = 200
const RETRY_MIN_MS = 50
const RETRY_MAX_MS = 1000

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
  /** Local monotonic ms (clock.ts) by which the lease has surely not run out on the store, less the
   * drift margin: the moment it is given up unless a renewal confirmed more. */
  readonly localDeadline: number
  /** Whether the deadline has passed (on the monotonic clock at `now`, or on the wall clock: the
   * monotonic one stops while the machine is suspended). */
  pastDeadline(now: number): boolean
  /** A renewal asked at `askedAt` (local) came back: the store's clock then, and the new expiry (0:
   * the lease is gone). */
  applyRenewal(askedAt: number, now: number, expiresAt: number): void
  lose(reason: string, cause?: unknown): void
}

interface Entry {
  readonly lease: Renewable
  /** When the next renewal goes out (local ms); ignored while one is in flight. */
  dueAt: number
  inFlight: boolean
  failures: number
  /** The last renewal error, reported as the loss's cause. */
  error: unknown
  /** When this entry next needs the timer: its renewal, or its deadline while one is in flight. */
  key: number
  /** Position in the heap (-1 once out). */
  at: number
}

/**
 * One process-wide scheduler for every auto-renewed lease: one unref'd timer, batched calls (one store
 * call renews all due leases of one name and ttl), a failed renewal retried with backoff.
 *
 * G4: the deadline is watched whatever the network does. Each lease's next event is its renewal,
 * or, while a renewal is in flight, its deadline; the timer fires at the earliest of all, so a lease
 * whose renewal hangs (a partition: the call waits out commandTimeoutMs) or whose replies never come
 * is declared lost at its deadline, not when the call gives up. Deadlines count from when the call
 * that confirmed them was asked (clock.ts localDeadline), so a reply held back in the network never
 * stretches one. The entries sit in a binary heap by next event: adding, removing and firing cost
 * O(log n) each, whatever the number of leases held. No timer callback ever throws.
 */
export class RenewalScheduler {
  private readonly entries = new Map<Renewable, Entry>()
  private readonly heap: Entry[] = []
  private timer: NodeJS.Timeout | undefined
  private timerAt = Number.POSITIVE_INFINITY

  add(lease: Renewable): void {
    const entry: Entry = {
      lease,
      dueAt: dueAt(lease, monoNow()),
      inFlight: false,
      failures: 0,
      error: undefined,
      key: 0,
      at: -1,
    }
    entry.key = keyOf(entry)
    this.entries.set(lease, entry)
    this.push(entry)
    this.arm()
  }

  delete(lease: Renewable): void {
    const entry = this.entries.get(lease)
    if (!entry) return
    this.entries.delete(lease)
    this.remove(entry)
    if (this.entries.size === 0 && this.timer) {
      clearTimeout(this.timer)
      this.timer = undefined
      this.timerAt = Number.POSITIVE_INFINITY
    }
  }

  /** The lease's deadline moved (a renewal outside the scheduler confirmed it): re-place it. */
  moved(lease: Renewable): void {
    const entry = this.entries.get(lease)
    if (!entry) return
    this.rekey(entry)
    this.arm()
  }

  get size(): number {
    return this.entries.size
  }

  private arm(): void {
    const next = this.heap[0]?.key ?? Number.POSITIVE_INFINITY
    if (next === this.timerAt) return
    if (this.timer) clearTimeout(this.timer)
    this.timer = undefined
    this.timerAt = next
    if (next === Number.POSITIVE_INFINITY) return
    this.timer = setTimeout(() => this.fire(), Math.max(0, Math.ceil(next - monoNow())))
    this.timer.unref()
  }

  private fire(): void {
    this.timer = undefined
    this.timerAt = Number.POSITIVE_INFINITY
    const now = monoNow()
    const batches = new Map<RenewGroup, Map<number, Renewable[]>>()
    // Everything whose next event is due (renewals: within the batch window) leaves the heap; what
    // is not done with goes back in with its new key. Losses are reported last, once the heap is
    // whole again: a loss runs the user's callbacks, which may release other leases.
    const taken: Entry[] = []
    while (this.heap.length > 0 && (this.heap[0] as Entry).key <= now + BATCH_WINDOW_MS) {
      taken.push(this.pop())
    }
    const lost: Entry[] = []
    for (const entry of taken) {
      const { lease } = entry
      if (lease.pastDeadline(now)) {
        this.entries.delete(lease)
        lost.push(entry)
        continue
      }
      if (!entry.inFlight && entry.dueAt <= now + BATCH_WINDOW_MS) {
        entry.inFlight = true
        let byTtl = batches.get(lease.context)
        if (!byTtl) {
          byTtl = new Map()
          batches.set(lease.context, byTtl)
        }
        const batch = byTtl.get(lease.context.ttlMs)
        if (batch) batch.push(lease)
        else byTtl.set(lease.context.ttlMs, [lease])
      }
      entry.key = keyOf(entry)
      this.push(entry)
    }
    this.arm()
    for (const byTtl of batches.values()) {
      for (const batch of byTtl.values()) {
        for (let at = 0; at < batch.length; at += MAX_RENEW_BATCH) {
          void this.renewBatch(
            batch.length <= MAX_RENEW_BATCH ? batch : batch.slice(at, at + MAX_RENEW_BATCH),
          )
        }
      }
    }
    for (const { lease, inFlight, failures, error } of lost) {
      lease.lose(
        inFlight
          ? 'no renewal was confirmed before its deadline (the store did not answer in time)'
          : failures > 0
            ? 'renewal kept failing until its deadline'
            : 'it expired before it could be renewed',
        error,
      )
    }
  }

  private async renewBatch(batch: Renewable[]): Promise<void> {
    const first = batch[0] as Renewable
    const askedAt = monoNow()
    try {
      const reply = await first.context.renewTokens(
        first.context.ttlMs,
        batch.map((lease) => ({ token: lease.token, op: lease.op })),
      )
      batch.forEach((lease, i) => {
        // Also for a lease released or lost meanwhile: it knows what a late reply means for it.
        lease.applyRenewal(askedAt, reply.now, reply.expiresAt[i] ?? 0)
        const entry = this.entries.get(lease)
        if (!entry) return // released or lost, before or by this reply
        entry.inFlight = false
        entry.failures = 0
        entry.error = undefined
        entry.dueAt = dueAt(lease, monoNow())
        this.rekey(entry)
      })
    } catch (error) {
      debug('renewal of %s failed: %o', first.name, error)
      const now = monoNow()
      for (const lease of batch) {
        const entry = this.entries.get(lease)
        if (!entry) continue
        entry.inFlight = false
        entry.failures++
        entry.error = error
        // Retry with backoff, and once more shortly before the deadline (which is watched anyway).
        const retryAt = now + Math.min(RETRY_MAX_MS, RETRY_MIN_MS * 2 ** entry.failures)
        entry.dueAt = Math.max(now, Math.min(retryAt, lease.localDeadline - 2 * RETRY_MIN_MS))
        this.rekey(entry)
      }
    }
    this.arm()
  }

  private rekey(entry: Entry): void {
    if (entry.at < 0) return
    entry.key = keyOf(entry)
    this.up(entry.at)
    this.down(entry.at)
  }

  // A binary min-heap of entries by key, each entry knowing its position.
  private push(entry: Entry): void {
    entry.at = this.heap.length
    this.heap.push(entry)
    this.up(entry.at)
  }

  private pop(): Entry {
    const top = this.heap[0] as Entry
    this.remove(top)
    return top
  }

  private remove(entry: Entry): void {
    const i = entry.at
    if (i < 0) return
    const last = this.heap.pop() as Entry
    entry.at = -1
    if (last === entry) return
    this.heap[i] = last
    last.at = i
    this.up(i)
    this.down(i)
  }

  private up(i: number): void {
    const heap = this.heap
    const entry = heap[i] as Entry
    while (i > 0) {
      const parent = (i - 1) >> 1
      const above = heap[parent] as Entry
      if (above.key <= entry.key) break
      heap[i] = above
      above.at = i
      i = parent
    }
    heap[i] = entry
    entry.at = i
  }

  private down(i: number): void {
    const heap = this.heap
    const n = heap.length
    const entry = heap[i] as Entry
    for (;;) {
      let child = 2 * i + 1
      if (child >= n) break
      if (child + 1 < n && (heap[child + 1] as Entry).key < (heap[child] as Entry).key) child++
      const below = heap[child] as Entry
      if (below.key >= entry.key) break
      heap[i] = below
      below.at = i
      i = child
    }
    heap[i] = entry
    entry.at = i
  }
}

/** The next renewal: at a third of the time left until the deadline. */
function dueAt(lease: Renewable, now: number): number {
  return now + Math.max(10, (lease.localDeadline - now) * RENEW_FRACTION)
}

/** When an entry next needs the timer: its deadline, or its renewal if that comes first and none is
 * in flight. */
function keyOf(entry: Entry): number {
  const deadline = entry.lease.localDeadline
  return entry.inFlight ? deadline : Math.min(entry.dueAt, deadline)
}

export const renewals = new RenewalScheduler()
