// A replica's part in a fleet's adaptive limit (scope 'fleet'): its reports of each window, the steps
// it takes when it leads, the brakes it saves, and the store's clock as it estimates it.
//
// One limit for every replica sharing the store:
// - every replica measures each request it admitted (limit.ts, "What is measured") and adds it to its
//   summary of the current window;
// - windows are named by their start on the store's clock (floor(time / windowMs) x windowMs, so
//   they stay ordered when windowMs changes: a reload, a rolling deploy); shortly after each window
//   ends, every replica reports its summary of it in one store call (lua/adaptive-report.lua), which
//   is also its heartbeat and returns the fleet's state: one call per window per replica, never one
//   per request;
// - the replica that leads (a lease kept in the store, renewed by every report of its holder and
//   taken over by any replica once it ran out) steps the controller once per window, from the merged
//   reports of the window before (every replica's report of it is in by then), and saves the step
//   only if no step of that window was saved yet (lua/adaptive-commit.lua): exactly one step per
//   window, even while two replicas believe they lead;
// - the leader puts the new limit in the permit set (permit-set-limit.lua, adaptive), where it wins
//   over every replica's own permits at once and never over an operator's override; every replica
//   learns it from its next report and asks for it as its own permits, which apply if the store loses
//   the limit (it expires 10 windows after the last step, so a fleet that stopped leaves nothing).
// What happens when things go wrong:
// - the leader dies: another replica leads once its lease ran out (3 windows), and goes on from the
//   last saved state;
// - a replica joins: it reports from its first window and learns the limit from the first reply; a
//   replica leaves: the others' reports make the sums; its heartbeat lapses in 3 windows;
// - the store is unreachable: every replica keeps the last limit it learnt (as its own permits), says
//   so once (a warning) and in its status, and the steps resume when the store answers.
import { randomBytes } from 'node:crypto'
import type { KeySpace } from '../../core/keys.js'
import type { AdaptiveReport, AdaptiveReportReply, FairCall, Store } from '../../core/protocol/store.js'
import { type ControllerState, doubling, step, type WindowSummary } from './controller.js'
import { LatencyHistogram } from './latency.js'
import type { ResolvedAdaptiveOptions } from './options.js'
import { parseState } from './saved-state.js'

/** A leader leads this many windows without reporting again. */
const LEADER_WINDOWS = 3
/** A limit in the store (the fleet's, or a local limit's) outlives its last step by this many windows. */
export const LIMIT_WINDOWS = 10
/** The fleet's state outlives its last report by this long (then a fleet starts from `initial`). */
const STATE_TTL_MS = 24 * 3_600_000
/** Store trouble is logged at most this often. */
const WARN_EVERY_MS = 30_000

/** What a replica needs of the limit it is part of (limit.ts). */
export interface FleetHost {
  /** The state in force. */
  state(): ControllerState
  /** The limit was closed: it steps nothing more. */
  closed(): boolean
  /** Take a state as the one in force; `stepped`: this replica just computed it (it logs changes). */
  apply(next: ControllerState, stepped: boolean): void
  /** A line for a significant change of the limit. */
  logChange(next: ControllerState): void
  /** Watch the requests admitted from now on for the brake of `state`, a doubling read from the fleet. */
  watchBrake(state: ControllerState): void
  /** The store's clock is known: arm the window timer on it, unless it fired already. */
  clockKnown(): void
  /** Log a warning about the limit. */
  warn(message: string, meta: Record<string, unknown>): void
}

/** One replica of a fleet's adaptive limit. */
export class FleetMember {
  /** This process among the fleet's replicas. */
  readonly replica = randomBytes(9).toString('base64url')
  /** The store's clock minus Date.now(), from the last reply. */
  private offsetMs = 0
  private reporting = false
  private leader = false
  private replicas = 1
  private storeReachable = true
  private lastWarnAt = Number.NEGATIVE_INFINITY
  /** The window in which this replica last read the fleet's state to brake (readAndBrake()). */
  private readWindow = -1
  /** The window whose step made the state in force (-1: none known): a brake is saved as a step just
   * after it. */
  private stateWindow = -1

  constructor(
    private readonly options: ResolvedAdaptiveOptions,
    private readonly store: Store,
    /** The permit set of the bucket. */
    private readonly space: KeySpace,
    /** The bucket's fair call, if it is a fair queue (LimitTarget.fair). */
    private readonly fair: FairCall | undefined,
    private readonly host: FleetHost,
  ) {}

  /** The store's time now, as this process estimates it. */
  now(): number {
    return Date.now() + this.offsetMs
  }

  /** This replica leads; the replicas that reported in the last 3 windows; the store answered the
   * last report. */
  status(): { leader: boolean; replicas: number; storeReachable: boolean } {
    return { leader: this.leader, replicas: this.replicas, storeReachable: this.storeReachable }
  }

  /** Start from evidence: one call at construction that counts this replica and reads the fleet's
   * saved state, applied at once, so that a restarted or newly deployed replica runs at the fleet's
   * last limit, not at `initial` (which applies to a bucket never seen, or unseen for STATE_TTL_MS). */
  async join(): Promise<void> {
    const reply = await this.readFleet(true) // (failed: the first report tries again)
    if (!reply || this.host.closed()) return
    this.replicas = reply.replicas
    // The timer was armed on this process's clock: armed again on the store's, unless it fired.
    this.host.clockKnown()
    const saved = reply.state === undefined ? undefined : parseState(reply.state, this.options)
    if (saved) this.stateWindow = reply.stepped
    if (saved && saved.steps !== this.host.state().steps) this.host.apply(saved, false)
  }

  /** `window` ended, having measured `summary`: report it. One report at a time: a slow store skips
   * windows rather than piling calls up. */
  ended(window: number, summary: WindowSummary): void {
    if (this.reporting) return
    this.reporting = true
    void this.report(window, summary).finally(() => {
      this.reporting = false
    })
  }

  /** The state in force was stepped from the window before `running` (the window running now) or
   * later: a doubling in it is the fleet's latest, this replica's to brake. */
  timely(running: number): boolean {
    return this.stateWindow >= running - this.options.windowMs
  }

  /** Take `next`, the brake of the state in force, and save it as the fleet's (commitBrake()). */
  brake(next: ControllerState): void {
    const based = this.stateWindow
    this.host.apply(next, false)
    void this.commitBrake(next, based)
  }

  /** Read the fleet's state to brake (readAndBrake()), once in the window `running` at most. */
  readOnce(running: number): void {
    if (this.readWindow === running) return
    this.readWindow = running
    void this.readAndBrake()
  }

  /** Say this replica leaves (one call, not awaited), so that it is no longer counted and, if it led,
   * another leads from its next report (without that call, or if the store does not answer it, the
   * lease runs out in 3 windows). */
  leave(): void {
    const adaptive = this.store.adaptive
    if (!adaptive) return
    const leaving = async () => adaptive.report(this.space, this.emptyReport({ leave: true }))
    leaving().catch(() => undefined)
  }

  private async report(window: number, summary: WindowSummary): Promise<void> {
    const store = this.store
    const { windowMs } = this.options
    let reply: AdaptiveReportReply
    try {
      const asked = Date.now()
      const latency = summary.latency.entries()
      reply = await (store.adaptive as NonNullable<Store['adaptive']>).report(this.space, {
        replica: this.replica,
        window,
        requests: summary.count,
        drops: summary.drops,
        latencyUs: latency.reduce((sum, [, , sumUs]) => sum + sumUs, 0),
        maxInFlight: summary.maxInFlight,
        clients: summary.clients,
        clientsOver: summary.clientsOver,
        latency,
        windowMs,
        leaderTtlMs: LEADER_WINDOWS * windowMs,
        stateTtlMs: STATE_TTL_MS,
      })
      this.offsetMs = reply.now - (asked + Date.now()) / 2
      this.reached()
    } catch (error) {
      this.unreachable(error)
      return
    }
    if (this.host.closed()) return // closed meanwhile: it said it leaves, it steps nothing more
    this.leader = reply.leads
    this.replicas = reply.replicas
    const saved = reply.state === undefined ? undefined : parseState(reply.state, this.options)
    if (saved) {
      this.stateWindow = reply.stepped
      this.host.apply(saved, false)
    }
    // The window just ended, once every replica reported it (this report completed it: lag 0), else,
    // when this replica leads, the one before it (lag 1).
    const lag = reply.complete ? 0 : 1
    const sums = reply.complete ?? (reply.leads ? reply.previous : undefined)
    if (!sums) return
    const stepped: WindowSummary = {
      count: sums.requests,
      drops: sums.drops,
      latency: LatencyHistogram.from(sums.latency),
      clients: sums.clients,
      clientsOver: sums.clientsOver,
      maxInFlight: sums.maxInFlight,
    }
    let next = step(saved ?? this.host.state(), stepped, this.options, lag)
    try {
      const commit = (state: ControllerState, based: number) =>
        (store.adaptive as NonNullable<Store['adaptive']>).commit(this.space, {
          window: window - lag * windowMs,
          based,
          state: JSON.stringify(state),
          stateTtlMs: STATE_TTL_MS,
          windowMs,
        })
      if (!(await commit(next, reply.stepped))) {
        // Another replica stepped (that window, or since the state was read), or braked the state
        // this step started from (saved as the window just after its step's): then step again from
        // the brake, so that the window is stepped now and from what is in force.
        if (reply.stepped < 0 || this.host.closed()) return
        const again = await this.readFleet()
        const brake =
          again?.stepped === reply.stepped + 1 ? parseState(again.state ?? '', this.options) : undefined
        if (!brake || this.host.closed()) return
        next = step(brake, stepped, this.options, lag)
        if (!(await commit(next, reply.stepped + 1))) return
      }
      this.stateWindow = window - lag * windowMs
      this.host.apply(next, true)
      // Versioned by the window: a later step's limit already there (this process paused since its
      // commit) is not written over.
      await store.permits.setLimit(
        this.space,
        next.limit,
        next.limit,
        { ttlMs: LIMIT_WINDOWS * windowMs, version: window - lag * windowMs },
        this.fair,
      )
    } catch (error) {
      this.unreachable(error)
    }
  }

  /** A report of nothing in the window running now: how a replica joins the fleet (and reads its
   * state) or leaves it. */
  private emptyReport(as: { join: true } | { leave: true }): AdaptiveReport {
    const { windowMs } = this.options
    return {
      replica: this.replica,
      window: Math.floor(this.now() / windowMs) * windowMs,
      requests: 0,
      drops: 0,
      latencyUs: 0,
      maxInFlight: 0,
      clients: 0,
      clientsOver: 0,
      latency: [],
      windowMs,
      leaderTtlMs: LEADER_WINDOWS * windowMs,
      stateTtlMs: STATE_TTL_MS,
      ...as,
    }
  }

  /** The fleet's state and the last window stepped, read now (a join: it counts nothing of a
   * window), and the store's clock from its reply; undefined when the store does not answer (said
   * unless `quiet`). */
  private async readFleet(quiet = false): Promise<AdaptiveReportReply | undefined> {
    try {
      const asked = Date.now()
      const reply = await (this.store.adaptive as NonNullable<Store['adaptive']>).report(
        this.space,
        this.emptyReport({ join: true }),
      )
      this.offsetMs = reply.now - (asked + Date.now()) / 2
      return reply
    } catch (error) {
      if (!quiet) this.unreachable(error)
      return undefined
    }
  }

  /** Read the fleet's state: a doubling in force for the whole window running (stepped from the
   * one before it) is taken as this replica's own, and the requests admitted from now on, under it,
   * decide the brake. (Braking it on the requests seen so far would judge a doubling by requests
   * admitted before it, or one the fleet has left by requests of the doubling before.) */
  private async readAndBrake(): Promise<void> {
    const reply = await this.readFleet()
    if (!reply || this.host.closed() || reply.state === undefined) return
    const saved = parseState(reply.state, this.options)
    const { windowMs } = this.options
    const running = Math.floor(this.now() / windowMs) * windowMs
    if (!saved || !doubling(saved) || reply.stepped < running - windowMs) return
    this.stateWindow = reply.stepped
    this.host.apply(saved, false)
    this.host.watchBrake(saved)
  }

  /** Save a brake as a step just after the one whose state it braked (windows are named by their
   * start, so `based + 1` orders before the next window's step): the next step reads it and goes on
   * from it. A step that landed meanwhile refuses it: then the fleet's state is that step's, and this
   * process takes it at its next report. */
  private async commitBrake(next: ControllerState, based: number): Promise<void> {
    if (based < 0) return
    const store = this.store
    const { windowMs } = this.options
    try {
      const committed = await (store.adaptive as NonNullable<Store['adaptive']>).commit(this.space, {
        window: based + 1,
        based,
        state: JSON.stringify(next),
        stateTtlMs: STATE_TTL_MS,
        windowMs,
      })
      if (!committed) return
      if (this.stateWindow === based) this.stateWindow = based + 1
      this.host.logChange(next)
      await store.permits.setLimit(
        this.space,
        next.limit,
        next.limit,
        { ttlMs: LIMIT_WINDOWS * windowMs, version: based + 1 },
        this.fair,
      )
    } catch (error) {
      this.unreachable(error)
    }
  }

  private reached(): void {
    if (this.storeReachable) return
    this.storeReachable = true
    this.host.warn('tollgate: adaptive limit: the store answers again; steps resume', {})
  }

  private unreachable(error: unknown): void {
    this.storeReachable = false
    const now = performance.now()
    if (now - this.lastWarnAt < WARN_EVERY_MS) return
    this.lastWarnAt = now
    this.host.warn('tollgate: adaptive limit held: the store does not answer', {
      limit: this.host.state().limit,
      error: error instanceof Error ? error.message : String(error),
    })
  }
}
