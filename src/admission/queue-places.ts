// A request's place while it waits: in its bucket's queue of this process (bounded by maxQueue), in a
// fair bucket's queue by class (a higher class's arrival may evict the newest of a lower one), and a
// wait that moves between the store and this process's share when the store goes down or comes back.
import { AbortFlag, type AbortSignalLike, abortReason, onAbort } from '../core/abort.js'
import { ShedError } from '../core/errors.js'
import { MAX_PRIORITY } from '../core/fair.js'
import { countDown } from './arrivals.js'
import type { OutageShare } from './outage.js'

/** This process's waiters per bucket, counted against maxQueue, and each fair bucket's by class:
 * what a place takes while its request waits in the store's queue. */
export class LocalQueues {
  /** Requests of each bucket waiting in the store's queue (not those whose call is on its way). */
  readonly waiting = new Map<string, number>()
  /** This process's waiters of each fair bucket by class, for the class-aware `maxQueue`. */
  private readonly classQueues = new Map<string, ClassQueue>()

  constructor(
    private readonly maxQueue: number,
    /** A waiter took a place in `key`'s queue (the admission counts it, and flushes kept leases). */
    private readonly entered: (key: string, waiter: object) => void,
    /** A waiter gave its place back. */
    private readonly left: (waiter: object) => void,
    /** The per-class counts of fair buckets (metrics.ts), when the buckets are fair. */
    private readonly byClass: () => { waiting(priority: number, delta: number): void } | undefined,
  ) {}

  /** Take a place in a bucket's queue (false: the queue is full); see QueuePlace. */
  enterQueue(key: string, waiter: object): boolean {
    const waiting = this.waiting.get(key) ?? 0
    if (waiting >= this.maxQueue) return false
    this.waiting.set(key, waiting + 1)
    this.entered(key, waiter)
    return true
  }

  leaveQueue(key: string, waiter: object): void {
    this.left(waiter)
    countDown(this.waiting, key)
  }

  /** Take a place in a fair bucket's queue. When it is full, an arrival of a strictly higher class
   * than this process's lowest waiter there takes the place of the newest such waiter, which is shed
   * (aborted once, rejected `shed`); otherwise false, as enterQueue(). */
  enterFairQueue(place: FairPlace): boolean {
    const { key } = place
    let queue = this.classQueues.get(key)
    if ((this.waiting.get(key) ?? 0) >= this.maxQueue) {
      const victim = queue?.newestBelow(place.priority)
      if (!victim) return false
      victim.evict(new ShedError(key, 'evicted'))
      queue = this.classQueues.get(key)
    }
    if (!this.enterQueue(key, place)) return false
    if (!queue) this.classQueues.set(key, (queue = new ClassQueue()))
    queue.push(place)
    this.byClass()?.waiting(place.priority, 1)
    return true
  }

  /** Give back a place enterFairQueue() gave (once). */
  leaveFairQueue(place: FairPlace): void {
    const queue = this.classQueues.get(place.key)
    if (queue) {
      queue.remove(place)
      if (queue.size === 0) this.classQueues.delete(place.key)
    }
    this.byClass()?.waiting(place.priority, -1)
    this.leaveQueue(place.key, place)
  }
}

/** A wait in the store's queue that moves to this process's share when the store goes down, or a
 * wait for the share that moves back to the store's queue when the outage ends (outage: 'share'):
 * its own signal, aborted by the client's or by the move. */
export class Moving {
  readonly signal = new AbortFlag()
  moved = false
  private readonly unwatch: () => void
  private readonly move = () => {
    this.moved = true
    this.signal.abort(new Error('the store went down: admitted in memory'))
  }

  constructor(
    client: AbortSignalLike,
    outage: OutageShare,
    /** Who moves it: the outage's start (store -> here), or its end (here -> store). */
    private readonly by: Set<() => void> = outage.waiting,
  ) {
    this.unwatch = onAbort(client, () => this.signal.abort(abortReason(client)))
    by.add(this.move)
  }

  done(): void {
    this.unwatch()
    this.by.delete(this.move)
  }
}

/** A request's place in its bucket's queue: taken when the store queues it (bounded by maxQueue),
 * given back once its acquire settles. */
export class QueuePlace {
  full = false
  private counted = false

  constructor(
    private readonly queues: LocalQueues,
    private readonly key: string,
  ) {}

  readonly onQueued = (): boolean => {
    if (!this.queues.enterQueue(this.key, this)) {
      this.full = true
      return false
    }
    this.counted = true
    return true
  }

  leave(): void {
    if (this.counted) this.queues.leaveQueue(this.key, this)
    this.counted = false
  }
}

/** A request's place in a fair bucket's local queue: as QueuePlace, plus its class, and a signal of
 * its own that the client's aborts and that an eviction (a higher class's arrival) aborts once. */
export class FairPlace {
  full = false
  evicted = false
  /** In its ClassQueue list (newer: next). */
  prev: FairPlace | undefined = undefined
  next: FairPlace | undefined = undefined
  readonly signal = new AbortFlag()
  private counted = false
  private readonly unwatch: (() => void) | undefined

  constructor(
    private readonly queues: LocalQueues,
    readonly key: string,
    readonly priority: number,
    client: AbortSignalLike,
  ) {
    if (client.aborted) this.signal.abort(abortReason(client))
    else this.unwatch = onAbort(client, () => this.signal.abort(abortReason(client)))
  }

  readonly onQueued = (): boolean => {
    if (!this.queues.enterFairQueue(this)) {
      this.full = true
      return false
    }
    this.counted = true
    return true
  }

  /** Shed for a higher class: its place goes to the arrival now, and its wait is aborted (once: the
   * acquire then leaves the store's queue as any aborted wait does). */
  evict(error: ShedError): void {
    this.evicted = true
    this.leave()
    this.signal.abort(error)
  }

  leave(): void {
    if (this.counted) this.queues.leaveFairQueue(this)
    this.counted = false
    this.unwatch?.()
  }
}

/** One fair bucket's local waiters, a list per class (oldest to newest): push, remove and the newest
 * of the lowest class below one in O(classes). */
export class ClassQueue {
  private readonly newest: (FairPlace | undefined)[] = new Array<FairPlace | undefined>(MAX_PRIORITY + 1)
  size = 0

  push(place: FairPlace): void {
    const tail = this.newest[place.priority]
    place.prev = tail
    place.next = undefined
    if (tail) tail.next = place
    this.newest[place.priority] = place
    this.size++
  }

  remove(place: FairPlace): void {
    if (place.next) place.next.prev = place.prev
    else this.newest[place.priority] = place.prev
    if (place.prev) place.prev.next = place.next
    place.prev = place.next = undefined
    this.size--
  }

  /** The newest waiter of the lowest class strictly below `priority`, if any. */
  newestBelow(priority: number): FairPlace | undefined {
    for (let p = 0; p < priority; p++) {
      const place = this.newest[p]
      if (place) return place
    }
    return undefined
  }
}
