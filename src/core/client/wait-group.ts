// The waiters of one name in this process: one subscription for their wake-ups, one batched
// heartbeat, and re-checks when notifications are down or a holder's lease runs out.
import { debuglog } from 'node:util'
import { localDeadline, monoNow } from '../clock.js'
import type { KeySpace } from '../keys.js'
import type { Grant, RecheckReply, Store, Unsubscribe, Acquisition } from '../protocol/store.js'

const debug = debuglog('tollgate:wait')

/** While notifications are down, waiters re-check with this backoff instead (G10 fallback). */
const BACKOFF_MIN_MS = 25
const BACKOFF_MAX_MS = 1000
/** An idle group keeps its subscription this long, so bursts of contention do not churn SUBSCRIBE. */
const LINGER_MS = 5000
/** Grants kept for waiters that have not registered yet. */
const MAX_UNCLAIMED = 1024
/** A lease that just expired on the server is re-checked this long after its expiry. */
const EXPIRY_SLACK_MS = 2
/** The smallest clock-offset sample is kept this long (a later, larger one replaces it after that). */
const OFFSET_WINDOW_MS = 5000

/** Who heart-beats a waiter, and how often: the primitive that queued it, with its own options. */
export interface WaitClient {
  readonly waiterTtlMs: number
  /** One batched call that heart-beats these waits and reports their state. */
  recheckWaits(waits: readonly Acquisition[]): Promise<RecheckReply>
}

/**
 * A local waiter: one acquisition waiting in the queue, settled once: by a grant (message or
 * re-check), told that it fell out of the queue, or (a fair queue) that it was shed. It is known by its acquisition id, which no other wait ever has
 * (G12): a grant reaches the wait it was made for, once, and a copy of an earlier grant of the same
 * owner (a reply and a pub/sub message both carry it) can never settle a later wait.
 */
export interface Waiter {
  readonly token: string
  /** The acquisition id: the token itself for a fresh token. */
  readonly op: string
  readonly client: WaitClient
  grant: Grant | undefined
  /** With a grant: the local deadline (clock.ts) of its lease. */
  deadline: number
  gone: boolean
  /** Evicted from a fair queue by a higher class (a "<token> x" line or a re-check): never granted. */
  shed: boolean
  /** Called whenever grant, gone or shed changes. */
  wake: () => void
}

/**
 * The waiters of one name in this process. One subscription, one timer and one batched re-check
 * call per name, whatever the number of local waiters: a blocked waiter costs ~0 commands (G10).
 * The timer fires at the earliest of: the current holders' lease expiry (a lost wake-up is caught
 * there), the waiters' heartbeat interval, or a backoff while notifications are down.
 */
export class WaitGroup {
  /** Local waiters by acquisition id. */
  readonly waiters = new Map<string, Waiter>()
  /** Waiters per client: each is heart-beaten by its own client, on its own schedule. */
  private readonly clients = new Map<WaitClient, number>()
  /** Resolves once grants published from now on will reach us. */
  readonly subscribed: Promise<void>
  isSubscribed = false
  private unsubscribe: Unsubscribe | undefined
  private timer: NodeJS.Timeout | undefined
  private timerAt = Number.POSITIVE_INFINITY
  private nextExpiryLocal = 0
  private backoffMs = BACKOFF_MIN_MS
  private checking = false
  /** Grants, by acquisition id, that nobody here waits for (yet): other processes' waiters, or ours
   * racing ahead of the reply that queued them. */
  private readonly unclaimed = new Map<string, Grant>()
  /** Shed tokens nobody here waits for (yet), as `unclaimed`. */
  private readonly unclaimedShed = new Set<string>()
  /** A re-check was asked for while one was running: run again right after it. */
  private rerun = false
  private linger: NodeJS.Timeout | undefined
  /** The store's clock minus the local monotonic one, for this name: an upper bound, the smallest
   * `now - askedAt` of recent replies to calls for this name (acquires that queued, re-checks). Per
   * name, not per store: the masters of a Cluster each have their own clock, and a name lives on one.
   * Infinity until a first sample (a grant then counts as run out, and is given back). */
  private offset = Number.POSITIVE_INFINITY
  private offsetAt = Number.NEGATIVE_INFINITY

  constructor(
    private readonly store: Store,
    private readonly space: KeySpace,
    private readonly dispose: () => void,
  ) {
    this.subscribed = store
      .subscribe(
        space,
        (grant) => this.onGrant(grant),
        (token) => this.onShed(token),
      )
      .then((unsubscribe) => {
        this.unsubscribe = unsubscribe
        this.isSubscribed = true
        if (this.waiters.size === 0) this.idle()
      })
      .catch((error: unknown) => debug('subscription of %s failed: %o', space.name, error))
  }

  /** A call for this name asked at `askedAt` (local) ran when the store's clock read `storeNow`. */
  sample(askedAt: number, storeNow: number): void {
    const offset = storeNow - askedAt
    const now = monoNow()
    if (offset <= this.offset || now - this.offsetAt > OFFSET_WINDOW_MS) {
      this.offset = offset
      this.offsetAt = now
    }
  }

  /** Register a waiter (a grant for it that arrived first is taken now). */
  add(waiter: Waiter): void {
    clearTimeout(this.linger)
    this.linger = undefined
    this.waiters.set(waiter.op, waiter)
    this.clients.set(waiter.client, (this.clients.get(waiter.client) ?? 0) + 1)
    const early = this.unclaimed.get(waiter.op)
    if (early) {
      this.unclaimed.delete(waiter.op)
      if (early.token === waiter.token && !waiter.grant) this.settle(waiter, early)
    }
    if (this.unclaimedShed.delete(waiter.token) && !settled(waiter)) waiter.shed = true
  }

  /** Unregister a waiter; a no-op for one that is not registered. */
  remove(waiter: Waiter): void {
    if (this.waiters.get(waiter.op) !== waiter) return
    this.waiters.delete(waiter.op)
    const left = (this.clients.get(waiter.client) ?? 1) - 1
    if (left > 0) this.clients.set(waiter.client, left)
    else this.clients.delete(waiter.client)
    if (this.waiters.size === 0) this.idle()
  }

  private idle(): void {
    if (this.timer) clearTimeout(this.timer)
    this.timer = undefined
    this.timerAt = Number.POSITIVE_INFINITY
    clearTimeout(this.linger)
    this.linger = setTimeout(() => this.close(), LINGER_MS).unref()
  }

  /** The store said when the current holders' leases end (store clock, 0 = none). */
  hint(nextExpiry: number, storeNow: number): void {
    this.nextExpiryLocal = nextExpiry > 0 ? monoNow() + (nextExpiry - storeNow) + EXPIRY_SLACK_MS : 0
    this.schedule()
  }

  /** Re-check as soon as possible (e.g. right after the subscription became active). */
  recheckSoon(): void {
    this.arm(monoNow())
  }

  private onGrant(grant: Grant): void {
    const waiter = this.waiters.get(grant.op)
    if (!waiter || waiter.token !== grant.token) {
      // Possibly ours, arriving before the waiter registered (its queued reply came on another
      // connection): keep a bounded number of such grants for add() to find. A copy of a grant that
      // was already taken stays here unclaimed: no later wait has its acquisition id.
      this.unclaimed.set(grant.op, grant)
      if (this.unclaimed.size > MAX_UNCLAIMED)
        this.unclaimed.delete(this.unclaimed.keys().next().value as string)
      return
    }
    if (settled(waiter)) return
    this.settle(waiter, grant)
    waiter.wake()
  }

  /** A fair queue evicted `token` (only fresh tokens have a discipline: the token is the acquisition
   * id). A line for a waiter not registered yet is kept for add(), as grants are. */
  private onShed(token: string): void {
    const waiter = this.waiters.get(token)
    if (!waiter || waiter.token !== token) {
      this.unclaimedShed.add(token)
      if (this.unclaimedShed.size > MAX_UNCLAIMED)
        this.unclaimedShed.delete(this.unclaimedShed.values().next().value as string)
      return
    }
    if (settled(waiter)) return
    waiter.shed = true
    waiter.wake()
  }

  /** Hand a grant from a message to a waiter. A message says when the lease ends on the store's clock
   * but not when it was sent: its local deadline comes from this name's clock offset, an upper bound
   * (see `offset`), so it is never late (G4). */
  private settle(waiter: Waiter, grant: Grant): void {
    const now = monoNow()
    waiter.grant = grant
    waiter.deadline = localDeadline(now, now + this.offset, grant.expiresAt)
  }

  /** The shortest heartbeat ttl among the clients with waiters here. */
  private heartbeatTtl(): number {
    let ttl = Number.POSITIVE_INFINITY
    for (const client of this.clients.keys()) ttl = Math.min(ttl, client.waiterTtlMs)
    return ttl
  }

  private schedule(): void {
    if (this.waiters.size === 0) return
    const now = monoNow()
    let at = now + this.heartbeatTtl() / 3
    if (this.nextExpiryLocal > 0) at = Math.min(at, this.nextExpiryLocal)
    if (!this.store.notificationsHealthy || !this.isSubscribed) {
      at = Math.min(at, now + this.backoffMs)
      this.backoffMs = Math.min(BACKOFF_MAX_MS, this.backoffMs * 2)
    } else {
      this.backoffMs = BACKOFF_MIN_MS
    }
    this.arm(at)
  }

  private arm(at: number): void {
    if (this.timer && at >= this.timerAt) return
    if (this.timer) clearTimeout(this.timer)
    this.timerAt = at
    this.timer = setTimeout(() => void this.recheck(), Math.max(0, at - monoNow()))
  }

  private async recheck(): Promise<void> {
    this.timer = undefined
    this.timerAt = Number.POSITIVE_INFINITY
    if (this.waiters.size === 0) return
    if (this.checking) {
      this.rerun = true
      return
    }
    this.checking = true
    // Each client heart-beats its own waiters, with its own options (one call per client; usually one).
    const byClient = new Map<WaitClient, Waiter[]>()
    for (const waiter of this.waiters.values()) {
      if (settled(waiter)) continue
      const list = byClient.get(waiter.client)
      if (list) list.push(waiter)
      else byClient.set(waiter.client, [waiter])
    }
    try {
      let nextExpiryLocal = 0
      for (const [client, waiters] of byClient) {
        const askedAt = monoNow()
        const reply = await client.recheckWaits(
          waiters.map(({ token, op }) => ({ token, op: op === token ? undefined : op })),
        )
        this.sample(askedAt, reply.now)
        reply.states.forEach((state, i) => {
          const waiter = waiters[i] as Waiter
          if (settled(waiter)) return
          if (state.state === 'granted') {
            waiter.grant = {
              token: waiter.token,
              op: waiter.op,
              fence: state.fence,
              expiresAt: state.expiresAt,
            }
            waiter.deadline = localDeadline(askedAt, reply.now, state.expiresAt)
            waiter.wake()
          } else if (state.state === 'gone') {
            waiter.gone = true
            waiter.wake()
          } else if (state.state === 'shed') {
            waiter.shed = true
            waiter.wake()
          }
        })
        if (reply.nextExpiry > 0) {
          const at = monoNow() + (reply.nextExpiry - reply.now) + EXPIRY_SLACK_MS
          nextExpiryLocal = nextExpiryLocal === 0 ? at : Math.min(nextExpiryLocal, at)
        }
      }
      if (byClient.size > 0) this.nextExpiryLocal = nextExpiryLocal
    } catch (error) {
      if ((this.store as { closed?: boolean }).closed) {
        // The store was closed: let every waiter try once more, which fails them with the store's error.
        for (const waiter of this.waiters.values()) {
          waiter.gone = true
          waiter.wake()
        }
        return
      }
      // The store is down: keep waiting (the caller's timeout still applies) and try again later.
      debug('re-check of %s failed: %o', this.space.name, error)
      this.nextExpiryLocal = 0
      this.backoffMs = Math.min(BACKOFF_MAX_MS, this.backoffMs * 2)
      this.arm(monoNow() + this.backoffMs)
    } finally {
      this.checking = false
    }
    if (this.rerun) {
      this.rerun = false
      this.arm(monoNow())
    }
    this.schedule()
  }

  private close(): void {
    if (this.waiters.size > 0 || !this.isSubscribed) return
    this.unsubscribe?.()
    this.unsubscribe = undefined
    this.dispose()
  }
}

/** A waiter is settled once: granted, gone or shed. */
function settled(waiter: Waiter): boolean {
  return waiter.grant !== undefined || waiter.gone || waiter.shed
}

const rooms = new WeakMap<Store, Map<string, WaitGroup>>()

/** The wait group of a name in this process, created (and subscribed) on first use. */
export function waitGroup(store: Store, space: KeySpace): WaitGroup {
  let room = rooms.get(store)
  if (!room) {
    room = new Map()
    rooms.set(store, room)
  }
  let group = room.get(space.channel)
  if (!group) {
    const created: WaitGroup = new WaitGroup(store, space, () => {
      if (room?.get(space.channel) === created) room.delete(space.channel)
    })
    group = created
    room.set(space.channel, group)
  }
  return group
}
