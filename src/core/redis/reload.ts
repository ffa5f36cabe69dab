// Loading the Lua again without reordering calls, whichever way it runs (FCALL or EVALSHA).
//
// A store's calls reach Redis in the order they were made (coalescer.ts), and the scripts rely on it:
// a release sent while its acquire is still on the way (a RedLock giving up, a give-back after a
// timeout) must run after that acquire. A server that lost the Lua (restart without persistence,
// FUNCTION FLUSH or SCRIPT FLUSH, a new Cluster node) answers "Function not found" to every FCALL, and
// NOSCRIPT to every EVALSHA, until it is loaded again, and such a call did not run. Retrying each
// failed call as its error comes back (as ioredis does on NOSCRIPT) would send it after calls made
// later that did run: an acquire retried after its own release holds a permit nobody will release
// until its lease runs out, and a try-acquire made after a release finds the permit still held.
// The same holds for a call refused because the server refuses functions: it goes again as EVALSHA.
//
// So a reload is a barrier, by sequence number (the order in which run() sent calls):
// - a call that finds the Lua missing, and every call made while the reload is under way, waits;
// - a *release* sent before the reload began that did run, after a call that failed (another process
//   loaded the Lua in between), runs again after it: a release counts a resend once, so a second run
//   only puts its effect back in order (the release of an acquire that had not run yet then finds
//   it). Nothing else runs again: an acquire that ran left its hold or wait (a second run
//   would change nothing) or was refused, and a second run could then take what its caller was told
//   it did not get; a renewal, a re-check or an inspect that ran early does no harm; a limit set
//   again could undo another process's later one;
// - once the Lua is loaded (FUNCTION LOAD, or SCRIPT LOAD of every family's script, on every master),
//   and every reply sent before the load was read (the load's reply comes after them on each
//   connection; one more macrotask lets their handlers run), the waiting calls go out in sequence
//   order, in one synchronous loop;
// - a call that finds the Lua missing again (lost again while the load was on the way, or a node the
//   load missed) waits for the next reload by the same rules, a bounded number of times (store.ts).
// Calls of one name go to one connection (one Cluster node), whose replies come in order: a call's
// failure is known before the reply of any later call on its connection, so "ran after a failed
// one" compares with the lowest failed call so far.

/** A call waiting for the reload: its sequence number, and what starts it again. */
interface Waiter {
  readonly seq: number
  readonly go: (failure: unknown) => void
}

export class Reload {
  private readonly waiting: Waiter[] = []
  private done = false
  private failure: unknown
  /** The lowest call that found the Lua missing. */
  private from: number

  constructor(
    /** The call that found the Lua missing first. */
    from: number,
    /** The first call made after the reload began: calls from here on wait without being sent. */
    readonly until: number,
    /** Loads the Lua (on every master of a Cluster). */
    load: () => Promise<void>,
    /** Called when the waiting calls have been released (the store forgets this reload). */
    onDone: () => void,
  ) {
    this.from = from
    void load()
      .then(
        () => new Promise<void>((resolve) => setImmediate(resolve)),
        (error: unknown) => {
          this.failure = error ?? new Error('loading the Lua failed')
        },
      )
      .then(() => {
        this.done = true
        onDone()
        this.waiting.sort((a, b) => a.seq - b.seq)
        for (const waiter of this.waiting.splice(0)) waiter.go(this.failure)
      })
  }

  /** Whether a call that ran (it was sent at `seq`) ran after one that failed and waits here. */
  ranOutOfOrder(seq: number): boolean {
    return seq > this.from && seq < this.until
  }

  /** The call `seq` found the Lua missing: it goes again at its turn. */
  failed(seq: number): Promise<void> {
    if (!this.done) this.from = Math.min(this.from, seq)
    return this.turn(seq)
  }

  /** Resolves when the call `seq` may be sent (again); rejects with the load's error. */
  turn(seq: number): Promise<void> {
    if (this.done) return this.failure === undefined ? Promise.resolve() : Promise.reject(this.failure)
    return new Promise<void>((resolve, reject) =>
      this.waiting.push({ seq, go: (failure) => (failure === undefined ? resolve() : reject(failure)) }),
    )
  }
}
