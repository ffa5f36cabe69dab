// Permit keep-alive (opt-in, the gateway's `concurrency.keepAliveMs`): a finished request's lease is
// kept for the next request of its bucket in this process, as nginx's upstream `keepalive` keeps a
// connection, so a busy replica takes and gives back permits in the store only once per keepAliveMs
// per lease instead of once per request. What holds and what is traded (docs/gateway.md, "Permit
// keep-alive"):
// - G1 (the cap) holds: a kept lease is a live holder in the store, so requests in flight never
//   outnumber the store's holders, and a request only ever runs on a lease nobody else has.
// - G2 (crash) holds: a kept lease is renewed and expires like any other.
// - Fairness across processes is bounded, not strict: a lease serves requests of this process for at
//   most keepAliveMs after the store granted it, then goes back, so a waiter queued by another
//   replica can be passed over for at most about keepAliveMs. A waiter of this process is never
//   passed over: while one waits in the store's queue, finished leases go straight back.
// - Idle capacity is held for at most about keepAliveMs too: a kept lease not taken again goes back
//   when its time is up.
// - Fences are per lease, not per request, so an admission with keep-alive reports none.
import type { Lease } from '../core/client/lease.js'
import { PermitLease } from '../core/client/lease.js'

/** Kept leases are swept at most this often: one ends up to this late past its time when idle. */
const MIN_SWEEP_MS = 10

export class KeptPermits {
  /** Idle leases by bucket key; the last kept is taken first, so a quiet bucket's surplus ages out. */
  private readonly pools = new Map<string, PermitLease[]>()
  /** When each lease the store granted stops serving requests (Date.now() ms). */
  private readonly until = new WeakMap<Lease, number>()
  private count = 0
  private timer: NodeJS.Timeout | undefined
  private timerAt = Number.POSITIVE_INFINITY
  private closed = false
  /** Give-backs on their way to the store (close() waits for them). */
  private readonly returning = new Set<Promise<void>>()

  constructor(
    readonly keepAliveMs: number,
    /** Give a lease back to the store; the promise (never rejected) settles when it has it. */
    private readonly release: (lease: Lease) => Promise<void> | undefined,
  ) {}

  /** Leases kept right now. */
  get size(): number {
    return this.count
  }

  /** A lease the store just granted: it may serve requests until keepAliveMs from now. */
  granted(lease: Lease): void {
    this.until.set(lease, Date.now() + this.keepAliveMs)
  }

  /** A kept lease of the bucket, live and within its time; undefined when there is none. */
  take(key: string): Lease | undefined {
    const pool = this.pools.get(key)
    if (pool === undefined) return undefined
    const now = Date.now()
    let found: Lease | undefined
    while (found === undefined && pool.length > 0) {
      const lease = pool.pop() as PermitLease
      this.count--
      // Lost while kept (its store failed over, say): never handed out; given back, a no-op (G3).
      if (lease.active && (this.until.get(lease) ?? 0) > now) found = lease
      else this.giveBack(lease)
    }
    if (pool.length === 0) this.pools.delete(key)
    return found
  }

  /**
   * Keep a finished request's lease for its bucket's next request. False when it must go back now:
   * its time is up, it is lost, keep-alive is closed, or `waiting` (a request of this process waits
   * in the store's queue for this bucket, and must get the permit first).
   */
  keep(key: string, lease: Lease, waiting: boolean): boolean {
    if (this.closed || waiting || !(lease instanceof PermitLease) || !lease.active) return false
    const until = this.until.get(lease)
    if (until === undefined || until <= Date.now()) return false
    lease.clearLossListeners()
    const pool = this.pools.get(key)
    if (pool) pool.push(lease)
    else this.pools.set(key, [lease])
    this.count++
    if (until < this.timerAt) this.arm(until)
    return true
  }

  /** Give back every kept lease of the bucket (a request of this process is about to wait for one). */
  flush(key: string): void {
    const pool = this.pools.get(key)
    if (pool === undefined) return
    this.pools.delete(key)
    this.count -= pool.length
    for (const lease of pool) this.giveBack(lease)
  }

  /** Give back every kept lease, and keep none from now on (shutdown, or a reload retired the route).
   * Resolves when the store has every lease this ever gave back. */
  async close(): Promise<void> {
    this.closed = true
    clearTimeout(this.timer)
    this.timer = undefined
    this.timerAt = Number.POSITIVE_INFINITY
    for (const key of [...this.pools.keys()]) this.flush(key)
    await Promise.all(this.returning)
  }

  private giveBack(lease: Lease): void {
    const pending = this.release(lease)
    if (pending === undefined) return
    this.returning.add(pending)
    void pending.then(() => this.returning.delete(pending))
  }

  private arm(at: number): void {
    clearTimeout(this.timer)
    const now = Date.now()
    this.timerAt = Math.max(at, now + MIN_SWEEP_MS)
    this.timer = setTimeout(() => this.sweep(), this.timerAt - now).unref()
  }

  /** Give back the kept leases whose time is up; wake again for the next. */
  private sweep(): void {
    this.timer = undefined
    this.timerAt = Number.POSITIVE_INFINITY
    const now = Date.now()
    let next = Number.POSITIVE_INFINITY
    for (const [key, pool] of this.pools) {
      const live = pool.filter((lease) => {
        const until = this.until.get(lease) ?? 0
        if (until > now && lease.active) {
          next = Math.min(next, until)
          return true
        }
        this.count--
        this.giveBack(lease)
        return false
      })
      if (live.length === 0) this.pools.delete(key)
      else this.pools.set(key, live)
    }
    if (next !== Number.POSITIVE_INFINITY) this.arm(next)
  }
}
