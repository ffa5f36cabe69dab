// Which steps of an adaptive limit are worth a log line, and what the line says. Pure (the caller
// passes the time), so the rule is unit-tested on synthetic steps.
//
// A change of SIGNIFICANT or more from the limit last logged (or one to min or max) is worth a line,
// at most one per `everyMs`. A line held back by that bound is not lost: the next line says how many
// changes were not logged, and the lowest and highest limit since the line before, so a peak (or a
// trough) between two lines shows. A limit that went somewhere significant and came back before a
// line was due still gets one (from and to equal, the peak in lowest and highest).

/** A change of this share of the limit last logged, or more, is worth a line. */
export const SIGNIFICANT = 0.2
/** At most one line per this long, by default. */
export const LOG_EVERY_MS = 10_000

/** What a change line says. */
export interface LimitChange {
  /** The limit the line before said (or the one at start). */
  from: number
  /** The limit now. */
  to: number
  /** The lowest and highest limit stepped to since the line before (from and to included). */
  lowest: number
  highest: number
  /** Steps held back since the line before (at most one line per everyMs) that changed the limit to
   * somewhere significant from it. */
  changesNotLogged: number
}

export class LimitChangeLog {
  private logged: number
  private lowest: number
  private highest: number
  private notLogged = 0
  private lastAt = Number.NEGATIVE_INFINITY
  /** The limit the step before was at. */
  private previous: number

  constructor(
    /** The limit's bounds: reaching one is always worth a line. */
    private readonly bounds: { readonly min: number; readonly max: number },
    /** The limit at start (what the first line changes from). */
    start: number,
    private readonly everyMs = LOG_EVERY_MS,
  ) {
    this.logged = this.lowest = this.highest = this.previous = start
  }

  /** The limit was stepped to `limit` at `now` (ms, any monotonic clock): the line to log now, or
   * undefined. */
  stepped(limit: number, now: number): LimitChange | undefined {
    const from = this.logged
    const changed = limit !== this.previous
    this.previous = limit
    this.lowest = Math.min(this.lowest, limit)
    this.highest = Math.max(this.highest, limit)
    if (!this.moved(limit) && !this.moved(this.lowest) && !this.moved(this.highest)) return undefined
    if (now - this.lastAt < this.everyMs) {
      // A change held back: the limit moved this step, to somewhere significant from the last line
      // (not a step that stays where the one before went).
      if (changed && this.moved(limit)) this.notLogged++
      return undefined
    }
    const change = {
      from,
      to: limit,
      lowest: this.lowest,
      highest: this.highest,
      changesNotLogged: this.notLogged,
    }
    this.logged = this.lowest = this.highest = limit
    this.lastAt = now
    this.notLogged = 0
    return change
  }

  /** `limit` is a significant change from the limit last logged. */
  private moved(limit: number): boolean {
    const from = this.logged
    if (limit === from) return false
    const { min, max } = this.bounds
    return Math.abs(limit - from) / Math.max(1, from) >= SIGNIFICANT || limit === min || limit === max
  }
}
