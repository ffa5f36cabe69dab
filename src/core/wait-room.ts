import { debuglog } from 'node:util'
import type { KeySpace } from './keys.js'
import type { Grant, RecheckReply, Store, Unsubscribe } from './store.js'

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

/** A local waiter: settled by a grant (message or re-check) or told that it fell out of the queue. */
export interface Waiter {
  readonly token: string
  grant: Grant | undefined
  gone: boolean
  /** Grants with a fence at or below this predate the wait (late messages about an earlier grant to
   * the same reentrant token) and are ignored. */
  afterFence: number
  /** Called whenever grant or gone changes. */
  wake: () => void
}

/**
 * The waiters of one name in this process. One subscription, one timer and one batched re-check
 * call per name, whatever the number of local waiters: a blocked waiter costs ~0 commands (G10).
 * The timer fires at the earliest of: the current holders' lease expiry (a lost wake-up is caught
 * there), the waiters' heartbeat interval, or a backoff while notifications are down.
 */
export class WaitGroup {
  /** Local waiters by token; several when one reentrant owner waits in several calls at once. */
  readonly waiters = new Map<string, Waiter[]>()
  /** Resolves once grants published from now on will reach us. */
  readonly subscribed: Promise<void>
  isSubscribed = false
  private unsubscribe: Unsubscribe | undefined
  private timer: NodeJS.Timeout | undefined
  private timerAt = Number.POSITIVE_INFINITY
  private nextExpiryLocal = 0
  private backoffMs = BACKOFF_MIN_MS
  private checking = false
  /** Grants for tokens nobody here waits for (yet): other processes' waiters, or ours racing ahead. */
  private readonly unclaimed = new Map<string, Grant>()
  /** A re-check was asked for while one was running: run again right after it. */
  private rerun = false
  private linger: NodeJS.Timeout | undefined
  waiterTtlMs = 10_000
  /** One batched call that heart-beats these tokens and reports their state (set by the primitive). */
  recheckTokens: (tokens: readonly string[]) => Promise<RecheckReply> = async () => {
    throw new Error('no re-check set for this wait group')
  }

  constructor(
    private readonly store: Store,
    private readonly space: KeySpace,
    private readonly dispose: () => void,
  ) {
    this.subscribed = store
      .subscribe(space, (grant) => this.onGrant(grant))
      .then((unsubscribe) => {
        this.unsubscribe = unsubscribe
        this.isSubscribed = true
        if (this.waiters.size === 0) this.idle()
      })
      .catch((error: unknown) => debug('subscription of %s failed: %o', space.name, error))
  }

  /** Register a waiter. Several waiters may share a token (one reentrant owner acquiring in several
   * calls at once): a grant for the token wakes each of them. */
  add(waiter: Waiter): void {
    clearTimeout(this.linger)
    this.linger = undefined
    const list = this.waiters.get(waiter.token)
    if (list) list.push(waiter)
    else this.waiters.set(waiter.token, [waiter])
    const early = this.unclaimed.get(waiter.token)
    if (early) {
      this.unclaimed.delete(waiter.token)
      if (!waiter.grant && early.fence > waiter.afterFence) waiter.grant = early
    }
  }

  /** Unregister a waiter; a no-op for one that is not registered. */
  remove(waiter: Waiter): void {
    const list = this.waiters.get(waiter.token)
    const index = list?.indexOf(waiter) ?? -1
    if (!list || index < 0) return
    list.splice(index, 1)
    if (list.length === 0) this.waiters.delete(waiter.token)
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
    this.nextExpiryLocal = nextExpiry > 0 ? Date.now() + (nextExpiry - storeNow) + EXPIRY_SLACK_MS : 0
    this.schedule()
  }

  /** Re-check as soon as possible (e.g. right after the subscription became active). */
  recheckSoon(): void {
    this.arm(Date.now())
  }

  private onGrant(grant: Grant): void {
    const list = this.waiters.get(grant.token)
    if (!list) {
      // Possibly ours, arriving before the waiter registered (its queued reply came on another
      // connection): keep a bounded number of such grants for add() to find.
      this.unclaimed.set(grant.token, grant)
      if (this.unclaimed.size > MAX_UNCLAIMED)
        this.unclaimed.delete(this.unclaimed.keys().next().value as string)
      return
    }
    for (const waiter of list) {
      if (waiter.grant || grant.fence <= waiter.afterFence) continue
      waiter.grant = grant
      waiter.wake()
    }
  }

  private schedule(): void {
    if (this.waiters.size === 0) return
    const now = Date.now()
    let at = now + this.waiterTtlMs / 3
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
    this.timer = setTimeout(() => void this.recheck(), Math.max(0, at - Date.now()))
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
    const tokens = [...this.waiters]
      .filter(([, list]) => list.some((w) => !w.grant && !w.gone))
      .map(([t]) => t)
    try {
      if (tokens.length > 0) {
        const reply = await this.recheckTokens(tokens)
        reply.states.forEach((state, i) => {
          for (const waiter of this.waiters.get(tokens[i] as string) ?? []) {
            if (waiter.grant || waiter.gone) continue
            if (state.state === 'granted') {
              waiter.grant = { token: waiter.token, fence: state.fence, expiresAt: state.expiresAt }
              waiter.wake()
            } else if (state.state === 'gone') {
              waiter.gone = true
              waiter.wake()
            }
          }
        })
        this.nextExpiryLocal =
          reply.nextExpiry > 0 ? Date.now() + (reply.nextExpiry - reply.now) + EXPIRY_SLACK_MS : 0
      }
    } catch (error) {
      if ((this.store as { closed?: boolean }).closed) {
        // The store was closed: let every waiter try once more, which fails them with the store's error.
        for (const list of this.waiters.values()) {
          for (const waiter of list) {
            waiter.gone = true
            waiter.wake()
          }
        }
        return
      }
      // The store is down: keep waiting (the caller's timeout still applies) and try again later.
      debug('re-check of %s failed: %o', this.space.name, error)
      this.nextExpiryLocal = 0
      this.backoffMs = Math.min(BACKOFF_MAX_MS, this.backoffMs * 2)
      this.arm(Date.now() + this.backoffMs)
    } finally {
      this.checking = false
    }
    if (this.rerun) {
      this.rerun = false
      this.arm(Date.now())
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
