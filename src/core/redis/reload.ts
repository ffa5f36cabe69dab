// Reloading the function libraries without reordering calls.
//
// A store's calls reach Redis in the order they were made (coalescer.ts), and the scripts rely on it:
// a release sent while its acquire is still on the way (a RedLock giving up, a give-back after a
// timeout) must run after that acquire. A server that lost the libraries (restart without
// persistence, FUNCTION FLUSH, a new Cluster node) answers "Function not found" to every FCALL until
// they are loaded again, and such a call did not run. Retrying each failed call as its error comes
// back would send it after calls made later that did run: an acquire retried after its own release
// holds a permit nobody will release until its lease runs out.
//
// So a reload is a barrier, by sequence number (the order in which run() sent calls):
// - a call that finds the functions missing, and every call made while the reload is under way, waits;
// - a call sent before the reload began that did run, after one that failed (another process loaded
//   the libraries in between), runs again after the failed one: each script counts a resend once
//   (acquisitions are named by their caller), so a second run only puts its effect back in order;
// - once the libraries are loaded, and every reply sent before the load was read (the load's reply
//   comes after them on each connection; one more macrotask lets their handlers run), the waiting
//   calls go out in sequence order, in one synchronous loop.

/** A call waiting for the reload: its sequence number, and what starts it again. */
interface Waiter {
  readonly seq: number
  readonly go: (failure: unknown) => void
}

export class Reload {
  private readonly waiting: Waiter[] = []
  private done = false
  private failure: unknown

  constructor(
    /** The first call that found the functions missing. */
    readonly from: number,
    /** The first call made after the reload began: calls from here on wait without being sent. */
    readonly until: number,
    /** Loads the libraries (on every master of a Cluster). */
    load: () => Promise<void>,
    /** Called when the waiting calls have been released (the store forgets this reload). */
    onDone: () => void,
  ) {
    void load()
      .then(
        () => new Promise<void>((resolve) => setImmediate(resolve)),
        (error: unknown) => {
          this.failure = error ?? new Error('loading the function libraries failed')
        },
      )
      .then(() => {
        this.done = true
        onDone()
        this.waiting.sort((a, b) => a.seq - b.seq)
        for (const waiter of this.waiting.splice(0)) waiter.go(this.failure)
      })
  }

  /** Whether a call that ran (it was sent at `seq`) must run again after the calls that failed. */
  ranOutOfOrder(seq: number): boolean {
    return seq > this.from && seq < this.until
  }

  /** Resolves when the call `seq` may be sent (again); rejects with the load's error. */
  turn(seq: number): Promise<void> {
    if (this.done) return this.failure === undefined ? Promise.resolve() : Promise.reject(this.failure)
    return new Promise<void>((resolve, reject) =>
      this.waiting.push({ seq, go: (failure) => (failure === undefined ? resolve() : reject(failure)) }),
    )
  }
}
