// The adaptive limit of one bucket: the controller (controller.ts) driven by what the requests
// it admits do, applied to the bucket's permits.
//
// scope 'fleet' (the default), one limit for every replica sharing the store:
// - every replica measures each request it admitted (admission to the end of its response as the
//   upstream or the handler gave it, less the client's time; whether it was a drop, and whose: see
//   "What is measured" below) and adds it to its summary of the current window;
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
// scope 'local': this process's own limit from its own samples, each window, on a store of its own in
// memory: N replicas then run N limits, as a per-instance limiter does (Envoy's adaptive concurrency,
// Netflix's concurrency-limits). The benchmark compares the two (`npm run bench -- adaptive`). That
// store is one per process and shared store (localStoreOf), and keeps each bucket's last state: a
// limit made again for the same bucket (a gateway's reload) shares the permit set with the holders
// and waiters of the one it replaces (the limit binds them all, as on Redis) and goes on from its
// state.
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
import { randomBytes } from 'node:crypto'
import { ConfigError } from '../../core/errors.js'
import type { KeySpace } from '../../core/keys.js'
import { createMemoryStore } from '../../core/memory/store.js'
import type { AdaptiveReport, AdaptiveReportReply, FairCall, Store } from '../../core/protocol/store.js'
import {
  type AdaptiveLimitOptions,
  BRAKE_SAMPLES,
  type BrakeSample,
  bounded,
  brakeThreshold,
  braked,
  type ControllerState,
  initialState,
  doubling,
  parseAdaptiveLimitOptions,
  type ResolvedAdaptiveLimitOptions,
  showsQueue,
  step,
  type StepReport,
  type WindowSummary,
} from './controller.js'
import { LimitChangeLog } from './change-log.js'
import { ClientDrops, clientKey } from './clients.js'
import { LatencyHistogram } from './latency.js'
/** Where an adaptive limit logs (the middleware's and gateway's logger). */
export interface AdaptiveLogger {
  warn(message: string, meta?: Record<string, unknown>): void
  info?(message: string, meta?: Record<string, unknown>): void
}

export type { AdaptiveLimitOptions } from './controller.js'

/** What counts as a drop: an upstream status, every 5xx, or a timeout (no answer in time). */
export type DropRule = number | '5xx' | 'timeout'

export interface AdaptiveOptions extends AdaptiveLimitOptions {
  /** Which outcomes are drops (back off, whatever the latency, once more than `dropShare` of a
   * window's requests are). Not 429 by default: it usually answers one user, not the upstream's
   * load; add it for an upstream that says "overloaded" with a 429. @default ['timeout', 503] */
  drops?: readonly DropRule[]
  /** 'fleet': one limit for every process sharing the store; 'local': this process's own.
   * @default 'fleet' */
  scope?: 'fleet' | 'local'
}

export interface ResolvedAdaptiveOptions extends ResolvedAdaptiveLimitOptions {
  drops: readonly DropRule[]
  scope: 'fleet' | 'local'
}

/** How a request admitted under an adaptive limit ended; undefined: it did not (the client left
 * before its response): not counted. */
export interface Outcome {
  /** The response's status. */
  status?: number | undefined
  /** No answer in time (the gateway's upstream timeout). */
  timedOut?: boolean | undefined
  /** A drop, whatever the rules say (a library lease marked with `adaptive.dropped()`). */
  dropped?: boolean | undefined
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

const DEFAULT_DROPS: readonly DropRule[] = Object.freeze(['timeout', 503])
/** A leader leads this many windows without reporting again. */
const LEADER_WINDOWS = 3
/** The fleet's limit in the store outlives the last step by this many windows. */
const LIMIT_WINDOWS = 10
/** The fleet's state outlives its last report by this long (then a fleet starts from `initial`). */
const STATE_TTL_MS = 24 * 3_600_000
/** Store trouble is logged at most this often. */
const WARN_EVERY_MS = 30_000

/** Validate an adaptive limit's options (ConfigError naming the option; `at` prefixes names, e.g.
 * "adaptive."). */
export function parseAdaptiveOptions(options: unknown, at = 'adaptive.'): ResolvedAdaptiveOptions {
  const object = typeof options === 'object' && options !== null && !Array.isArray(options)
  // drops and scope are this layer's; the rest are the controller's (unknown ones refused there).
  const { drops, scope, ...controller } = (object ? options : {}) as Record<string, unknown>
  const resolved = parseAdaptiveLimitOptions(object ? controller : options, at)
  let rules = DEFAULT_DROPS
  if (drops !== undefined) {
    if (
      !Array.isArray(drops) ||
      !drops.every(
        (rule) =>
          rule === '5xx' ||
          rule === 'timeout' ||
          (typeof rule === 'number' && Number.isInteger(rule) && rule >= 400 && rule <= 599),
      )
    ) {
      throw new ConfigError(`${at}drops`, "a list of statuses (400-599), '5xx' and 'timeout'", drops)
    }
    rules = Object.freeze([...(drops as DropRule[])])
  }
  if (scope !== undefined && scope !== 'fleet' && scope !== 'local')
    throw new ConfigError(`${at}scope`, "'fleet' or 'local'", scope)
  return { ...resolved, drops: rules, scope: (scope as 'fleet' | 'local' | undefined) ?? 'fleet' }
}

/** Whether an outcome is a drop under `rules`. */
export function isDrop(outcome: Outcome, rules: readonly DropRule[]): boolean {
  if (outcome.dropped) return true
  if (outcome.timedOut) return rules.includes('timeout')
  const status = outcome.status
  if (status === undefined) return false
  return rules.includes(status) || (status >= 500 && status <= 599 && rules.includes('5xx'))
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

/** Shared store -> the memory store of this process's local limits over it. */
const localStores = new WeakMap<Store, Store>()
/** Local store -> bucket -> the last state of its local limit. */
const localStates = new WeakMap<Store, Map<string, ControllerState>>()

/** The store of this process's local adaptive limits over `store` (one per process and store: a limit
 * made again for a bucket finds the permit set, holders and state of the one it replaces). */
export function localStoreOf(store: Store): Store {
  let local = localStores.get(store)
  if (!local) {
    local = createMemoryStore({ prefix: store.prefix })
    localStores.set(store, local)
  }
  return local
}

export class AdaptiveLimit {
  /** This process among the fleet's replicas. */
  readonly replica = randomBytes(9).toString('base64url')
  private state: ControllerState
  private window: LiveWindow = liveWindow(0)
  private inFlight = 0
  private timer: NodeJS.Timeout | undefined
  private reporting = false
  private closed = false
  /** The window timer fired once (it runs on the store's clock from then on). */
  private ticked = false
  /** The store's clock minus Date.now(), from the last reply (fleet). */
  private offsetMs = 0
  private leader = false
  private replicas = 1
  private storeReachable = true
  private lastWarnAt = Number.NEGATIVE_INFINITY
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
  /** The window in which this process last read the fleet's state to brake (readAndBrake()). */
  private readWindow = -1
  /** The window whose step made the state in force (fleet; -1: none known): a brake is saved as a
   * step just after it. */
  private stateWindow = -1

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
    const saved =
      options.scope === 'local' ? localStates.get(target.store)?.get(target.space.base) : undefined
    this.state = saved ? withinBounds(saved, options) : initialState(options)
    this.changes = new LimitChangeLog(options, this.state.limit)
    this.remember(this.state)
    target.setOwn(this.state.limit)
    this.arm()
    this.ready = options.scope === 'fleet' ? this.join().catch(() => undefined) : Promise.resolve()
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
   * window before the running one reads the fleet's state (once a window at most, readAndBrake()). */
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
    const { windowMs, scope } = this.options
    const running = Math.floor(this.storeNow() / windowMs) * windowMs
    const timely = scope === 'local' || this.stateWindow >= running - windowMs
    if (doubling(this.state) && timely) {
      this.brake = undefined
      const next = braked(this.state, this.options) as ControllerState
      if (scope === 'local') {
        this.apply(next, true)
        return
      }
      const based = this.stateWindow
      this.apply(next, false)
      void this.commitBrake(next, based)
      return
    }
    if (scope === 'fleet' && this.readWindow !== running) {
      this.readWindow = running
      void this.readAndBrake()
    }
  }

  /** A report of nothing in the window running now: how a replica joins the fleet (and reads its
   * state) or leaves it. */
  private emptyReport(as: { join: true } | { leave: true }): AdaptiveReport {
    const { windowMs } = this.options
    return {
      replica: this.replica,
      window: Math.floor(this.storeNow() / windowMs) * windowMs,
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
      const reply = await (this.target.store.adaptive as NonNullable<Store['adaptive']>).report(
        this.target.space,
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
    if (!reply || this.closed || reply.state === undefined) return
    const saved = parseState(reply.state, this.options)
    const { windowMs } = this.options
    const running = Math.floor(this.storeNow() / windowMs) * windowMs
    if (!saved || !doubling(saved) || reply.stepped < running - windowMs) return
    this.stateWindow = reply.stepped
    this.apply(saved, false)
    const threshold = brakeThreshold(saved, this.options, this.ownMedianMs)
    if (threshold !== undefined)
      this.brake = { since: performance.now(), thresholdMs: threshold, samples: [], confirmed: false }
  }

  /** Save a brake as a step just after the one whose state it braked (windows are named by their
   * start, so `based + 1` orders before the next window's step): the next step reads it and goes on
   * from it. A step that landed meanwhile refuses it: then the fleet's state is that step's, and this
   * process takes it at its next report. */
  private async commitBrake(next: ControllerState, based: number): Promise<void> {
    if (based < 0) return
    const store = this.target.store
    const { windowMs } = this.options
    try {
      const committed = await (store.adaptive as NonNullable<Store['adaptive']>).commit(this.target.space, {
        window: based + 1,
        based,
        state: JSON.stringify(next),
        stateTtlMs: STATE_TTL_MS,
        windowMs,
      })
      if (!committed) return
      if (this.stateWindow === based) this.stateWindow = based + 1
      this.logChange(next)
      await store.permits.setLimit(
        this.target.space,
        next.limit,
        next.limit,
        { ttlMs: LIMIT_WINDOWS * windowMs, version: based + 1 },
        this.target.fair,
      )
    } catch (error) {
      this.unreachable(error)
    }
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
      leader: this.options.scope === 'local' || this.leader,
      replicas: this.options.scope === 'local' ? 1 : this.replicas,
      storeReachable: this.storeReachable,
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
    const adaptive = this.target.store.adaptive
    if (this.options.scope !== 'fleet' || !adaptive) return
    const leaving = async () => adaptive.report(this.target.space, this.emptyReport({ leave: true }))
    leaving().catch(() => undefined)
  }

  /** Start from evidence: one call at construction that counts this replica and reads the fleet's
   * saved state, applied at once, so that a restarted or newly deployed replica runs at the fleet's
   * last limit, not at `initial` (which applies to a bucket never seen, or unseen for STATE_TTL_MS). */
  private async join(): Promise<void> {
    const reply = await this.readFleet(true) // (failed: the first report tries again)
    if (!reply || this.closed) return
    this.replicas = reply.replicas
    // The timer was armed on this process's clock: armed again on the store's, unless it fired.
    if (!this.ticked) {
      clearTimeout(this.timer)
      this.arm()
    }
    const saved = reply.state === undefined ? undefined : parseState(reply.state, this.options)
    if (saved) this.stateWindow = reply.stepped
    if (saved && saved.steps !== this.state.steps) this.apply(saved, false)
  }

  /** The store's time now, as this process estimates it. */
  private storeNow(): number {
    return Date.now() + this.offsetMs
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
    if (this.options.scope === 'local') {
      this.apply(step(this.state, summary, this.options), true)
      return
    }
    // One report at a time: a slow store skips windows rather than piling calls up.
    if (this.reporting) return
    this.reporting = true
    void this.report(window, summary).finally(() => {
      this.reporting = false
    })
  }

  private async report(window: number, summary: WindowSummary): Promise<void> {
    const store = this.target.store
    const { windowMs } = this.options
    let reply: AdaptiveReportReply
    try {
      const asked = Date.now()
      const latency = summary.latency.entries()
      reply = await (store.adaptive as NonNullable<Store['adaptive']>).report(this.target.space, {
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
    if (this.closed) return // closed meanwhile: it said it leaves, it steps nothing more
    this.leader = reply.leads
    this.replicas = reply.replicas
    const saved = reply.state === undefined ? undefined : parseState(reply.state, this.options)
    if (saved) {
      this.stateWindow = reply.stepped
      this.apply(saved, false)
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
    let next = step(saved ?? this.state, stepped, this.options, lag)
    try {
      const commit = (state: ControllerState, based: number) =>
        (store.adaptive as NonNullable<Store['adaptive']>).commit(this.target.space, {
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
        if (reply.stepped < 0 || this.closed) return
        const again = await this.readFleet()
        const brake =
          again?.stepped === reply.stepped + 1 ? parseState(again.state ?? '', this.options) : undefined
        if (!brake || this.closed) return
        next = step(brake, stepped, this.options, lag)
        if (!(await commit(next, reply.stepped + 1))) return
      }
      this.stateWindow = window - lag * windowMs
      this.apply(next, true)
      // Versioned by the window: a later step's limit already there (this process paused since its
      // commit) is not written over.
      await store.permits.setLimit(
        this.target.space,
        next.limit,
        next.limit,
        { ttlMs: LIMIT_WINDOWS * windowMs, version: window - lag * windowMs },
        this.target.fair,
      )
    } catch (error) {
      this.unreachable(error)
    }
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
    if (this.options.scope === 'local') {
      const states = localStates.get(this.target.store) ?? new Map<string, ControllerState>()
      localStates.set(this.target.store, states.set(this.target.space.base, next))
    }
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

  private reached(): void {
    if (this.storeReachable) return
    this.storeReachable = true
    this.logger.warn('tollgate: adaptive limit: the store answers again; steps resume', { name: this.name })
  }

  private unreachable(error: unknown): void {
    this.storeReachable = false
    const now = performance.now()
    if (now - this.lastWarnAt < WARN_EVERY_MS) return
    this.lastWarnAt = now
    this.logger.warn('tollgate: adaptive limit held: the store does not answer', {
      name: this.name,
      limit: this.state.limit,
      error: error instanceof Error ? error.message : String(error),
    })
  }
}

/** The window being measured: the summary's counts, and the clients' drops (clients.ts). */
interface LiveWindow {
  count: number
  drops: number
  latency: LatencyHistogram
  clients: ClientDrops
  maxInFlight: number
}

function liveWindow(maxInFlight: number): LiveWindow {
  return { count: 0, drops: 0, latency: new LatencyHistogram(), clients: new ClientDrops(), maxInFlight }
}

/** What a window measured, for the controller: the clients as units, and those over `share`. The
 * store adds up the replicas' most in flight at once: more than the fleet had at once when their
 * peaks came at different times, exactly it when a burst came to all at once. An upper bound, so
 * that a limit is never taken below what a burst used (a mean, or a share of each peak, took a
 * fleet's limit down to 9 for bursts of 90 every window: the limit decays only toward what a
 * window used). */
function summarize(window: LiveWindow, share: number): WindowSummary {
  const { units, over } = window.clients.units(share)
  const { count, drops, latency, maxInFlight } = window
  return { count, drops, latency, clients: units, clientsOver: over, maxInFlight }
}

/** A saved state, within this process's min and max (a reload may have changed them), or undefined
 * when it is not one. */
function parseState(text: string, options: ResolvedAdaptiveOptions): ControllerState | undefined {
  let state: ControllerState
  try {
    state = JSON.parse(text) as ControllerState
  } catch {
    return undefined
  }
  if (!Number.isFinite(state.limit) || !Number.isFinite(state.estimate)) return undefined
  return withinBounds(state, options)
}

/** A state with its limit and estimate within this process's min and max. */
function withinBounds(state: ControllerState, options: ResolvedAdaptiveOptions): ControllerState {
  return {
    ...state,
    limit: Math.round(bounded(state.limit, options)),
    estimate: bounded(state.estimate, options),
  }
}

/** `value` to `digits` decimals (undefined stays undefined). */
function roundTo(value: number | undefined, digits: number): number | undefined {
  if (value === undefined) return undefined
  const scale = 10 ** digits
  return Math.round(value * scale) / scale
}
