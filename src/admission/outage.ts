// `outage: 'share'`: while the store is down, each replica admits its share of a bucket's limit in
// memory, instead of none (closed) or all (open), as Sentinel's cluster flow control falls back to
// local limits sized by the clients it knows of.
//
// - The share: the bucket's limit divided by the replicas last seen on the store, rounded down and
//   at least 1, so that the shares never add up to more than the limit (unless there are more
//   replicas than permits). The replicas are counted in the store: each process with a share-mode
//   policy holds one presence lease on the store's presence set, renewed every PRESENCE_EVERY_MS
//   (one call) and counted on the way (one more): 2 calls per PRESENCE_EVERY_MS per process, however
//   many policies and buckets, never one per request. Every process using the store counts, whatever
//   its policies (a share can only come out smaller than the fleet of one policy would give). A
//   process that never saw the store uses `outageShare` (or 1), and says so once.
// - Entering: at the first failed store call (StoreHealth). Requests waiting in the store's queue are
//   taken out of it and admitted here with what is left of their wait; a call on its way to a hung
//   store fails at the store's command timeout and comes here too.
// - Leaving, without admitting anything twice: the store's limit does not see what was admitted here.
//   Once the store answers again (StoreHealth probes every 100 ms in this mode), each process
//   reserves in the store the permits of each request still running here, and goes on admitting here
//   for the store's command timeout plus RECOVER_MS (the grace), each request only once it holds a
//   reserve (one a request of the grace left, or a new one); then it admits through the store again,
//   whose count by then holds every process's reserved requests (each noticed the store within a
//   command timeout, which a probe sent into the outage waits out, and a probe's interval). A
//   process that notices later than the grace runs its share on top of the others' until it does.
//   A request here whose reserve the store refused (permits still held by leases from before the
//   outage, until they expire, or waiters ahead) keeps this process here until it ends: nothing is
//   admitted on top of it. A store that fails again meanwhile starts over (hysteresis: a flapping
//   store keeps every process here).
import { randomBytes } from 'node:crypto'
import { AbortFlag, type AbortSignalLike, abortReason, onAbort } from '../core/abort.js'
import type { Lease } from '../core/client/lease.js'
import { keySpace } from '../core/keys.js'
import type { Store } from '../core/protocol/store.js'
import { createMemoryStore } from '../core/memory/store.js'
import type { StoreHealth } from './store-health.js'
import type { Logger } from './options.js'

/** How often a process renews its presence and counts the replicas. */
export const PRESENCE_EVERY_MS = 2000
/** A presence lease lasts this long: a process gone for 3 renewals is no longer counted. */
const PRESENCE_TTL_MS = 3 * PRESENCE_EVERY_MS
/** Permits of the presence set: more than any fleet has replicas. */
const PRESENCE_PERMITS = 1_000_000
/** How long the store must answer before this process admits through it again, beyond the store's
 * command timeout: every process notices the store within a command timeout (a probe sent into the
 * outage fails at it) and a probe's interval, and reserves what it runs then. */
export const RECOVER_MS = 300
/** The longest a reserve waits for its permits (a request here runs for less, as a rule). */
export const RESERVE_WAIT_MS = 60_000
/** How often a process whose requests wait in the store's queue checks that the store answers. */
const WATCH_MS = 200

/** A request admitted here, while it runs: its bucket, its weight, and its reserve in the store once
 * the store is back. */
export interface LocalHold {
  readonly key: string
  readonly weight: number
  reserve: Lease | undefined
  /** Ended: a reserve that comes after goes back at once. */
  ended: boolean
  /** Aborts its reserve's wait when it ends first. */
  readonly ends: AbortFlag
  reserving: boolean
}

export class OutageShare {
  /** Admitting here (the store is down, or not back for RECOVER_MS, or requests here unreserved). */
  local = false
  /** When this process last went local (Date.now()). */
  since = 0
  /** The memory store of the local gates. */
  readonly store: Store = createMemoryStore({ prefix: 'tollgate-outage' })
  /** Counts outages that began with nothing running here: the local gates (Admission's, per
   * bucket, made with the share in force when first used) are made anew for each. */
  generation = 0
  private recovering: NodeJS.Timeout | undefined
  /** Reserves that requests admitted here in the grace left, for the next ones (weight 1). */
  private readonly spare = new Map<string, Lease[]>()
  /** Requests admitted here still running. */
  private readonly running = new Set<LocalHold>()
  /** Of them, those without a reserve in the store. */
  private unreserved = 0
  /** Requests of the store's queue to move here when it goes down. */
  readonly waiting = new Set<() => void>()
  /** Requests waiting here, to move back to the store's queue when this process admits through it
   * again (admitted here then, they would run on top of the store's count). */
  readonly waitingHere = new Set<() => void>()
  private saidUnknown = false
  private closed = false
  private readonly unsubscribe: () => void
  private readonly presence: Presence
  private readonly watch: NodeJS.Timeout
  private asking = false

  constructor(
    private readonly shared: Store,
    private readonly name: string,
    private readonly health: StoreHealth,
    private readonly outageShare: number | undefined,
    private readonly logger: Logger,
    /** Reserve `weight` permits of a bucket in the store, queued ahead of any other request (its
     * highest class, in a fair queue); `signal` gives up. */
    private readonly reserveIn: (key: string, weight: number, signal: AbortSignalLike) => Promise<Lease>,
    /** Whether requests of this process wait in the store's queue right now. */
    private readonly waits: () => boolean,
  ) {
    health.fastProbe()
    this.unsubscribe = health.onChange((down) => (down ? this.down() : this.up()))
    this.presence = presenceOf(shared)
    if (health.down) this.down()
    this.watch = setInterval(() => this.check(), WATCH_MS)
    this.watch.unref()
  }

  /** A process whose requests all wait in the store's queue makes no call that could fail: it would
   * never notice a hung store, and would admit the grants that come when it resumes on top of the
   * others' shares. While it has waiters, it asks the store every WATCH_MS (one call at a time). */
  private check(): void {
    if (this.asking || this.health.down || !this.waits()) return
    this.asking = true
    this.shared.permits
      .inspect(keySpace(this.shared.prefix, 'presence', 'replicas'))
      .catch((error: unknown) => this.health.failed(error, this.logger))
      .finally(() => {
        this.asking = false
      })
  }

  /** Replicas last counted on the store; undefined until counted once. */
  get replicas(): number | undefined {
    return this.presence.replicas
  }

  /** This process's share of a bucket of `limit` permits. */
  share(limit: number): number {
    if (this.replicas === undefined) return this.outageShare ?? 1
    return Math.max(1, Math.floor(limit / Math.max(1, this.replicas)))
  }

  /** A bucket's local gate is made now, with share(): said once when the replicas are unknown. */
  sharing(): void {
    if (this.replicas !== undefined || this.saidUnknown) return
    this.saidUnknown = true
    this.logger.warn(
      `tollgate: store down and never seen: admitting outageShare (${this.outageShare ?? 1}) per bucket`,
      { name: this.name },
    )
  }

  /** A request admitted here (of bucket `key`, counting `weight`); reserved at once when the store is
   * back. Hand the hold to released() when it ends. */
  admitted(key: string, weight: number, reserve?: Lease): LocalHold {
    const hold: LocalHold = {
      key,
      weight,
      reserve,
      ended: false,
      ends: new AbortFlag(),
      reserving: false,
    }
    this.running.add(hold)
    if (!reserve) this.unreserved++
    if (!reserve && !this.health.down && this.recovering) void this.reserve(hold)
    return hold
  }

  /** The store answers again and this process still admits here (for the grace that lets every
   * process reserve what it runs): what it admits now must be counted in the store before it
   * runs, or a process that already admits through the store could fill the limit beside it. */
  get inGrace(): boolean {
    return this.local && !this.health.down && this.recovering !== undefined
  }

  /** In the grace: the reserve a request admitted here runs under, taken before it runs (one a
   * reserved request left, or a new one from the store's queue, within `timeoutMs`); undefined when
   * none came in time. */
  async reserveFirst(
    key: string,
    weight: number,
    signal: AbortSignalLike,
    timeoutMs: number,
  ): Promise<Lease | undefined> {
    const spare = weight === 1 ? this.spare.get(key)?.pop() : undefined
    if (spare) return spare
    const gives = new AbortFlag()
    const unwatch = onAbort(signal, () => gives.abort(abortReason(signal)))
    const timer = setTimeout(() => gives.abort(new Error('timeout')), Math.max(1, timeoutMs))
    try {
      return await this.reserveIn(key, weight, gives)
    } catch {
      return undefined
    } finally {
      clearTimeout(timer)
      unwatch()
    }
  }

  /** A request admitted here ended: its reserve (if any) goes back. */
  released(hold: LocalHold): void {
    if (hold.ended) return
    hold.ended = true
    hold.ends.abort(new Error('ended'))
    this.running.delete(hold)
    if (!hold.reserve) this.unreserved--
    else if (this.inGrace && hold.weight === 1) {
      // Kept for the next request admitted here in the grace (reserveFirst()).
      const spare = this.spare.get(hold.key) ?? []
      spare.push(hold.reserve)
      this.spare.set(hold.key, spare)
    } else hold.reserve.release().catch(() => undefined)
    this.settle()
  }

  /** Requests admitted here still running. */
  get inFlight(): number {
    return this.running.size
  }

  close(): void {
    if (this.closed) return
    this.closed = true
    this.unsubscribe()
    clearInterval(this.watch)
    this.presence.leave()
    clearTimeout(this.recovering)
  }

  private down(): void {
    clearTimeout(this.recovering)
    this.recovering = undefined
    // Spare reserves cannot go back while the store is down: they expire with their leases.
    this.spare.clear()
    if (!this.local) {
      this.local = true
      this.since = Date.now()
      if (this.inFlight === 0) this.generation++
      this.logger.warn('tollgate: store down: admitting this replica’s share in memory', {
        name: this.name,
        replicas: this.replicas,
      })
    }
    for (const move of [...this.waiting]) move()
  }

  private up(): void {
    if (!this.local) return
    // Reserve what runs here now, then admit here RECOVER_MS more (reserving those too).
    for (const hold of this.running) void this.reserve(hold)
    clearTimeout(this.recovering)
    this.recovering = setTimeout(
      () => {
        this.recovering = undefined
        this.settle(true)
      },
      RECOVER_MS + (this.shared.commandTimeoutMs ?? 0),
    )
    this.recovering.unref()
  }

  /** Back to the store once it has answered RECOVER_MS and every request here is reserved. */
  private settle(graceOver = false): void {
    if (!this.local || this.health.down) return
    if (this.recovering && !graceOver) return
    if (this.unreserved > 0) return
    this.local = false
    for (const spares of this.spare.values())
      for (const lease of spares) lease.release().catch(() => undefined)
    this.spare.clear()
    for (const move of [...this.waitingHere]) move()
    this.logger.warn('tollgate: store back: admitting through it again', {
      name: this.name,
      outageMs: Date.now() - this.since,
    })
  }

  /** Reserve `hold`'s permits in the store, in its queue at the highest class: ahead of every
   * request any process sends it once it admits through the store again (after RECOVER_MS), so that
   * what is admitted there never takes the room of what runs here. Until granted (the store still
   * counts leases from before the outage, until they expire), this process stays here. */
  private async reserve(hold: LocalHold): Promise<void> {
    if (hold.reserve || hold.ended || hold.reserving) return
    hold.reserving = true
    let lease: Lease | undefined
    try {
      lease = await this.reserveIn(hold.key, hold.weight, hold.ends)
    } catch {
      return // it ended first, or the store failed again (down() follows)
    } finally {
      hold.reserving = false
    }
    if (hold.ended) {
      lease.release().catch(() => undefined) // it ended meanwhile
      return
    }
    hold.reserve = lease
    this.unreserved--
    this.settle()
  }
}

/** A process's presence on a store, shared by its share-mode policies (see the top of this file). */
class Presence {
  replicas: number | undefined = undefined
  users = 0
  private readonly token = randomBytes(9).toString('base64url')
  private held = false
  private timer: NodeJS.Timeout | undefined

  constructor(private readonly store: Store) {}

  join(): void {
    if (this.users++ === 0) void this.tick()
  }

  leave(): void {
    if (--this.users > 0) return
    clearTimeout(this.timer)
    this.timer = undefined
    if (this.held) {
      this.held = false
      const space = keySpace(this.store.prefix, 'presence', 'replicas')
      this.store.permits.release(space, this.token, PRESENCE_PERMITS).catch(() => undefined)
    }
  }

  private async tick(): Promise<void> {
    const space = keySpace(this.store.prefix, 'presence', 'replicas')
    const { permits } = this.store
    try {
      if (this.held) {
        const reply = await permits.renew(space, PRESENCE_TTL_MS, [{ token: this.token }])
        this.held = (reply.expiresAt[0] ?? 0) > 0
      }
      if (!this.held) {
        const reply = await permits.acquire(space, {
          token: this.token,
          ttlMs: PRESENCE_TTL_MS,
          permits: PRESENCE_PERMITS,
          enqueue: false,
          waiterTtlMs: PRESENCE_TTL_MS,
        })
        this.held = reply.granted
      }
      this.replicas = Math.max(1, (await permits.inspect(space)).holders)
    } catch {
      // The store is down: the last count stands.
    }
    if (this.users === 0) return
    this.timer = setTimeout(() => void this.tick(), PRESENCE_EVERY_MS)
    this.timer.unref()
  }
}

const presences = new WeakMap<Store, Presence>()

/** This process's presence on `store`, joined (leave() when done). */
function presenceOf(store: Store): Presence {
  let presence = presences.get(store)
  if (!presence) {
    presence = new Presence(store)
    presences.set(store, presence)
  }
  presence.join()
  return presence
}
