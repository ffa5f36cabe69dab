// The adaptive limit of one bucket: the controller (controller.ts) driven by what the requests it
// admits do, applied to the bucket's permits. Its options are options.ts's; scope 'fleet' shares one
// limit through the store (fleet.ts), scope 'local' runs this process's own (local.ts).
//
// What is measured: what the upstream does, not what a client does, since one client's behaviour must
// not set a limit every client shares (docs/adaptive.md, "What a client cannot do"):
// - latency runs from admission, or from the request body's last byte if that came later (the
//   upstream cannot answer before it), to the upstream's last byte (the gateway) or to the handler's
//   end() call (the middleware), not to the end of the client's reading: a slow reader holds its
//   permit (bounded by the send timeout) but its sample is the upstream's. While the client takes no
//   more bytes the gateway stops reading the upstream (backpressure), and a handler's write() says
//   false; that time, from each pause to the client's drain, is left out of the sample too
//   (`heldMs`). A request whose client left before its response ended counts its time so far, only
//   when that already shows queueing (abandoned());
// - the window's latency is the median of its samples (latency.ts), so one user's slow requests do
//   not move it while they are fewer than half;
// - drops back a window off only when more than half of its clients saw more than `dropShare` of
//   their requests dropped (clients.ts), and the default drops are timeouts and 503 (the status that
//   says "overloaded"), not 429 (usually one user's answer).
import { ConfigError } from '../../core/errors.js'
import type { KeySpace } from '../../core/keys.js'
import type { FairCall, Store } from '../../core/protocol/store.js'
import {
  BRAKE_SAMPLES,
  type BrakeSample,
  brakeThreshold,
  braked,
  type ControllerState,
  initialState,
  doubling,
  showsQueue,
  step,
  type StepReport,
} from './controller.js'
import { LimitChangeLog } from './change-log.js'
import { clientKey } from './clients.js'
import { FleetMember, LIMIT_WINDOWS } from './fleet.js'
import { keepLocalState, lastLocalState } from './local.js'
import { isDrop, type Outcome, type ResolvedAdaptiveOptions } from './options.js'
import { withinBounds } from './saved-state.js'
import { liveWindow, type LiveWindow, summarize } from './window.js'

// The admission engine takes an adaptive limit's options and outcomes from here, with the limit.
export { type Outcome, parseAdaptiveOptions } from './options.js'

/** Where an adaptive limit logs (the middleware's and gateway's logger). */
export interface AdaptiveLogger {
  warn(message: string, meta?: Record<string, unknown>): void
  info?(message: string, meta?: Record<string, unknown>): void
}

/** An adaptive limit as metrics, logs, the admin API and the dashboard see it. */
export interface AdaptiveStatus {
  scope: 'fleet' | 'local'
  min: number
  max: number
  /** The limit the controller set last (as this process knows it). */
  limit: number
  /** The controller's estimate (to 2 decimals; the limit is it rounded). */
  estimate: number
  /** The baseline (unloaded latency), and the median latency of the latest window that had requests
   * (an idle window keeps the one before), ms to 2 decimals. */
  minRttMs: number | undefined
  rttMs: number | undefined
  /** How long ago the window of `rttMs` was stepped, ms (undefined: never): an idle route's latency
   * is that old. */
  rttAgeMs: number | undefined
  /** Requests that ended in the last window stepped (fleet: every replica's; 0 while idle). */
  requests: number
  /** The last window stepped: its clients (light ones pooled into units of enough requests), and
   * those of them that saw more than `dropShare` of their requests dropped (more than half: a
   * back-off). */
  clients: number
  clientsOver: number
  /** tolerance x baseline / latency, clamped to [0.5, 1], of the latest window it was computed for
   * (gradient algorithm; to 3 decimals). */
  gradient: number | undefined
  /** What moved the limit last. */
  reason: StepReport['reason'] | undefined
  /** Steps taken by the fleet (or this process). */
  steps: number
  /** This process steps the controller (fleet: it leads). */
  leader: boolean
  /** Processes that reported in the last 3 windows (fleet; 1 for local). */
  replicas: number
  /** The store answered the last report (fleet). While it does not, the last limit is kept. */
  storeReachable: boolean
}

/** What an AdaptiveLimit drives: the bucket's permits. */
export interface LimitTarget {
  /** The store the limit is kept in (fleet: the shared one; local: this process's own). */
  store: Store
  /** The permit set of the bucket. */
  space: KeySpace
  /** Ask for `limit` as this process's own permits from now on. */
  setOwn(limit: number): void
  /** The bucket's fair call, if it is a fair queue (a semaphore with `overload`): a new limit then
   * admits in the queue's order, not a plain call's (which stops at the first disciplined waiter). */
  fair?: FairCall | undefined
}

export class AdaptiveLimit {
  private state: ControllerState
  private window: LiveWindow = liveWindow(0)
  private inFlight = 0
  private timer: NodeJS.Timeout | undefined
  private closed = false
  /** The window timer fired once (it runs on the store's clock from then on). */
  private ticked = false
  /** This replica's part in the fleet's limit (scope 'fleet'). */
  private readonly fleet: FleetMember | undefined
  /** Which steps get a log line (change-log.ts). */
  private readonly changes: LimitChangeLog
  /** The latest window's latency and gradient that there were (an idle window has none), and when
   * it was stepped: what the status shows, so that a graph of them has no gaps. */
  private latest: { rttMs?: number | undefined; gradient?: number | undefined; at?: number | undefined } = {}
  /** Slow start's brake (controller.ts braked()), watching while the state in force is in slow
   * start past its first clean window: since when, the latency above which requests show the queue,
   * the batch of latencies of requests admitted since, and whether the batch before showed it. */
  private brake:
    { since: number; thresholdMs: number; samples: BrakeSample[]; confirmed: boolean } | undefined
  /** This process's median latency of its last window, with BRAKE_SAMPLES requests or more. */
  private ownMedianMs: number | undefined

  constructor(
    readonly options: ResolvedAdaptiveOptions,
    private readonly target: LimitTarget,
    private readonly logger: AdaptiveLogger,
    /** The bucket's name, for logs. */
    private readonly name: string,
  ) {
    if (options.scope === 'fleet' && !target.store.adaptive) {
      throw new ConfigError(
        'adaptive.scope',
        "a store that can share adaptive limits, or scope: 'local'",
        'fleet',
      )
    }
    this.fleet =
      options.scope === 'fleet'
        ? new FleetMember(options, target.store, target.space, target.fair, {
            state: () => this.state,
            closed: () => this.closed,
            apply: (next, stepped) => this.apply(next, stepped),
            logChange: (next) => this.logChange(next),
            watchBrake: (state) => this.watchBrake(state),
            clockKnown: () => {
              if (this.ticked) return
              clearTimeout(this.timer)
              this.arm()
            },
            warn: (message, meta) => logger.warn(message, { name, ...meta }),
          })
        : undefined
    const saved = options.scope === 'local' ? lastLocalState(target.store, target.space.base) : undefined
    this.state = saved ? withinBounds(saved, options) : initialState(options)
    this.changes = new LimitChangeLog(options, this.state.limit)
    this.remember(this.state)
    target.setOwn(this.state.limit)
    this.arm()
    this.ready = this.fleet ? this.fleet.join().catch(() => undefined) : Promise.resolve()
  }

  /** Settles once a fleet limit has read the fleet's saved state (or failed to): from then on it runs
   * at the fleet's last limit rather than `initial`. Never rejects. */
  readonly ready: Promise<void>

  /** A request was admitted under the limit, holding `weight` permits: returns when (for
   * finished()). */
  admitted(weight = 1): number {
    this.inFlight += weight
    if (this.inFlight > this.window.maxInFlight) this.window.maxInFlight = this.inFlight
    return performance.now()
  }

  /** A request admitted at `admittedAt` with `weight` ended so (undefined: not counted, e.g. the
   * client left): its sample (sample()) and its permits back (released()), now. */
  finished(admittedAt: number, outcome: Outcome | undefined, weight = 1): void {
    this.released(weight)
    this.sample(admittedAt, outcome)
  }

  /** The sample of a request whose response ended now where the limit measures it (undefined: not
   * counted). One sample whatever its weight. `startedAt`: when the upstream (or the handler) could
   * start on it: its admission, or its body's last byte if that came later (a client that sends its
   * body slowly is no slow upstream). `heldMs`: how long the client held the response back meanwhile,
   * left out of its latency. `client`: its address (the drop decision is the median client's:
   * clients.ts). */
  sample(startedAt: number, outcome: Outcome | undefined, heldMs = 0, client?: string): void {
    if (!outcome) return
    const window = this.window
    const drop = isDrop(outcome, this.options.drops)
    const key = clientKey(client)
    window.count++
    if (drop) window.drops++
    else {
      const ms = performance.now() - startedAt - heldMs
      window.latency.add(ms)
      if (this.brake && startedAt >= this.brake.since) this.braking(this.brake, ms, key)
    }
    window.clients.add(key, drop)
  }

  /** One more latency of a request admitted in slow start: once two batches in a row show the queue
   * (controller.ts showsQueue()), the doubling in force is braked. The brake is the fleet's at once:
   * its state is saved as a step of its own and its limit goes to the store, so that the next step
   * starts from it. A replica learns a step at its next report, a window after the replica that made
   * it: one whose requests show the queue while its own state shows no doubling stepped from the
   * window before the running one reads the fleet's state (once a window at most, fleet.ts). */
  private braking(brake: NonNullable<typeof this.brake>, ms: number, client: string): void {
    if (this.closed) return // a request that outlived its limit (a reload): the new one decides
    brake.samples.push({ ms, client })
    if (brake.samples.length < BRAKE_SAMPLES) return
    const queued = showsQueue(brake.samples, brake.thresholdMs)
    // Two batches in a row, each of samples of its own: one batch's median of a wide latency
    // distribution is over the threshold now and then, by chance.
    brake.samples = []
    const confirmed = brake.confirmed
    brake.confirmed = queued
    if (!queued || !confirmed) return
    const { windowMs } = this.options
    const running = Math.floor(this.storeNow() / windowMs) * windowMs
    if (doubling(this.state) && (!this.fleet || this.fleet.timely(running))) {
      this.brake = undefined
      const next = braked(this.state, this.options) as ControllerState
      if (this.fleet) this.fleet.brake(next)
      else this.apply(next, true)
      return
    }
    this.fleet?.readOnce(running)
  }

  /** Watch the requests admitted from now on for the brake of `state` (braking()). */
  private watchBrake(state: ControllerState): void {
    const threshold = brakeThreshold(state, this.options, this.ownMedianMs)
    if (threshold !== undefined)
      this.brake = { since: performance.now(), thresholdMs: threshold, samples: [], confirmed: false }
  }

  /** A request whose client left before its response ended (`startedAt`, `heldMs`: as sample()). Its
   * latency is unknown but at least its time so far: counted only when that is more than the
   * baseline x tolerance, as a latency (the upstream queues: an overloaded upstream with impatient
   * clients must not look idle), never as less (a client that gives up at once must not make the
   * upstream look fast). No drop and no client: nothing is known of its outcome. */
  abandoned(startedAt: number, heldMs = 0): void {
    const baseline = this.state.baselineMs
    if (baseline === undefined) return
    const ms = performance.now() - startedAt - heldMs
    if (!(ms > baseline * this.options.tolerance)) return
    this.window.count++
    this.window.latency.add(ms)
  }

  /** A request's `weight` permits went back: they counted in flight until now. */
  released(weight = 1): void {
    this.inFlight = Math.max(0, this.inFlight - weight)
  }

  status(): AdaptiveStatus {
    const last = this.state.last
    return {
      scope: this.options.scope,
      min: this.options.min,
      max: this.options.max,
      limit: this.state.limit,
      // Rounded for people (the admin API, logs, metrics): the state keeps the exact values.
      estimate: roundTo(this.state.estimate, 2) as number,
      minRttMs: roundTo(this.state.baselineMs, 2),
      rttMs: roundTo(this.latest.rttMs, 2),
      rttAgeMs: this.latest.at === undefined ? undefined : Math.round(performance.now() - this.latest.at),
      requests: last?.requests ?? 0,
      clients: last?.clients ?? 0,
      clientsOver: last?.clientsOver ?? 0,
      gradient: roundTo(this.latest.gradient, 3),
      reason: last?.reason,
      steps: this.state.steps,
      ...(this.fleet?.status() ?? { leader: true, replicas: 1, storeReachable: true }),
    }
  }

  /** Stop: no more reports or steps. The fleet's other replicas go on: this one says it leaves (one
   * call, not awaited), so that it is no longer counted and, if it led, another leads from its next
   * report (without that call, or if the store does not answer it, the lease runs out in 3 windows). */
  close(): void {
    if (this.closed) return
    this.closed = true
    clearTimeout(this.timer)
    this.timer = undefined
    this.fleet?.leave()
  }

  /** The store's time now, as this process estimates it. */
  private storeNow(): number {
    return this.fleet ? this.fleet.now() : Date.now()
  }

  /** Fire shortly after the current window ends (on the store's clock). */
  private arm(): void {
    if (this.closed) return
    const { windowMs } = this.options
    const now = this.storeNow()
    // The window running now, named by its start on the store's clock: reported once it ended.
    const running = Math.floor(now / windowMs) * windowMs
    const at = running + windowMs + Math.min(50, windowMs / 10)
    this.timer = setTimeout(() => this.tick(running), Math.max(1, at - now))
    this.timer.unref()
  }

  private tick(window: number): void {
    if (this.closed) return
    this.ticked = true
    const summary = summarize(this.window, this.options.dropShare)
    this.ownMedianMs = summary.count - summary.drops >= BRAKE_SAMPLES ? summary.latency.median() : undefined
    this.window = liveWindow(this.inFlight)
    this.arm()
    if (this.fleet) this.fleet.ended(window, summary)
    else this.apply(step(this.state, summary, this.options), true)
  }

  /** Take a state as the current one; `stepped`: this process just computed it (it logs changes). */
  private apply(next: ControllerState, stepped: boolean): void {
    const before = this.state.limit
    const fresh = next.steps !== this.state.steps
    this.state = next
    if (fresh) this.remember(next)
    if (next.limit !== before) this.target.setOwn(next.limit)
    // In slow start, past its first clean window: the requests admitted from now on are watched for
    // the brake (braking()) until the next step.
    if (fresh) {
      const threshold = brakeThreshold(next, this.options, this.ownMedianMs)
      this.brake =
        next.slowStart && !next.probing && next.good !== undefined && threshold !== undefined
          ? { since: performance.now(), thresholdMs: threshold, samples: [], confirmed: false }
          : undefined
    }
    if (this.options.scope === 'local') keepLocalState(this.target.store, this.target.space.base, next)
    if (this.options.scope === 'local' && next.limit !== before) {
      void this.target.store.permits
        .setLimit(
          this.target.space,
          next.limit,
          next.limit,
          {
            ttlMs: LIMIT_WINDOWS * this.options.windowMs,
            // Versioned by this process's monotonic clock: a limit made again (a reload) writes over
            // the one it replaces.
            version: Math.floor(performance.timeOrigin + performance.now()),
          },
          this.target.fair,
        )
        .catch(() => undefined)
    }
    if (stepped) this.logChange(next)
  }

  /** Keep what a step measured, if it measured anything, and when. */
  private remember(state: ControllerState): void {
    const { rttMs, gradient } = state.last ?? {}
    if (rttMs !== undefined) this.latest = { ...this.latest, rttMs, at: performance.now() }
    if (gradient !== undefined) this.latest = { ...this.latest, gradient }
  }

  /** A line for a significant change (change-log.ts says which, and when). */
  private logChange(next: ControllerState): void {
    const change = this.changes.stepped(next.limit, performance.now())
    if (!change) return
    const log = this.logger.info ?? this.logger.warn
    log.call(this.logger, 'tollgate: adaptive limit changed', {
      name: this.name,
      ...change,
      reason: next.last?.reason,
      rttMs: roundTo(next.last?.rttMs, 2),
      minRttMs: roundTo(next.baselineMs, 2),
      gradient: roundTo(next.last?.gradient, 3),
    })
  }
}

/** `value` to `digits` decimals (undefined stays undefined). */
function roundTo(value: number | undefined, digits: number): number | undefined {
  if (value === undefined) return undefined
  const scale = 10 ** digits
  return Math.round(value * scale) / scale
}
