// The batching of store calls, as a rule you can check by reading (and unit-test without Redis):
//
//   One FIFO of calls per name, plus a count of calls in flight per name. A call goes out at once when
//   nothing of its name is in flight or queued (a lone call waits for nothing). Otherwise it joins its
//   name's FIFO. At the end of the turn (setImmediate, after the turn's I/O callbacks) each FIFO is
//   walked in order and runs of consecutive calls of one kind are merged into one call: never
//   repeating a token, at most MAX_BATCH tokens. Calls without a kind (renew, re-check, ...) join the
//   FIFO as they are, so every call of a name reaches the store in the order it was made, by
//   construction.
//
// Under load (the gateway with 50 connections) this turns the acquires of a turn into one script call
// instead of one each. A call made while others of its name are in flight waits for the end of the
// turn, even the turn's first: sending it straight splits each turn's acquires (and releases) into
// two script calls (docs/cost.md, "Why the code is as it is").

import { tokenWeight } from '../weight.js'

/** Most tokens in one merged call (keeps the script's unpack() and its reply small). */
export const MAX_BATCH = 256
/** Most permits in one merged call, counting a weighted token's weight (a weighted hold is that many
 * members of a sorted set: weight.ts): keeps a merged call's ZADD/ZREM within Lua's unpack() limit
 * and its time bounded. A call heavier than this alone still goes (alone). */
export const MAX_BATCH_WEIGHT = 1024

/** What the coalescer needs to know of a call. */
export interface Call {
  /** Calls of one name keep their order. */
  readonly name: string
  /** Calls of the same kind (script and options) may be merged; undefined: never merged. */
  readonly kind: string | undefined
  /** What a merged call adds: merged calls never repeat one (a release twice must find it gone). */
  readonly token: string
}

export class Coalescer<C extends Call> {
  private readonly inFlight = new Map<string, number>()
  /** Calls queued in this turn, per name, in call order. */
  private queues = new Map<string, C[]>()
  private scheduled = false

  constructor(
    /** Send these calls (one name, one kind) as one store call; report its end with landed(name).
     * `straight`: a call sent at once by submit(), not in an end of turn's batch. */
    private readonly send: (calls: readonly C[], straight: boolean) => void,
    /** Runs the end of the turn. */
    private readonly defer: (endOfTurn: () => void) => void = setImmediate,
    /** Wraps the sends of one end of turn (the Redis store corks its socket around them, so a turn's
     * batches leave in one write). */
    private readonly around: (sends: () => void) => void = (sends) => sends(),
  ) {}

  submit(call: C): void {
    const { name } = call
    if (!this.inFlight.has(name) && !this.queues.has(name)) {
      this.dispatch([call], true)
      return
    }
    const queue = this.queues.get(name)
    if (queue) queue.push(call)
    else this.queues.set(name, [call])
    this.schedule()
  }

  /** A call sent for `name` has landed (answered or failed). */
  landed(name: string): void {
    const left = (this.inFlight.get(name) ?? 1) - 1
    if (left > 0) this.inFlight.set(name, left)
    else this.inFlight.delete(name)
  }

  /** Names with a call in flight. */
  busy(): number {
    return this.inFlight.size
  }

  /** Calls in flight for `name` (tests and diagnostics). */
  pending(name: string): number {
    return this.inFlight.get(name) ?? 0
  }

  private dispatch(calls: readonly C[], straight = false): void {
    const name = (calls[0] as C).name
    this.inFlight.set(name, (this.inFlight.get(name) ?? 0) + 1)
    this.send(calls, straight)
  }

  private schedule(): void {
    if (this.scheduled) return
    this.scheduled = true
    this.defer(this.endTurn)
  }

  private readonly endTurn = (): void => {
    const queues = this.queues
    this.queues = new Map()
    this.scheduled = false
    this.around(() => this.sendAll(queues))
  }

  private sendAll(queues: Map<string, C[]>): void {
    for (const queue of queues.values()) {
      let run: C[] = []
      let tokens = new Set<string>()
      let weight = 0
      for (const call of queue) {
        const head = run[0]
        const w = tokenWeight(call.token)
        const joins =
          head !== undefined &&
          call.kind !== undefined &&
          call.kind === head.kind &&
          run.length < MAX_BATCH &&
          weight + w <= MAX_BATCH_WEIGHT &&
          !tokens.has(call.token)
        if (!joins) {
          if (run.length > 0) this.dispatch(run)
          run = []
          tokens = new Set()
          weight = 0
        }
        run.push(call)
        tokens.add(call.token)
        weight += w
      }
      if (run.length > 0) this.dispatch(run)
    }
  }
}
