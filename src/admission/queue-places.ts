// A request's place while it waits: in its bucket's queue of this process (bounded by maxQueue), in a
// fair bucket's queue by class (a higher class's arrival may evict the newest of a lower one), and a
// wait that moves between the store and this process's share when the store goes down or comes back.
import { AbortFlag, type AbortSignalLike, abortReason, onAbort } from '../core/abort.js'
import type { ShedError } from '../core/errors.js'
import { MAX_PRIORITY } from '../core/fair.js'
import type { OutageShare } from './outage.js'

/** What a place asks of its admission (admission.ts): this process's waiters per bucket, counted
 * against maxQueue. */
export interface QueueCounts {
  enterQueue(key: string, waiter: object): boolean
  leaveQueue(key: string, waiter: object): void
  enterFairQueue(place: FairPlace): boolean
  leaveFairQueue(place: FairPlace): void
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
    private readonly admission: QueueCounts,
    private readonly key: string,
  ) {}

  readonly onQueued = (): boolean => {
    if (!this.admission.enterQueue(this.key, this)) {
      this.full = true
      return false
    }
    this.counted = true
    return true
  }

  leave(): void {
    if (this.counted) this.admission.leaveQueue(this.key, this)
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
    private readonly admission: QueueCounts,
    readonly key: string,
    readonly priority: number,
    client: AbortSignalLike,
  ) {
    if (client.aborted) this.signal.abort(abortReason(client))
    else this.unwatch = onAbort(client, () => this.signal.abort(abortReason(client)))
  }

  readonly onQueued = (): boolean => {
    if (!this.admission.enterFairQueue(this)) {
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
    if (this.counted) this.admission.leaveFairQueue(this)
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
