// Giving back what an acquire whose outcome nobody learnt may hold (G3): its reply was lost, or came
// after the call's deadline failed it. A give-back is a release of its acquisition, a no-op if the
// acquire took nothing, retried with backoff until Redis answers one, or until what it took would have
// run out anyway.
import { debuglog } from 'node:util'
import { monoNow } from '../clock.js'
import type { GiveBack } from './script-calls.js'

const debug = debuglog('tollgate:store')

/** Give-backs under way at most (during a long outage the rest simply run out), and their backoff. */
const MAX_GIVE_BACKS = 10_000
const GIVE_BACK_RETRY_MS = 100
const GIVE_BACK_RETRY_MAX_MS = 2000

export class GiveBacks {
  /** Give-backs under way. */
  private underWay = 0

  constructor(
    /** True once the store is closed: nothing more is tried. */
    private readonly closed: () => boolean,
    private readonly commandTimeoutMs: number,
  ) {}

  start(undo: GiveBack): void {
    if (this.closed() || this.underWay >= MAX_GIVE_BACKS) return
    this.underWay++
    // From now, and the call may still run up to commandTimeoutMs after it was made.
    const until = monoNow() + undo.withinMs + this.commandTimeoutMs
    let delay = GIVE_BACK_RETRY_MS
    const attempt = (): void => {
      if (this.closed() || monoNow() >= until) {
        this.underWay--
        return
      }
      undo.release().then(
        () => {
          this.underWay--
        },
        (error: unknown) => {
          debug('giving back an unanswered acquire failed, retrying in %d ms: %o', delay, error)
          setTimeout(attempt, delay).unref()
          delay = Math.min(delay * 2, GIVE_BACK_RETRY_MAX_MS)
        },
      )
    }
    attempt()
  }
}
