// The adaptive limit's controller: one step per window, from one window's summary of finished
// requests to the next limit. Pure (no clock, no I/O): the same step runs over one process's samples
// (the memory store) or the whole fleet's (each replica's summary merged), and is unit-tested on
// synthetic streams.
//
// Two algorithms:
// - 'gradient' (the default; the idea of Envoy's adaptive concurrency filter and Netflix's Gradient2):
//   the limit follows how far the window's median latency (latency.ts) is above the upstream's
//   unloaded latency (the baseline). gradient = clamp(tolerance x baseline / latency, 0.5, 1); the
//   next estimate is estimate x gradient + headroom (to probe upward), smoothed. Once the upstream
//   queues, its latency grows as limit / capacity, so the estimate settles where limit = tolerance x
//   capacity + headroom: the headroom is the queue it keeps. It is sqrt(estimate) / 4 (1.5 requests at
//   a capacity of 32), and twice that while the latency is within 3 % of the baseline (gradient >=
//   0.97: no queue to speak of, so more capacity may be there): a small standing queue, and a quick
//   climb when the upstream gets faster. (A fixed sqrt / 2 kept the limit 20-25 % above a capacity of
//   16 in the bench, where the gateway's own share of each request's time already puts it ~14 %
//   above.) Until the first window whose latency shows queueing (gradient below 0.9), the estimate
//   doubles instead (TCP's slow start), only from evidence: after a window that ran near the limit in
//   force (90 % of it in flight at once) with the latency within 3 % of the baseline, and to at most
//   twice what was in flight; a window in between holds. So a limit starting at 1 finds a capacity of
//   32 in ~6 windows, not ~40. A window at the capacity shows no queueing, so the doubling after it
//   overshoots to ~2x; the window that shows it ends slow start unsmoothed, at estimate x gradient
//   (about the capacity) and never below the last clean limit (`good`). Before that step, the
//   doubling is braked (braked(), as TCP's HyStart ends slow start within the round): once two
//   batches of requests admitted under it show the queue (showsQueue(): their median, and the
//   median client's, a quarter over what a step counts as queueing, or over the replica's own clean
//   median if its requests are slower than the fleet's), slow start ends at the last clean limit,
//   for the fleet, a few of the upstream's round trips into the window rather than at its end. A
//   brake is a state of its own (saved as a step), so the next step goes on from it by the
//   gradient. One client's slow requests do not brake: the median client decides, as for drops.
//   The baseline is the lowest window median since the last probe. A baseline taken only from loaded
//   windows creeps up with the limit (every window queues a little, so the controller accepts a
//   little more each time), so every `probeEvery` windows one window runs at three quarters of the
//   limit, as Envoy's minRTT measurement does (Envoy drops to a fixed minimum): its median is the new
//   baseline. Three quarters, not less: the limit settles within a quarter above the capacity, so
//   three quarters of it leave the upstream unqueued, and the probe costs a quarter of the throughput
//   for a window, not three quarters (at a quarter, an overloaded fleet's queue, critical requests
//   included, waits the whole window). A probe
//   whose latency is above the baseline (by more than 25 % past the tolerance) cannot tell an
//   upstream that got slower from a limit far above a capacity that fell: the next window probes
//   at a quarter, and its median is the baseline. That also learns an upstream that got slower for good, at the next probe.
// - 'aimd': for upstreams that say they are overloaded by errors rather than by latency: + `increase`
//   per window without drops, x `backoff` with drops.
// Both: a window backs off (x `backoff`) for drops, whatever the latency says, when more than half of
// its clients saw more than `dropShare` of their requests dropped (timeouts, the configured statuses):
// the median client decides, so that no client, nor a minority of them, decides for the fleet
// (clients.ts; the counts are the fleet's: every replica's are summed). Drops are left out of the
// latency. No minimum count of drops beside that: timeouts that come one per window (a hung upstream,
// a small limit, a long timeout) must still back off. The limit is only as high as what tested it
// (TCP's congestion window validation, RFC 7661): a window that never had 90 % of it in flight does
// not grow it, and a window below 90 % of every limit it may have run under (the load held the fleet
// back, not the limit) takes the estimate half way down to 1.25 x what it used plus the headroom
// (RFC 2861's decay), and ends slow start once a doubling has been proven. Otherwise a limit left far
// above a light load (slow start's last doubling, or headroom added window after window at 85 % of
// it) met the next surge in full, and the whole of it queued inside the upstream. For 'aimd', a
// window below half the limit does not grow it (Netflix's "app limited" check). An empty window
// changes nothing. The limit stays within [min, max], always an integer.

import { ConfigError } from '../../core/errors.js'
import { positiveInt, rejectUnknown } from '../../core/options.js'
import { LatencyHistogram } from './latency.js'

/** What the requests that ended in one window (on one replica, or merged across the fleet) say. */
export interface WindowSummary {
  /** Requests that ended in the window. */
  count: number
  /** Of them, drops: timeouts and the configured statuses (not in the latency). */
  drops: number
  /** The latencies of the others (admission, or the request body's end, to the end of the response
   * as the upstream or the handler gave it, less the time the client held it back: limit.ts). */
  latency: LatencyHistogram
  /** The window's clients, as units of enough requests to say something (clients.ts). */
  clients: number
  /** Of them, those that saw more than `dropShare` of their requests dropped. */
  clientsOver: number
  /** The most requests in flight at once during the window. */
  maxInFlight: number
}

/** A summary of a window without requests. */
export function emptySummary(maxInFlight = 0): WindowSummary {
  return { count: 0, drops: 0, latency: new LatencyHistogram(), clients: 0, clientsOver: 0, maxInFlight }
}

export type AdaptiveAlgorithm = 'gradient' | 'aimd'

export interface AdaptiveLimitOptions {
  /** Lowest limit (default 1). */
  min?: number
  /** Highest limit: never exceeded (required). */
  max: number
  /** Limit before the first step (default: min). */
  initial?: number
  /** Default 'gradient'. */
  algorithm?: AdaptiveAlgorithm
  /** Length of a window, ms: 100 to 3,600,000 (default 1000). */
  windowMs?: number
  /** gradient: latency up to this many times the baseline counts as unloaded (default 1). */
  tolerance?: number
  /** gradient: windows between two probes of the baseline at three quarters of the limit (default 60). */
  probeEvery?: number
  /** gradient: weight of a step's new estimate against the last one, in (0, 1] (default 0.5). */
  smoothing?: number
  /** Factor on a window with drops, in (0, 1) (default 0.9). */
  backoff?: number
  /** A window backs off for drops when more than half of its clients saw more than this share of
   * their requests dropped, 0 to 0.99 (default 0.05; 0: any drop). */
  dropShare?: number
  /** aimd: added per window without drops (default 1). */
  increase?: number
}

export type ResolvedAdaptiveLimitOptions = Required<AdaptiveLimitOptions>

const KEYS = [
  'min',
  'max',
  'initial',
  'algorithm',
  'windowMs',
  'tolerance',
  'probeEvery',
  'smoothing',
  'backoff',
  'dropShare',
  'increase',
] as const satisfies readonly (keyof AdaptiveLimitOptions)[]

/** A probe of the baseline runs at this share of the limit (see the top of this file). */
const PROBE_SHARE = 0.75
/** ... and at this share, the next window, when that one's latency was above the baseline. */
const DEEP_PROBE_SHARE = 0.25

/** The highest limit an adaptive limit may have (a semaphore's permits). */
export const MAX_ADAPTIVE_LIMIT = 1_000_000

function ratio(
  option: string,
  value: unknown,
  fallback: number,
  low: number,
  high: number,
  open: boolean,
): number {
  if (value === undefined) return fallback
  if (
    typeof value !== 'number' ||
    !Number.isFinite(value) ||
    value > high ||
    value < low ||
    (open && value === low)
  ) {
    throw new ConfigError(option, `a number ${open ? 'above' : 'from'} ${low} to ${high}`, value)
  }
  return value
}

/** An integer option from `low` to `high` (`unit`: what it counts, for the message), or `fallback`. */
function integerIn(
  option: string,
  value: unknown,
  fallback: number,
  low: number,
  high: number,
  unit: string,
): number {
  if (value === undefined) return fallback
  if (!(typeof value === 'number' && Number.isInteger(value) && value >= low && value <= high))
    throw new ConfigError(option, `an integer of ${unit} from ${low} to ${high}`, value)
  return value
}

/** Validate and complete an adaptive limit's options (ConfigError naming the option). `at` prefixes
 * option names in messages, e.g. "adaptive." in the gateway's config. */
export function parseAdaptiveLimitOptions(options: unknown, at = ''): ResolvedAdaptiveLimitOptions {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new ConfigError(
      at.replace(/\.$/, '') || 'adaptive',
      'an options object with at least `max`',
      options,
    )
  }
  rejectUnknown(
    Object.fromEntries(Object.entries(options).map(([k, v]) => [`${at}${k}`, v])),
    KEYS.map((k) => `${at}${k}`),
    { [`${at}permits`]: 'an adaptive limit has `min`, `max` and `initial`', [`${at}limit`]: 'it is `max`' },
  )
  const o = options as AdaptiveLimitOptions
  if (o.max === undefined) throw new ConfigError(`${at}max`, 'the highest limit (required)', undefined)
  const max = positiveInt(`${at}max`, o.max, MAX_ADAPTIVE_LIMIT)
  const min = o.min === undefined ? 1 : positiveInt(`${at}min`, o.min, max)
  const initial = o.initial === undefined ? min : positiveInt(`${at}initial`, o.initial, max)
  if (initial < min)
    throw new ConfigError(`${at}initial`, `an integer from min (${min}) to max (${max})`, initial)
  const algorithm = o.algorithm ?? 'gradient'
  if (algorithm !== 'gradient' && algorithm !== 'aimd') {
    throw new ConfigError(`${at}algorithm`, "'gradient' or 'aimd'", algorithm)
  }
  return {
    min,
    max,
    initial,
    algorithm,
    // A window: 100 ms to an hour (default 1 s). Shorter windows hold too few requests to say anything,
    // and a fleet's replicas report once each: a store call per replica every windowMs.
    windowMs: integerIn(`${at}windowMs`, o.windowMs, 1000, 100, 3_600_000, 'milliseconds'),
    tolerance: ratio(`${at}tolerance`, o.tolerance, 1, 1, 10, false),
    // Every 3rd window at most: a probe's window is stepped a window late across a fleet (fleet.ts),
    // and the windows between two probes must include one that runs at the full limit.
    probeEvery: integerIn(`${at}probeEvery`, o.probeEvery, 60, 3, 1_000_000, 'windows'),
    smoothing: ratio(`${at}smoothing`, o.smoothing, 0.5, 0, 1, true),
    backoff: ratio(`${at}backoff`, o.backoff, 0.9, 0, 0.99, true),
    dropShare: ratio(`${at}dropShare`, o.dropShare, 0.05, 0, 0.99, false),
    increase: o.increase === undefined ? 1 : positiveInt(`${at}increase`, o.increase, MAX_ADAPTIVE_LIMIT),
  }
}

/** The controller's state between windows (shared through the store for a fleet-wide limit). */
export interface ControllerState {
  /** The limit in force: an integer in [min, max]. */
  limit: number
  /** The unrounded estimate the next step starts from (during a probe, the limit is PROBE_SHARE of it). */
  estimate: number
  /** gradient: the unloaded latency, ms: the lowest window median since the last probe. */
  baselineMs: number | undefined
  /** Steps taken. */
  steps: number
  /** gradient: the limit in force is PROBE_SHARE of the estimate, for one window (a probe of the
   * baseline). */
  probing: boolean
  /** gradient: the step whose window is that probe's (its median latency is the new baseline). It is the
   * next step for a local limit, the one after it across a fleet (its windows are stepped a window
   * late: fleet.ts). */
  probeAt?: number | undefined
  /** gradient: no window has shown queueing yet: the estimate doubles after each window that ran near
   * the limit without queueing. */
  slowStart: boolean
  /** gradient, in slow start: the largest limit whose window ran at 90 % of it or more with the
   * latency within 3 % of the baseline (the last clean limit): where slow start ends. */
  good?: number | undefined
  /** gradient: the probe in force runs at DEEP_PROBE_SHARE of the estimate. */
  deep?: boolean | undefined
  /** The limit in force before the last step (a window stepped late may have run under it). */
  previous?: number | undefined
  /** What the last step saw and did (metrics, the admin API, logs). */
  last?: StepReport | undefined
}

export interface StepReport {
  /** The window's median latency of requests that were not drops, ms (undefined: none). */
  rttMs: number | undefined
  /** Requests that ended in the window stepped, its clients (units: clients.ts) and those over
   * `dropShare`. */
  requests?: number | undefined
  clients?: number | undefined
  clientsOver?: number | undefined
  /** The baseline the step compared it with, ms (gradient). */
  minRttMs: number | undefined
  /** gradient: tolerance x baseline / rtt, clamped to [0.5, 1]. */
  gradient: number | undefined
  /** What moved the limit. */
  reason: 'empty' | 'drops' | 'app-limited' | 'gradient' | 'slow-start' | 'increase' | 'probe' | 'brake'
}

export function initialState(options: ResolvedAdaptiveLimitOptions): ControllerState {
  return {
    limit: options.initial,
    estimate: options.initial,
    baselineMs: undefined,
    steps: 0,
    probing: false,
    slowStart: true,
  }
}

/** Slow start's brake looks at batches of so many latencies of requests admitted under a doubling. */
export const BRAKE_SAMPLES = 16

/** A latency of a request admitted under a doubling, and its client's key (clients.ts; '' unknown). */
export interface BrakeSample {
  ms: number
  client: string
}

/**
 * Whether the requests admitted under a doubling show the queue (the brake's evidence, braked()):
 * BRAKE_SAMPLES of them, whose median is over `thresholdMs`, and so is the median of more than half
 * of their clients' (each client's own median). The median client decides, as it does for drops
 * (clients.ts): one client's slow requests (an expensive query, a slow reader), however many, do not
 * brake the fleet's slow start; the whole traffic of a lone client does.
 */
export function showsQueue(samples: readonly BrakeSample[], thresholdMs: number): boolean {
  if (samples.length < BRAKE_SAMPLES) return false
  if (!(medianOf(samples.map((sample) => sample.ms)) > thresholdMs)) return false
  const byClient = new Map<string, number[]>()
  for (const { ms, client } of samples) {
    const list = byClient.get(client)
    if (list) list.push(ms)
    else byClient.set(client, [ms])
  }
  let over = 0
  for (const list of byClient.values()) if (medianOf(list) > thresholdMs) over++
  return 2 * over > byClient.size
}

function medianOf(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  const half = sorted.length >> 1
  return sorted.length % 2 === 1
    ? (sorted[half] as number)
    : ((sorted[half - 1] as number) + (sorted[half] as number)) / 2
}

/** The latency above which requests admitted under a doubling show the queue: a quarter over the
 * queueing a step would see (tolerance x baseline / 0.9), or over this process's own median of the
 * clean window before the doubling (`ownMs`), if that is higher: a replica whose requests are slower
 * than the fleet's (another zone, a busy event loop) judges them against its own. */
export function brakeThreshold(
  state: ControllerState,
  options: ResolvedAdaptiveLimitOptions,
  ownMs: number | undefined,
): number | undefined {
  if (state.baselineMs === undefined) return undefined
  return (1.25 / 0.9) * Math.max(options.tolerance * state.baselineMs, ownMs ?? 0)
}

/** A doubling of slow start finds the capacity by passing it, and the window that shows it is
 * stepped only once it ended: a window at up to twice the capacity. So while a doubling past the last
 * clean limit is in force, the requests admitted under it are watched (the idea of TCP's HyStart,
 * which ends slow start on the round trips of the round in progress), and once they show the queue
 * (showsQueue()), slow start ends at the last clean limit, at once: the state after a brake
 * (undefined: none to brake). It is a step's state (same `steps`: the next step's window is the
 * braked one, which ran at the doubled limit until then), so that the next step goes on from the last
 * clean limit by the gradient, not from the doubling as if its window had been clean. */
export function braked(
  state: ControllerState,
  options: ResolvedAdaptiveLimitOptions,
): ControllerState | undefined {
  if (!doubling(state) || state.good === undefined) return undefined
  return {
    ...state,
    limit: Math.round(bounded(state.good, options)),
    estimate: bounded(state.good, options),
    slowStart: false,
    previous: state.limit,
    last: {
      ...state.last,
      rttMs: state.last?.rttMs,
      minRttMs: state.baselineMs,
      gradient: undefined,
      reason: 'brake',
    },
  }
}

/** A doubling of slow start past the last clean limit is in force (what the brake watches). */
export function doubling(state: ControllerState): boolean {
  return (
    state.slowStart &&
    !state.probing &&
    state.good !== undefined &&
    state.baselineMs !== undefined &&
    state.limit > state.good
  )
}

/** `estimate` within [min, max]. */
export function bounded(estimate: number, options: ResolvedAdaptiveLimitOptions): number {
  return Math.min(options.max, Math.max(options.min, estimate))
}

/** One step: the state after a window whose requests `summary` describes. `lag`: how many windows
 * after the step's the window it steps ran (0: the one just ended, local; 1: the one before, fleet). */
export function step(
  state: ControllerState,
  summary: WindowSummary,
  options: ResolvedAdaptiveLimitOptions,
  lag = 0,
): ControllerState {
  const median = summary.latency.median()
  // A median of 0 (latencies rounded away) or worse says nothing: no latency sample this window.
  const rttMs = median !== undefined && Number.isFinite(median) && median > 0 ? median : undefined
  const gradientMode = options.algorithm === 'gradient'
  const steps = state.steps + 1
  // This step's window ran at PROBE_SHARE of the limit: a probe of the baseline.
  const probeWindow = state.probeAt === steps || (state.probeAt === undefined && state.probing)
  let baselineMs = state.baselineMs
  // A probe at PROBE_SHARE whose latency is above the baseline says either that the upstream got
  // slower or that the limit is that far above its capacity: a probe at DEEP_PROBE_SHARE tells.
  const deeper =
    gradientMode &&
    probeWindow &&
    state.deep !== true &&
    rttMs !== undefined &&
    baselineMs !== undefined &&
    rttMs > 1.25 * options.tolerance * baselineMs
  if (gradientMode && rttMs !== undefined && !deeper) {
    baselineMs = probeWindow || baselineMs === undefined ? rttMs : Math.min(baselineMs, rttMs)
  }
  let slowStart = state.slowStart && gradientMode
  let good = state.good
  const done = (next: number, report: Omit<StepReport, 'rttMs' | 'minRttMs'>): ControllerState => {
    const estimate = bounded(next, options)
    // A probe of the baseline every probeEvery windows: the next window runs at PROBE_SHARE of the
    // limit (DEEP_PROBE_SHARE after a probe that could not tell).
    const probing = deeper || (gradientMode && steps % options.probeEvery === 0)
    const probeAt = probing ? steps + 1 + lag : state.probeAt
    const share = deeper ? DEEP_PROBE_SHARE : PROBE_SHARE
    const limit = Math.round(bounded(probing ? estimate * share : estimate, options))
    const { count: requests, clients, clientsOver } = summary
    const last = { rttMs, minRttMs: baselineMs, requests, clients, clientsOver, ...report }
    const previous = state.limit
    const deep = probing && deeper
    return { limit, estimate, baselineMs, steps, probing, probeAt, deep, slowStart, good, previous, last }
  }
  if (probeWindow) return done(state.estimate, { gradient: undefined, reason: 'probe' })
  if (summary.count === 0) return done(state.estimate, { gradient: undefined, reason: 'empty' })
  if (summary.clientsOver > 0 && 2 * summary.clientsOver > summary.clients) {
    slowStart = false
    return done(state.estimate * options.backoff, { gradient: undefined, reason: 'drops' })
  }
  const appLimited = summary.maxInFlight < state.limit / 2
  // gradient: a window that ran below 90 % of the limit did not test it (TCP's congestion window
  // validation, RFC 7661); below 90 % of the lower of the limits it may have run under (a window
  // stepped late ran under the one before), the load held it back, not the limit.
  const tested = summary.maxInFlight >= 0.9 * state.limit
  const loadLimited = summary.maxInFlight < 0.9 * Math.min(state.limit, state.previous ?? state.limit)
  if (!gradientMode) {
    if (appLimited) return done(state.estimate, { gradient: undefined, reason: 'app-limited' })
    return done(state.estimate + options.increase, { gradient: undefined, reason: 'increase' })
  }
  // No latency to compare (every mean rounded to 0): hold.
  if (rttMs === undefined || baselineMs === undefined)
    return done(state.estimate, { gradient: undefined, reason: 'empty' })
  const gradient = Math.min(1, Math.max(0.5, (options.tolerance * baselineMs) / rttMs))
  if (gradient < 0.9) slowStart = false
  if (slowStart) {
    // Doubling needs a window that ran near the limit now in force: across a fleet the window stepped
    // may have run under the limit before the last step (its replicas learn a limit a window later),
    // and doubling on it would overshoot by another doubling before the queueing shows. Once a
    // doubling has been proven (`good`), a window below the limit says the load, not the limit, is
    // what holds the fleet back: slow start ends there, and the unused part of the limit goes as
    // below. (A doubling made from such a window when the load comes back is what overshot: the
    // limit doubled past the capacity just as a surge arrived.)
    if (loadLimited && good !== undefined) {
      slowStart = false
      return done(Math.max(good, unused(state.estimate)), { gradient, reason: 'app-limited' })
    }
    if (!tested) return done(state.estimate, { gradient, reason: 'app-limited' })
    // Grow only from evidence: a window that queued a little (gradient 0.9 to 0.97) holds.
    if (gradient < 0.97) return done(state.estimate, { gradient, reason: 'slow-start' })
    good = Math.max(good ?? 0, state.limit)
    // At most twice what was in flight: the window proved that much, no more.
    return done(Math.min(2 * state.estimate, 2 * summary.maxInFlight), { gradient, reason: 'slow-start' })
  }
  // The first window that queues ends slow start, unsmoothed (the doubling that showed the knee is up
  // to twice the capacity, and a smoothed step from it overshoots for windows): at what its queueing
  // says the capacity is (estimate x gradient), never below the last clean limit. (The last clean
  // limit alone would halve the limit when a window's latency is noise, not the knee.)
  if (state.slowStart && good !== undefined) {
    const exit = Math.max(Math.min(good, state.estimate), state.estimate * gradient)
    return done(exit, { gradient, reason: 'gradient' })
  }
  const next = state.estimate * gradient + headroomOf(state.estimate, gradient)
  const smoothed = state.estimate * (1 - options.smoothing) + next * options.smoothing
  if (loadLimited)
    return done(Math.min(smoothed, unused(state.estimate)), { gradient, reason: 'app-limited' })
  if (!tested && smoothed > state.estimate) return done(state.estimate, { gradient, reason: 'app-limited' })
  // The window after a brake ran at the doubling until the brake: its queue is the doubling's, not
  // the last clean limit's, which it never goes below.
  if (state.last?.reason === 'brake' && good !== undefined)
    return done(Math.max(good, smoothed), { gradient, reason: 'gradient' })
  return done(smoothed, { gradient, reason: 'gradient' })

  /** The estimate after a window that did not test it: half way down to what the window used, with
   * a quarter more and the headroom on top, never up. A limit left far above the load is no
   * evidence of capacity, and a surge would meet it in full: the whole limit admitted at once into
   * an upstream that takes less (TCP decays an unused window the same way, RFC 2861). */
  function unused(estimate: number): number {
    const floor = 1.25 * summary.maxInFlight + headroomOf(estimate, 1)
    return Math.min(estimate, Math.max(floor, (estimate + floor) / 2))
  }
}

/** The queue the gradient controller keeps on purpose: sqrt(estimate) / 4, twice that when the
 * latency shows no queue (gradient >= 0.97). */
function headroomOf(estimate: number, gradient: number): number {
  return (Math.sqrt(estimate) / 4) * (gradient >= 0.97 ? 2 : 1)
}
