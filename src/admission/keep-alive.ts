// Permit keep-alive (opt-in, the gateway's `concurrency.keepAliveMs`): a finished request's lease is
// kept for the next request of its bucket in this process, as nginx's upstream `keepalive` keeps a
// connection, so a busy replica takes and gives back permits in the store only once per keepAliveMs
// per lease instead of once per request. What holds and what is traded (docs/gateway/behaviour.md, "Permit
// keep-alive"):
// - G1 (the cap) holds: a kept lease is a live holder in the store, so requests in flight never
//   outnumber the store's holders, and a request only ever runs on a lease nobody else has.
// - G2 (crash) holds: a kept lease is renewed and expires like any other.
// - Fairness across processes is bounded, not strict: a lease serves requests of this process for at
//   most keepAliveMs after the store granted it, then goes back, so a waiter queued by another
//   replica can be passed over for at most about keepAliveMs (plus the duration of the request a
//   lease taken just before its time serves). A request of this process waiting in
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
  /** Dropped once the lease has gone back: a grant in the queue must not keep its lease alive. */
  lease: PermitLease | undefined
  key: string
  /** performance.now() ms past which the lease serves no request: a wall-clock step cannot move it. */
  until: number
  /** In its bucket's pool right now. */
  kept: boolean
}

/** A bucket's kept leases: a stack (the last kept is taken first, so a quiet bucket's surplus ages
 * out), from which the sweep removes lazily (it clears `kept`; take() skips such entries). */
interface Pool {
  stack: Granted[]
  live: number
}

export class KeptPermits {
  private readonly pools = new Map<string, Pool>()
  private readonly grants = new WeakMap<Lease, Granted>()
  /** Every grant of the last keepAliveMs, oldest first: the sweep pops expired ones from the front,
   * so it costs what expired, not what is kept. */
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
    if (this.closed || !(lease instanceof PermitLease)) return
    const now = performance.now()
    this.expire(now) // also bounds `granted` when nothing is kept and no sweep runs
    const entry: Granted = { lease, key, until: now + this.keepAliveMs, kept: false }
    this.grants.set(lease, entry)
    this.granted.push(entry)
  }

  /** A kept lease of the bucket, live and within its time; undefined when there is none. */
  take(key: string): Lease | undefined {
    const pool = this.pools.get(key)
    if (pool === undefined) return undefined
    const now = performance.now()
    let found: Lease | undefined
    while (found === undefined && pool.live > 0) {
      const entry = pool.stack.pop() as Granted
      if (!entry.kept) continue // swept meanwhile
      entry.kept = false
      pool.live--
      this.count--
      const lease = entry.lease as PermitLease
      // Lost while kept (its store failed over, say): never handed out; given back, a no-op (G3).
      if (lease.active && entry.until > now) found = lease
      else this.giveBack(entry)
    }
    if (pool.live === 0) this.pools.delete(key)
    return found
  }

  /**
   * Keep a finished request's lease for its bucket's next request. False when it must go back now
   * (the caller gives it back): its time is up, it is lost, keep-alive is closed, or `waiting` (a
   * request of this process waits in the store's queue for this bucket, and must get the permit
   * first).
   */
  keep(key: string, lease: Lease, waiting: boolean): boolean {
    const entry = this.grants.get(lease)
    if (entry === undefined) return false
    if (this.closed || waiting || !(lease as PermitLease).active || entry.until <= performance.now()) {
      entry.lease = undefined
      return false
    }
    ;(lease as PermitLease).clearLossListeners()
    entry.kept = true
    const pool = this.pools.get(key)
    if (pool) {
      pool.stack.push(entry)
      pool.live++
    } else this.pools.set(key, { stack: [entry], live: 1 })
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
    for (const entry of pool.stack) {
      if (!entry.kept) continue
      entry.kept = false
      this.count--
      this.giveBack(entry)
    }
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

  private giveBack(entry: Granted): void {
    const lease = entry.lease
    if (lease === undefined) return
    entry.lease = undefined
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
      const entry = granted[this.head] as Granted
      this.head++
      if (!entry.kept) continue
      entry.kept = false
      this.count--
      const pool = this.pools.get(entry.key)
      if (pool && --pool.live === 0) this.pools.delete(entry.key)
      // The stack keeps swept entries until take() reaches them: drop them once they outnumber the
      // live ones, so a pool that never empties cannot grow without bound.
      else if (pool && pool.stack.length > 2 * pool.live + 16) pool.stack = pool.stack.filter((e) => e.kept)
      this.giveBack(entry)
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
