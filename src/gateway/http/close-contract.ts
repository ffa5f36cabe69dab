// The close contract of every request the gateway handles, stated once and checked here: its response
// closes exactly once, its upstream is told how the request ended at most once, and every permit it
// took is released exactly once, all of them by the time its response closes.
//
// Every request goes through it, whichever front end (lean, http.Server) and upstream client (lean
// pool, undici) serve it: plain-request.ts (websocket.ts for a tunnel) closes it on the response's
// 'close', exchange.ts counts each permit taken and released, and proxy.ts's WebForward reports the
// upstream's end (finished, failed) or tells it (aborted) through it.
//
// A repeat is a bug of the gateway (or of an upstream client's callbacks), checked as undici checks
// its handlers' order with node:assert. What a breach does:
//   - always: the repeat is ignored (the first close, end or release stands; the caller skips what it
//     was about to do again), and the breach counted (tollgate_close_contract_breaches_total{step})
//     and logged, the first of each step per gateway only (a bug that repeats per request must not
//     flood the log). A permit found still held at the close is left to its lease's expiry;
//   - under TOLLGATE_CLOSE_CONTRACT=throw (this repository's tests set it: vitest.config.ts): it is
//     also thrown, as a CloseContractBreach, on the next tick: an uncaught exception, so the test run
//     fails naming it, and nothing on the way (undici catches what a handler throws, and aborts the
//     request) can swallow it;
//   - in production, nothing more: a throw would crash the gateway, and every request in flight
//     with it, for a repeat that has been dropped safely.
// A close that never comes cannot be seen as it happens, only by its absence:
// test/gateway/disconnect-matrix.test.ts checks that every request's permit comes back, on every path.

/** The three promises of the contract (the label values of the breaches metric). */
export const CONTRACT_STEPS = ['close', 'upstream', 'release'] as const
export type ContractStep = (typeof CONTRACT_STEPS)[number]

/** How a forwarded request ended upstream: its response's last byte came, it failed (an error or a
 * timeout), or the gateway gave it up (the client left first). */
export type UpstreamEnd = 'finished' | 'failed' | 'aborted'

/** What closes a request: its response's 'close' event, or its connection's, for a response that
 * waits behind others on an http.Server connection (it never emits 'close' if the connection closes
 * first; if it got the connection meanwhile, both come, the second ignored). */
export type CloseSource = 'response' | 'connection'

/** Where breaches go (breachReporter()). */
export type BreachReport = (step: ContractStep, message: string) => void

/** Thrown for a breach under test only (see the top of this file). */
export class CloseContractBreach extends Error {}

/** Under this repository's tests: thrown on the next tick, where nothing catches it. A variable of
 * our own, not NODE_ENV: an application's test suite or a staging gateway with NODE_ENV=test must
 * not crash on a breach that has been dropped safely. */
const UNDER_TEST = process.env.TOLLGATE_CLOSE_CONTRACT === 'throw'
function throwUncaught(error: Error): void {
  process.nextTick(() => {
    throw error
  })
}

/** A gateway's BreachReport: every breach counted; the first of each step logged; under test, each
 * thrown uncaught (`raise`, which a test of this module replaces). */
export function breachReporter(
  count: (step: ContractStep) => void,
  log: (step: ContractStep, message: string) => void,
  raise: ((error: CloseContractBreach) => void) | undefined = UNDER_TEST ? throwUncaught : undefined,
): BreachReport {
  const logged = new Set<ContractStep>()
  return (step, message) => {
    count(step)
    if (!logged.has(step)) {
      logged.add(step)
      log(step, message)
    }
    raise?.(new CloseContractBreach(`close contract (src/gateway/http/close-contract.ts): ${message}`))
  }
}

const RESPONSE = 1
const CONNECTION = 2

/** The contract of one request. */
export class CloseContract {
  /** The close sources seen (RESPONSE | CONNECTION). */
  private sources = 0
  private ended: UpstreamEnd | undefined
  private taken = 0
  private released = 0

  constructor(private readonly report: BreachReport) {}

  /** The request has closed. */
  get closed(): boolean {
    return this.sources !== 0
  }

  /** How its upstream request ended, once it has. */
  get upstreamEnd(): UpstreamEnd | undefined {
    return this.ended
  }

  /** A close from `source`. True for the first: the caller ends the request (releases its permits,
   * tells its upstream, logs it). The other source after it is expected (false); the same source
   * twice is a breach (false). */
  close(source: CloseSource): boolean {
    const bit = source === 'response' ? RESPONSE : CONNECTION
    if ((this.sources & bit) !== 0) {
      this.report('close', `a second close from the ${source}`)
      return false
    }
    const first = this.sources === 0
    this.sources |= bit
    return first
  }

  /** The upstream request ended (`finished`, `failed`), or the gateway gives it up (`aborted`, to be
   * told after this returns true). True for the first; any second is a breach (false): the caller
   * neither tells the upstream again nor acts on a second report. */
  upstream(end: UpstreamEnd): boolean {
    if (this.ended !== undefined) {
      this.report('upstream', `the upstream request ended twice: ${this.ended}, then ${end}`)
      return false
    }
    this.ended = end
    return true
  }

  /** A permit taken for the request. */
  took(): void {
    this.taken++
  }

  /** A permit is about to be released: true, or a breach (false: more releases than permits taken,
   * one released twice), and the caller does not release it again. */
  release(): boolean {
    if (this.released >= this.taken) {
      this.report('release', 'a permit released twice')
      return false
    }
    this.released++
    return true
  }

  /** The request closed and its releases ran: every permit taken must be back. */
  releasedAll(): void {
    if (this.released !== this.taken)
      this.report('release', `closed with ${this.taken - this.released} permit(s) not released`)
  }
}
