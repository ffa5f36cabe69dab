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
//   replica can be passed over for at most about keepAliveMs. A request of this process waiting in
//   the store's queue is not passed over: while one waits, finished leases go straight back. (One
//   whose call is still on its way there can be, by requests arriving within that round trip.)
// - A limit lowered at run time (setPermits) reaches kept leases within keepAliveMs; the admin API
//   flushes its own replica's at once.
// - Idle capacity is held for at most about keepAliveMs too: a kept lease not taken again goes back
//   when its time is up.
// - Fences are per lease, not per request, so an admission with keep-alive reports none.
import type { Lease } from '../core/client/lease.js'
import { PermitLease } from '../core/client/lease.js'

/** Kept leases are swept at most this often: one ends up to this late past its time when idle. */
const MIN_SWEEP_MS = 10

/** A lease the store granted, in grant order (which is also the order of their `until`). */
interface Granted {
  lease: Lease
  key: string
  /** performance.now() ms past which the lease serves no request: a wall-clock step cannot move it. */
  until: number
}

export class KeptPermits {
  /** Idle leases by bucket key (a Set: taken in the order kept, removed by the sweep in O(1)). */
  private readonly pools = new Map<string, Set<PermitLease>>()
  private readonly until = new WeakMap<Lease, number>()
  /** Every lease granted within the last keepAliveMs, oldest first: the sweep pops expired ones from
   * the front, so it costs what expired, not what is kept. */
  private granted: Granted[] = []
  private head = 0
  private count = 0
  private timer: NodeJS.Timeout | undefined
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

  /** A lease the store just granted for bucket `key`: it may serve requests for keepAliveMs. */
  grant(key: string, lease: Lease): void {
    const now = performance.now()
    this.expire(now) // also bounds `granted` when nothing is kept and no sweep runs
    const until = now + this.keepAliveMs
    this.until.set(lease, until)
    this.granted.push({ lease, key, until })
  }

  /** A kept lease of the bucket, live and within its time; undefined when there is none. */
  take(key: string): Lease | undefined {
    const pool = this.pools.get(key)
    if (pool === undefined) return undefined
    const now = performance.now()
    let found: Lease | undefined
    for (const lease of pool) {
      pool.delete(lease)
      this.count--
      // Lost while kept (its store failed over, say): never handed out; given back, a no-op (G3).
      if (lease.active && (this.until.get(lease) ?? 0) > now) {
        found = lease
        break
      }
      this.giveBack(lease)
    }
    if (pool.size === 0) this.pools.delete(key)
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
    if (until === undefined || until <= performance.now()) return false
    lease.clearLossListeners()
    const pool = this.pools.get(key)
    if (pool) pool.add(lease)
    else this.pools.set(key, new Set([lease]))
    this.count++
    // Due at the oldest grant's time, which is no later than any kept lease's.
    if (this.timer === undefined) this.arm((this.granted[this.head] as Granted).until)
    return true
  }

  /** Give back every kept lease of the bucket (a request of this process is about to wait for one,
   * or its limit was just lowered). */
  flush(key: string): void {
    const pool = this.pools.get(key)
    if (pool === undefined) return
    this.pools.delete(key)
    this.count -= pool.size
    for (const lease of pool) this.giveBack(lease)
  }

  /** Give back every kept lease, and keep none from now on (shutdown, or a reload retired the route).
   * Resolves when the store has every lease this ever gave back. */
  async close(): Promise<void> {
    this.closed = true
    clearTimeout(this.timer)
    this.timer = undefined
    for (const key of [...this.pools.keys()]) this.flush(key)
    this.granted = []
    this.head = 0
    await Promise.all(this.returning)
  }

  private giveBack(lease: Lease): void {
    const pending = this.release(lease)
    if (pending === undefined) return
    this.returning.add(pending)
    void pending.then(() => this.returning.delete(pending))
  }

  /** Drop the grants whose time is up; a kept one among them goes back to the store. A lease in use
   * goes back when its request ends (keep() refuses it then). */
  private expire(now: number): void {
    const granted = this.granted
    while (this.head < granted.length && (granted[this.head] as Granted).until <= now) {
      const { lease, key } = granted[this.head] as Granted
      this.head++
      const pool = this.pools.get(key)
      if (pool?.delete(lease as PermitLease)) {
        this.count--
        if (pool.size === 0) this.pools.delete(key)
        this.giveBack(lease)
      }
    }
    // Compact once the dropped front is the larger half: amortised O(1) per grant.
    if (this.head > 1024 && this.head * 2 > granted.length) {
      this.granted = granted.slice(this.head)
      this.head = 0
    }
  }

  private arm(at: number): void {
    const now = performance.now()
    const next = Math.max(at, now + MIN_SWEEP_MS)
    this.timer = setTimeout(() => this.sweep(), next - now).unref()
  }

  /** Give back the kept leases whose time is up; wake again for the next one, while any is kept. */
  private sweep(): void {
    this.timer = undefined
    this.expire(performance.now())
    if (this.count === 0) return
    // The oldest grant left is the next to expire (in use or kept: arming early costs one idle wake).
    const next = this.granted[this.head]
    if (next !== undefined) this.arm(next.until)
  }
}
