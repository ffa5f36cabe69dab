// The adaptive limit's controller on synthetic windows (no Redis, no clock): it converges on an
// upstream's capacity, holds there, follows a capacity change, backs off on drops above a share of
// the window's requests, and stays within min and max; and which of its changes get a log line. One window in probeEvery runs at three quarters of the limit to measure the baseline: the
// checks leave those out. The upstream model: C requests served at once in S ms each, the rest queue inside it,
// so with L in flight (clients always offer more than the limit) a request takes S x max(1, L / C).
import { describe, expect, it } from 'vitest'
import {
  BRAKE_SAMPLES,
  brakeThreshold,
  braked,
  type ControllerState,
  emptySummary,
  initialState,
  parseAdaptiveLimitOptions,
  type ResolvedAdaptiveLimitOptions,
  showsQueue,
  step,
  type WindowSummary,
} from '../../src/primitives/adaptive/controller.js'
import { LimitChangeLog } from '../../src/primitives/adaptive/change-log.js'
import { bucketOf, LATENCY_BUCKETS, LatencyHistogram } from '../../src/primitives/adaptive/latency.js'
import { ClientDrops, clientKey, MAX_CLIENTS, unitOf } from '../../src/primitives/adaptive/clients.js'
import { ConfigError } from '../../src/index.js'

/** One window of a saturated upstream of capacity `c` and service time `s` ms, at limit `limit`. */
function window(limit: number, c: number, s: number, windowMs: number, jitter = 0): WindowSummary {
  const latency = s * Math.max(1, limit / c) * (1 + jitter)
  const count = Math.round((limit * windowMs) / latency)
  return win(count, 0, count * latency, limit)
}

/** A window of `count` requests from one client, `drops` of them drops, the others' latencies adding
 * up to `latencySumMs` (each the same); the client is over the share above 5 %, or as `over` says. */
function win(count: number, drops: number, latencySumMs: number, maxInFlight: number, over?: boolean) {
  const latency = new LatencyHistogram()
  for (let i = 0; i < count - drops; i++) latency.add(latencySumMs / (count - drops))
  const clientsOver = (over ?? drops / count > 0.05) ? 1 : 0
  return { count, drops, latency, clients: count > 0 ? 1 : 0, clientsOver, maxInFlight }
}

/** Run `windows` steps against capacity c(i) and return every limit. */
function run(
  state: ControllerState,
  options: ResolvedAdaptiveLimitOptions,
  windows: number,
  c: (i: number) => number,
  s = 10,
): { limits: number[]; state: ControllerState } {
  const limits: number[] = []
  // A deterministic jitter of ±5 % so the baseline is not exact.
  for (let i = 0; i < windows; i++) {
    const jitter = 0.05 * Math.sin(i * 1.7)
    state = step(state, window(state.limit, c(i), s, options.windowMs, jitter), options)
    // A probe window (below the limit, by design) is left out: NaN.
    limits.push(state.probing ? Number.NaN : state.limit)
  }
  return { limits, state }
}

const within = (value: number, target: number, share: number) =>
  Number.isNaN(value) || (value >= target * (1 - share) && value <= target * (1 + share))

describe('the gradient controller', () => {
  const options = parseAdaptiveLimitOptions({ min: 1, max: 1000, initial: 4 })

  it('converges on the capacity within 10 windows and holds there within ±25 %, once in probeEvery at three quarters', () => {
    const { limits, state } = run(initialState(options), options, 180, () => 32)
    for (const limit of limits.slice(10)) expect(within(limit, 32, 0.25)).toBe(true)
    expect(limits.filter((limit) => Number.isNaN(limit))).toHaveLength(3) // windows 60, 120 and 180
    expect(state.baselineMs).toBeGreaterThan(9)
    expect(state.baselineMs).toBeLessThan(11)
  })

  it('the baseline does not creep up with the limit: the probes keep it at the unloaded latency', () => {
    const { limits } = run(initialState(options), options, 600, () => 32)
    for (const limit of limits.slice(500)) expect(within(limit, 32, 0.25)).toBe(true)
  })

  it('follows the capacity down when it halves, within 5 windows, and back up', () => {
    const c = (i: number) => (i < 60 ? 32 : i < 120 ? 16 : 32)
    const { limits } = run(initialState(options), options, 200, c)
    // Within ±25 % of the new capacity 5 windows after the drop, and stays there.
    for (const limit of limits.slice(65, 120)) expect(within(limit, 16, 0.25)).toBe(true)
    for (const limit of limits.slice(170)) expect(within(limit, 32, 0.25)).toBe(true)
  })

  it("with the gateway's own share of each request's time, the standing queue stays small: within +25 % of a capacity of 16, and back up to 32 within 10 windows", () => {
    // Each request also spends d = 1.4 ms in the gateway (14 % of S), outside the upstream: the
    // upstream is full from L = C (1 + d / S) on, and latency is then S x L / C (see the bench).
    const d = 1.4
    const s = 10
    const overhead = (limit: number, c: number): WindowSummary => {
      const latency = Math.max(d + s, (s * limit) / c)
      const count = Math.round((limit * options.windowMs) / latency)
      return win(count, 0, count * latency, limit)
    }
    let state = initialState(options)
    const limits: number[] = []
    for (let i = 0; i < 200; i++) {
      state = step(state, overhead(state.limit, i < 100 ? 16 : 32), options)
      limits.push(state.probing ? Number.NaN : state.limit)
    }
    for (const limit of limits.slice(20, 100)) expect(within(limit, 16, 0.25), `${limits}`).toBe(true)
    for (const limit of limits.slice(110)) expect(within(limit, 32, 0.25), `${limits}`).toBe(true)
  })

  it('an upstream that got slower for good is learnt again: the limit does not collapse to min', () => {
    const slower = (i: number) => (i < 60 ? 32 : 32)
    let state = initialState(options)
    state = run(state, options, 60, slower, 10).state
    // S doubles from now on (same capacity): latency at the capacity is 2x the old baseline.
    const after = run(state, options, 120, slower, 20).limits
    for (const limit of after.slice(-20)) expect(within(limit, 32, 0.25)).toBe(true)
  })

  it('backs off on a window with more than dropShare (5 %) drops, whatever the latency', () => {
    let state = run(initialState(options), options, 80, () => 32).state
    const before = state.estimate
    state = step(state, win(100, 6, 940, state.limit), options)
    expect(state.estimate).toBeCloseTo(before * 0.9)
    expect(state.last?.reason).toBe('drops')
  })

  it('a window with drops up to dropShare steps on the latency of the rest: one client’s 503 per window among many requests does not back off', () => {
    let state = run(initialState(options), options, 80, () => 32).state
    const limit = state.limit
    // 5 of 100 (the share, not above it), at the unloaded latency: the gradient decides, and holds.
    for (let i = 0; i < 30; i++) {
      state = step(state, win(100, 5, 95 * 10, state.limit), options)
      expect(state.last?.reason, `window ${i}`).not.toBe('drops')
    }
    expect(state.limit).toBeGreaterThanOrEqual(limit)
    // Above the share, however few the requests (a hung upstream's timeouts come one per window).
    const full = state.estimate
    state = step(state, win(1, 1, 0, state.limit), options)
    expect(state.last?.reason).toBe('drops')
    expect(state.estimate).toBeCloseTo(full * 0.9)
    // dropShare 0: any drop backs off, as before the share existed.
    const strict = parseAdaptiveLimitOptions({ min: 1, max: 1000, initial: 4, dropShare: 0 })
    const before = state.estimate
    const next = step(state, win(1000, 1, 9990, state.limit, true), strict)
    expect(next.last?.reason).toBe('drops')
    expect(next.estimate).toBeCloseTo(before * 0.9)
  })

  it('a limit the load does not use goes half way down to 1.25 x what it used plus the headroom, never up; an empty window changes nothing', () => {
    let state = run(initialState(options), options, 80, () => 32).state
    const limit = state.limit
    state = step(state, win(50, 0, 500, 3), options)
    // Half way from the estimate to 1.25 x 3 + sqrt(estimate) / 2.
    expect(state.limit).toBeLessThan(limit)
    expect(state.limit).toBeGreaterThan(limit / 2)
    expect(state.last?.reason).toBe('app-limited')
    for (let i = 0; i < 20; i++) state = step(state, win(50, 0, 500, 3), options)
    expect(state.limit).toBe(Math.round(1.25 * 3 + Math.sqrt(state.estimate) / 2))
    const rested = state.limit
    state = step(state, win(0, 0, 0, 0), options)
    expect(state.limit).toBe(rested)
    expect(state.last?.reason).toBe('empty')
    // Used at 85 % of it, at the unloaded latency: held, not grown (1.25 x the use is above it).
    state = run(initialState(options), options, 80, () => 32).state
    const held = state.estimate
    for (let i = 0; i < 40; i++)
      state = step(state, win(100, 0, 1000, Math.floor(0.85 * state.limit)), options)
    expect(state.estimate).toBe(held)
  })

  it('bursts of 90 at once in every window (a light load between them) keep the limit at 1.25 x the burst or more', () => {
    const bursty = parseAdaptiveLimitOptions({ min: 1, max: 1000, initial: 200 })
    let state: ControllerState = { ...initialState(bursty), slowStart: false, baselineMs: 20 }
    // 90 requests of 20 ms each, all at once: the window's most in flight is 90 (the store adds up
    // the replicas' most: exactly 90 when the burst reaches all of them at once).
    for (let i = 0; i < 50; i++) state = step(state, win(90, 0, 90 * 20, 90), bursty)
    expect(state.limit).toBeGreaterThanOrEqual(Math.floor(1.25 * 90))
    expect(state.limit).toBeLessThan(200)
  })

  it('a load below the capacity for a while, then a surge: the limit meets the surge within 1.25 x the capacity, not twice it (slow start ends once the load holds it back)', () => {
    // Clients offer 20 at once (the capacity is 32) for 20 windows, then more than the limit.
    let state = initialState(parseAdaptiveLimitOptions({ min: 1, max: 1000, initial: 8 }))
    const limits: number[] = []
    for (let i = 0; i < 60; i++) {
      const inFlight = i < 20 ? Math.min(20, state.limit) : state.limit
      const latency = 10 * Math.max(1, inFlight / 32)
      const count = Math.round((inFlight * 1000) / latency)
      state = step(state, win(count, 0, count * latency, inFlight), options)
      limits.push(state.probing ? Number.NaN : state.limit)
    }
    // Before: slow start held at 32 through the light phase, and doubled to 64 at the surge.
    expect(Math.max(...limits.filter((limit) => !Number.isNaN(limit))), `${limits}`).toBeLessThanOrEqual(40)
    for (const limit of limits.slice(30)) expect(within(limit, 32, 0.25), `${limits}`).toBe(true)
  })

  it('a load at 85 % of the capacity does not walk the limit up: it stays within 1.25 x the capacity, and a surge then meets that', () => {
    let state = run(initialState(options), options, 80, () => 32).state
    const limits: number[] = []
    for (let i = 0; i < 60; i++) {
      // 27 in flight at most (no queue in the upstream), whatever the limit.
      const inFlight = Math.min(27, state.limit)
      const count = inFlight * 100
      state = step(state, win(count, 0, count * 10, inFlight), options)
      limits.push(state.probing ? Number.NaN : state.limit)
    }
    // Before: 27 is more than half the limit, so the latency (at the baseline) grew it by its
    // headroom every window, to 90 and more.
    expect(Math.max(...limits.filter((limit) => !Number.isNaN(limit))), `${limits}`).toBeLessThanOrEqual(40)
  })

  it('a window whose mean latency is 0 (latencies rounded away) or not a number holds the limit, and the next windows step as before', () => {
    let state = run(initialState(options), options, 80, () => 32).state
    state = step(state, win(10, 1, 90, state.limit), options)
    const limit = state.limit
    for (const latencySumMs of [0, Number.NaN, -1]) {
      state = step(state, win(10, 0, latencySumMs, state.limit), options)
      expect(state.limit, String(latencySumMs)).toBe(limit)
      expect(Number.isFinite(state.estimate)).toBe(true)
    }
    expect(Number.isFinite(state.baselineMs)).toBe(true)
    state = run(state, options, 20, () => 32).state
    expect(within(state.limit, 32, 0.25)).toBe(true)
  })

  it("across a fleet (windows stepped a window late), a probe's baseline is the latency of the window that ran at three quarters, and the loaded window before it is stepped as any other", () => {
    const every = parseAdaptiveLimitOptions({ min: 1, max: 1000, initial: 32, probeEvery: 10 })
    let state: ControllerState = { ...initialState(every), slowStart: false, baselineMs: 10, steps: 9 }
    state = step(state, window(32, 32, 10, 1000), every, 1) // step 10: the next window runs at 3/4
    expect(state.probing).toBe(true)
    expect(state.limit).toBe(Math.round(state.estimate * 0.75))
    // Step 11 steps the window before that one, which ran at the full limit: with drops, it backs off
    // (and the limit is the full estimate again).
    const estimate = state.estimate
    state = step(state, win(100, 10, 1800, 32), every, 1)
    expect(state.last?.reason).toBe('drops')
    expect(state.limit).toBe(Math.round(estimate * 0.9))
    // Step 12 steps the probe's window: its latency (12 ms, the upstream got slower) is the baseline.
    state = step(state, win(100, 0, 1200, 24), every, 1)
    expect(state.last?.reason).toBe('probe')
    expect(state.baselineMs).toBe(12)
  })

  it('a probe whose latency is well above the baseline (a capacity that fell, or a slower upstream) is followed by one at a quarter, whose latency is the baseline', () => {
    const every = parseAdaptiveLimitOptions({ min: 1, max: 1000, initial: 32, probeEvery: 10 })
    let state: ControllerState = { ...initialState(every), slowStart: false, baselineMs: 10, steps: 9 }
    state = step(state, window(32, 32, 10, 1000), every) // step 10: the next window runs at 3/4
    expect(state.limit).toBe(Math.round(state.estimate * 0.75))
    // The capacity fell to 12: at 24 the upstream queues (20 ms), which says nothing for sure.
    state = step(state, win(100, 0, 2000, 24), every)
    expect(state.probing).toBe(true)
    expect(state.limit).toBe(Math.round(state.estimate / 4))
    expect(state.baselineMs).toBe(10)
    // At 8 (under 12) the latency is the upstream's own: the baseline, and the limit comes down.
    state = step(state, win(100, 0, 1000, 8), every)
    expect(state.last?.reason).toBe('probe')
    expect(state.baselineMs).toBe(10)
    expect(state.probing).toBe(false)
  })

  it('never leaves [min, max]', () => {
    const capped = parseAdaptiveLimitOptions({ min: 3, max: 10, initial: 5 })
    // An upstream with endless capacity: the limit climbs to max and stays.
    expect(run(initialState(capped), capped, 50, () => 1e9).limits.slice(-10)).toEqual(Array(10).fill(10))
    // An upstream that errs on everything: down to min and no lower.
    let state = initialState(capped)
    for (let i = 0; i < 50; i++) {
      state = step(state, win(10, 10, 0, state.limit), capped)
      expect(state.limit).toBeGreaterThanOrEqual(3)
    }
    expect(state.limit).toBe(3)
  })
})

describe('the AIMD controller', () => {
  const options = parseAdaptiveLimitOptions({ algorithm: 'aimd', min: 2, max: 50, initial: 10, increase: 2 })

  it('adds on a clean window, multiplies on drops, holds when app-limited', () => {
    let state = initialState(options)
    state = step(state, win(100, 0, 1000, 10), options)
    expect(state.limit).toBe(12)
    state = step(state, win(100, 10, 900, 12), options)
    expect(state.estimate).toBeCloseTo(10.8)
    expect(state.limit).toBe(11)
    state = step(state, win(100, 0, 1000, 2), options)
    expect(state.limit).toBe(11)
  })
})

describe('options', () => {
  it.each([
    [{}, 'max'],
    [{ max: 0 }, 'max'],
    [{ max: 10, min: 11 }, 'min'],
    [{ max: 10, min: 5, initial: 4 }, 'initial'],
    [{ max: 10, initial: 11 }, 'initial'],
    [{ max: 10, algorithm: 'vegas' }, 'algorithm'],
    [{ max: 10, tolerance: 0.9 }, 'tolerance'],
    [{ max: 10, smoothing: 0 }, 'smoothing'],
    [{ max: 10, backoff: 1 }, 'backoff'],
    [{ max: 10, dropShare: -0.01 }, 'dropShare'],
    [{ max: 10, dropShare: 1 }, 'dropShare'], // never a back-off: say drops: [] instead
    [{ max: 10, dropShare: '5%' }, 'dropShare'],
    [{ max: 10, windowMs: 0 }, 'windowMs'],
    [{ max: 10, windowMs: 99 }, 'windowMs'],
    [{ max: 10, windowMs: 100.5 }, 'windowMs'],
    [{ max: 10, permits: 5 }, 'permits'],
    [{ max: 10, probeEvery: 1 }, 'probeEvery'], // every window a probe: the limit would never move
    [{ max: 10, probeEvery: 2 }, 'probeEvery'],
  ])('%j is refused, naming %s', (options, name) => {
    expect(() => parseAdaptiveLimitOptions(options)).toThrow(ConfigError)
    expect(() => parseAdaptiveLimitOptions(options)).toThrow(name)
  })

  it('names options under a prefix (the gateway config)', () => {
    expect(() => parseAdaptiveLimitOptions({ max: 10, windowMS: 5 }, 'routes[0].adaptive.')).toThrow(
      'routes[0].adaptive.windowMS',
    )
  })

  it('defaults: gradient, min 1, initial = min, 1 s windows, drops back off above 5 %', () => {
    expect(parseAdaptiveLimitOptions({ max: 8 })).toMatchObject({
      algorithm: 'gradient',
      min: 1,
      max: 8,
      initial: 1,
      windowMs: 1000,
      dropShare: 0.05,
    })
  })
})

describe('the change log (one line per significant change, at most one per 10 s)', () => {
  it('a line held back by the bound is summed up in the next: it carries the lowest and highest limit since the line before', () => {
    const log = new LimitChangeLog({ min: 1, max: 64 }, 2)
    // 2 -> 4: a line at once. Then up to 32 and back to 20 within 10 s: held back.
    expect(log.stepped(4, 0)).toEqual({ from: 2, to: 4, lowest: 2, highest: 4, changesNotLogged: 0 })
    const held = [8, 16, 32, 24, 20].map((limit, i) => log.stepped(limit, 1000 * (i + 1)))
    expect(held).toEqual([undefined, undefined, undefined, undefined, undefined])
    // The next step after 10 s says where it went meanwhile: up to 32 (before: "from 4 to 20" only).
    expect(log.stepped(20, 10_000)).toEqual({ from: 4, to: 20, lowest: 4, highest: 32, changesNotLogged: 5 })
  })

  it('a limit that went far and came back before a line was due still gets one; small moves get none', () => {
    const log = new LimitChangeLog({ min: 1, max: 64 }, 16)
    expect(log.stepped(16, 0)).toBeUndefined()
    expect(log.stepped(17, 100)).toBeUndefined() // 6 %: not significant
    expect(log.stepped(8, 200)).toEqual({ from: 16, to: 8, lowest: 8, highest: 17, changesNotLogged: 0 })
    expect(log.stepped(2, 300)).toBeUndefined() // within 10 s of the line before
    expect(log.stepped(8, 400)).toBeUndefined()
    // Back where the last line said, but it went down to 2 meanwhile: said at the next step after 10 s.
    expect(log.stepped(8, 10_200)).toEqual({ from: 8, to: 8, lowest: 2, highest: 8, changesNotLogged: 1 })
    expect(log.stepped(8, 30_000)).toBeUndefined()
    // Reaching min or max is always worth a line, however small the step.
    expect(log.stepped(7, 40_000)).toBeUndefined()
    const capped = new LimitChangeLog({ min: 1, max: 9 }, 8)
    expect(capped.stepped(9, 0)).toMatchObject({ from: 8, to: 9 })
  })
})

describe("the window's latency: the median of a log-bucket histogram", () => {
  const medianOf = (latencies: readonly number[]) => {
    const histogram = new LatencyHistogram()
    for (const ms of latencies) histogram.add(ms)
    return histogram.median()
  }

  it('is the latency itself when all are alike, and the middle one within a few % otherwise', () => {
    expect(medianOf([])).toBeUndefined()
    expect(medianOf([20.3])).toBeCloseTo(20.3)
    expect(medianOf(Array(300).fill(20.3))).toBeCloseTo(20.3)
    // 1 to 1000 ms, evenly: the middle one is 500.5.
    const spread = Array.from({ length: 1000 }, (_, i) => i + 1)
    expect(Math.abs((medianOf(spread) as number) / 500.5 - 1)).toBeLessThan(0.05)
    // 18 to 26 ms, evenly (a bucket boundary, 22.6 ms, in the middle): within 3 %.
    const jitter = Array.from({ length: 300 }, (_, i) => 18 + (8 * i) / 299)
    expect(Math.abs((medianOf(jitter) as number) / 22 - 1)).toBeLessThan(0.03)
  })

  it('one user’s slow requests (4 of 2 s among 300 of 20 ms) do not move it; a mean would be 46 ms', () => {
    const latencies = [...Array(300).fill(20), 2000, 2000, 2000, 2000]
    expect(medianOf(latencies)).toBeCloseTo(20)
    // Even 40 % of them far away leave it among the others.
    expect(medianOf([...Array(60).fill(20), ...Array(40).fill(2000)])).toBeCloseTo(20)
  })

  it('moves smoothly as the latencies do: a shift of 1 % moves it by at most 3 %, never in steps of a bucket', () => {
    let before = medianOf(Array.from({ length: 200 }, (_, i) => 15 + (10 * i) / 199)) as number
    for (let shift = 1.01; shift < 2; shift *= 1.01) {
      const now = medianOf(Array.from({ length: 200 }, (_, i) => (15 + (10 * i) / 199) * shift)) as number
      expect(Math.abs(now / before - 1), `x${shift.toFixed(2)}`).toBeLessThan(0.03)
      before = now
    }
  })

  it('replicas’ histograms add up bucket by bucket: the merged median is the union’s', () => {
    const a = Array.from({ length: 150 }, (_, i) => 10 + i / 10)
    const b = Array.from({ length: 100 }, (_, i) => 30 + i / 5)
    const merged = LatencyHistogram.from([...medianHistogram(a).entries(), ...medianHistogram(b).entries()])
    expect(merged.count).toBe(250)
    expect(merged.median()).toBeCloseTo(medianOf([...a, ...b]) as number, 1)
  })

  it('every latency has a bucket: 0, NaN, below 0.1 ms and above an hour included', () => {
    expect([0, Number.NaN, -5, 0.05].map(bucketOf)).toEqual([0, 0, 0, 0])
    expect(bucketOf(3_600_000 * 10)).toBe(LATENCY_BUCKETS - 1)
    expect(medianOf([7_200_000])).toBeCloseTo(7_200_000)
  })
})

function medianHistogram(latencies: readonly number[]): LatencyHistogram {
  const histogram = new LatencyHistogram()
  for (const ms of latencies) histogram.add(ms)
  return histogram
}

describe("the window's drops: the median client decides", () => {
  /** A seeded [0, 1) (the pool's order), so that a failure replays. */
  const seeded = (seed: number) => () => {
    seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31
    return seed / 2 ** 31
  }
  /** `clients` clients of `requests` each, each request a drop with probability `p`. */
  const traffic = (
    drops: ClientDrops,
    clients: number,
    requests: number,
    p: number,
    random: () => number,
  ) => {
    for (let c = 0; c < clients; c++)
      for (let r = 0; r < requests; r++) drops.add(`10.0.${c >> 8}.${c & 255}`, random() < p)
  }
  const backsOff = ({ units, over }: { units: number; over: number }) => 2 * over > units

  it('one client whose every request is a drop, among 8 that see none, is one unit at most: no back-off', () => {
    for (const [requests, attacker] of [
      [40, 30], // 8.6 % of the window's requests: light, a unit of its own (no other light client)
      [10, 30], // 27 %: heavy, a unit of its own
      [30, 200], // 45 %
    ] as const) {
      const drops = new ClientDrops()
      traffic(drops, 8, requests, 0, seeded(1))
      for (let i = 0; i < attacker; i++) drops.add('203.0.113.9', true)
      const units = drops.units(0.05, seeded(2))
      expect(units.over, JSON.stringify(units)).toBeLessThanOrEqual(1)
      expect(backsOff(units), JSON.stringify(units)).toBe(false)
    }
  })

  it('an upstream dropping 10 % of every client’s requests backs off, also beside a client that sends many cheap requests', () => {
    const drops = new ClientDrops()
    traffic(drops, 8, 60, 0.1, seeded(3))
    expect(backsOff(drops.units(0.05, seeded(4)))).toBe(true)
    for (let i = 0; i < 3000; i++) drops.add('203.0.113.9', false) // 86 % of the requests, none dropped
    expect(backsOff(drops.units(0.05, seeded(4)))).toBe(true)
  })

  it('clients of one request each are pooled into units: 10 % dropped is seen, 2 % is not', () => {
    let seen = 0
    let quiet = 0
    for (let w = 0; w < 20; w++) {
      const shedding = new ClientDrops()
      traffic(shedding, 1000, 1, 0.1, seeded(10 + w))
      if (backsOff(shedding.units(0.05, seeded(100 + w)))) seen++
      const fine = new ClientDrops()
      traffic(fine, 1000, 1, 0.02, seeded(50 + w))
      if (backsOff(fine.units(0.05, seeded(200 + w)))) quiet++
    }
    expect(seen).toBeGreaterThanOrEqual(18)
    expect(quiet).toBe(0)
  })

  it('light clients short of a unit are one beside a heavy client: it cannot make their drops disappear', () => {
    const drops = new ClientDrops()
    for (let i = 0; i < 500; i++) drops.add('203.0.113.9', false)
    traffic(drops, 3, 10, 0.5, seeded(5)) // 30 requests in all, short of a unit of 40
    expect(drops.units(0.05, seeded(6))).toEqual({ units: 2, over: 1 })
  })

  it('a window of fewer requests than a unit is one unit: a hung upstream’s single timeout still backs off', () => {
    const drops = new ClientDrops()
    drops.add('10.0.0.1', true)
    expect(drops.units(0.05)).toEqual({ units: 1, over: 1 })
    expect(new ClientDrops().units(0.05)).toEqual({ units: 0, over: 0 })
  })

  it('over the share means drops / requests > share, without float noise (29 of 100 at 0.29 is not over)', () => {
    for (const [share, dropped] of [
      [0.05, 5],
      [0.07, 7],
      [0.29, 29],
      [0.57, 57],
    ] as const) {
      const drops = new ClientDrops()
      for (let i = 0; i < 100; i++) drops.add('10.0.0.1', i < dropped)
      expect(drops.units(share), `${dropped} of 100 at ${share}`).toEqual({ units: 1, over: 0 })
    }
  })

  it(`counts at most ${MAX_CLIENTS} clients a window; units hold at least 2 / dropShare requests (20 to 1000)`, () => {
    const drops = new ClientDrops()
    for (let c = 0; c < MAX_CLIENTS + 500; c++) drops.add(`client ${c}`, c >= MAX_CLIENTS)
    expect(drops.units(0.05).over).toBe(0) // the 500 after the first 1024 are not counted
    expect([0, 0.001, 0.05, 0.1, 0.5].map(unitOf)).toEqual([1000, 1000, 40, 20, 20])
  })

  it('a client is its address; an IPv6 client is its /64, an IPv4-mapped one its IPv4 address', () => {
    expect(clientKey('2001:db8:1:2:aaaa::1')).toBe('2001:db8:1:2::/64')
    expect(clientKey('2001:0db8:0001:0002:ffff:ffff:ffff:ffff')).toBe('2001:db8:1:2::/64')
    expect(clientKey('2001:db8::7')).toBe('2001:db8:0:0::/64')
    expect(clientKey('::1')).toBe('0:0:0:0::/64')
    expect(clientKey('::ffff:192.0.2.7')).toBe('192.0.2.7')
    expect(clientKey('192.0.2.7')).toBe('192.0.2.7')
    expect(clientKey(undefined)).toBe('')
  })

  it('the controller backs off when more than half of the clients are over the share, not at half', () => {
    const options = parseAdaptiveLimitOptions({ algorithm: 'aimd', min: 1, max: 50, initial: 20 })
    const at = (clients: number, clientsOver: number) =>
      step(initialState(options), { ...win(100, 0, 1000, 20), clients, clientsOver }, options).last?.reason
    expect([at(9, 4), at(10, 5), at(9, 5), at(1, 1), at(0, 0)]).toEqual([
      'increase',
      'increase',
      'drops',
      'drops',
      'increase',
    ])
  })
})

describe('the change log counts changes held back, not steps', () => {
  it('steps that stay where a held-back change went are not changes: one change, not nine', () => {
    const log = new LimitChangeLog({ min: 1, max: 64 }, 10)
    expect(log.stepped(20, 0)).toMatchObject({ from: 10, to: 20 })
    // One change (20 -> 10) within 10 s of that line, then eight steps that leave the limit at 10.
    const held = Array.from({ length: 9 }, (_, i) => log.stepped(10, 1000 * (i + 1)))
    expect(held.every((line) => line === undefined)).toBe(true)
    // (Before: changesNotLogged 9.)
    expect(log.stepped(10, 10_000)).toMatchObject({ from: 20, to: 10, changesNotLogged: 1 })
  })
})

describe('slow start from a cold start, against a saturated upstream with a knee at C = 32', () => {
  const C = 32

  /** Windows 0..n-1 of clients that always offer more than the limit, stepped at the end of each
   * window with `lag` (0: that window, once every replica reported it; 1: the window before, as a
   * fleet's leader does when a replica is silent). A window runs at the limit in force; its most in
   * flight is also the limit before (a step lands ~50 ms into the next window). */
  function coldStart(initial: number, lag: 0 | 1, n = 24) {
    const options = parseAdaptiveLimitOptions({ min: 1, max: 1000, initial, windowMs: 500 })
    let state = initialState(options)
    const inForce: number[] = []
    const summaries: WindowSummary[] = []
    let exit: ControllerState | undefined
    for (let k = 0; k < n; k++) {
      const limit = state.limit
      inForce.push(limit)
      const summary = window(limit, C, 10, options.windowMs)
      summaries.push({ ...summary, maxInFlight: Math.max(limit, inForce[k - 1] ?? 0) })
      const stepped = lag === 0 ? summaries[k] : (summaries[k - 1] ?? emptySummary())
      const before = state
      state = step(state, stepped as WindowSummary, options, lag)
      if (before.slowStart && !state.slowStart) exit = state
    }
    const above = inForce.filter((limit) => limit > 1.25 * C).length
    // The first window from which every window runs within ±25 % of C.
    const settled = inForce.findIndex((_, k) => inForce.slice(k).every((limit) => within(limit, C, 0.25)))
    return { inForce, above, settled, exit }
  }

  it('from initial 8, windows stepped as soon as they end: 8, 16, 32, 64, then 32: one window above 1.25 C, within ±25 % from the 5th window on', () => {
    const { inForce, above, settled, exit } = coldStart(8, 0)
    expect(inForce.slice(0, 5), `${inForce}`).toEqual([8, 16, 32, 64, 32])
    expect(above, `${inForce}`).toBe(1)
    expect(settled, `${inForce}`).toBe(4)
    // Out of slow start at the last clean limit, unsmoothed.
    expect(exit?.estimate).toBe(32)
    expect(exit?.good).toBe(32)
  })

  it('from the default initial 1: one window above 1.25 C, within ±25 % from the 8th window on', () => {
    const { inForce, above, settled } = coldStart(1, 0)
    expect(above, `${inForce}`).toBe(1)
    expect(settled, `${inForce}`).toBe(7)
  })

  it('windows stepped a window late (a silent replica): two windows above 1.25 C (the step that sees the knee lands two windows on), within ±25 % from the 9th window on', () => {
    const { inForce, above, settled, exit } = coldStart(8, 1)
    expect(above, `${inForce}`).toBe(2)
    expect(settled, `${inForce}`).toBe(8)
    expect(exit?.estimate).toBe(32)
  })

  it('grows only from evidence: a window that queued a little holds, and growth is at most twice what was in flight', () => {
    const options = parseAdaptiveLimitOptions({ min: 1, max: 1000, initial: 16 })
    const start: ControllerState = { ...initialState(options), baselineMs: 10 }
    // Latency 10.5 ms against a baseline of 10: gradient 0.952, between 0.9 and 0.97: holds.
    const queued = step(start, win(100, 0, 100 * 10.5, 16), options)
    expect(queued.slowStart).toBe(true)
    expect(queued.estimate).toBe(16)
    // 15 of 16 in flight, clean: 30, not 32.
    const clean = step(start, win(100, 0, 100 * 10, 15), options)
    expect(clean.estimate).toBe(30)
    expect(clean.good).toBe(16)
  })

  it('leaves slow start unsmoothed, at the capacity the queueing window shows, never below the last clean limit', () => {
    const options = parseAdaptiveLimitOptions({ min: 1, max: 1000, initial: 16 })
    const start: ControllerState = {
      ...initialState(options),
      baselineMs: 10,
      good: 32,
      limit: 64,
      estimate: 64,
    }
    // 64 in flight at 20 ms: gradient 0.5, the capacity is 32.
    const knee = step(start, win(100, 0, 100 * 20, 64), options)
    expect([knee.slowStart, knee.estimate]).toEqual([false, 32])
    // 50 in flight at 40 ms (the capacity fell meanwhile): gradient clamped to 0.5, 25; the last clean
    // limit is 32.
    const fell = step({ ...start, limit: 50, estimate: 50 }, win(100, 0, 100 * 40, 50), options)
    expect([fell.slowStart, fell.estimate]).toEqual([false, 32])
    // A noisy window at 64 (gradient 0.88): 56, not 32.
    const noisy = step(start, win(100, 0, 100 * (10 / 0.88), 64), options)
    expect(noisy.estimate).toBeCloseTo(56.32)
  })
})

describe("slow start's brake", () => {
  const options = parseAdaptiveLimitOptions({ min: 1, max: 1000, initial: 16 })
  // A doubling past the last clean limit (32) in force, over a baseline of 10 ms.
  const doubled: ControllerState = {
    ...initialState(options),
    baselineMs: 10,
    good: 32,
    limit: 64,
    estimate: 64,
    previous: 32,
    steps: 5,
  }
  const samples = (ms: (i: number) => number, client: (i: number) => string) =>
    Array.from({ length: BRAKE_SAMPLES }, (_, i) => ({ ms: ms(i), client: client(i) }))

  it('the threshold: a quarter over the queueing a step would see, or over this replica’s own clean median if higher', () => {
    // tolerance 1: a step sees queueing above 11.1 ms; the brake above 13.9 ms.
    expect(brakeThreshold(doubled, options, undefined)).toBeCloseTo(13.89, 2)
    expect(brakeThreshold(doubled, options, 8)).toBeCloseTo(13.89, 2)
    // A replica whose own requests take 15 ms when clean judges them against that.
    expect(brakeThreshold(doubled, options, 15)).toBeCloseTo(20.83, 2)
    expect(brakeThreshold({ ...doubled, baselineMs: undefined }, options, 15)).toBeUndefined()
  })

  it('shows the queue when the median is over the threshold, and so is more than half of the clients’ medians', () => {
    const lone = () => '10.0.0.1'
    expect(
      showsQueue(
        samples(() => 20, lone),
        13.9,
      ),
    ).toBe(true)
    expect(
      showsQueue(
        samples(() => 13, lone),
        13.9,
      ),
    ).toBe(false)
    expect(showsQueue(samples(() => 20, lone).slice(1), 13.9)).toBe(false)
    // Four clients, every one slowed by the queue.
    expect(
      showsQueue(
        samples(
          (i) => 18 + (i % 3),
          (i) => `10.0.0.${i % 4}`,
        ),
        13.9,
      ),
    ).toBe(true)
  })

  it('one client’s slow requests do not brake, however many of the samples are theirs (the median client decides)', () => {
    // 10 of 16 samples from one client at 200 ms, the others (3 clients) at the baseline.
    const hostile = samples(
      (i) => (i < 10 ? 200 : 10),
      (i) => (i < 10 ? '6.6.6.6' : `10.0.0.${i % 3}`),
    )
    expect(showsQueue(hostile, 13.9)).toBe(false)
    // Two slow clients of four: half, not more: no brake.
    const two = samples(
      (i) => (i % 4 < 2 ? 200 : 10),
      (i) => `10.0.0.${i % 4}`,
    )
    expect(showsQueue(two, 13.9)).toBe(false)
  })

  it('ends slow start at the last clean limit, as a state of the same step', () => {
    const after = braked(doubled, options)
    expect(after).toMatchObject({ limit: 32, estimate: 32, slowStart: false, steps: 5, previous: 64 })
    expect(after?.last?.reason).toBe('brake')
  })

  it('the next step goes on from the last clean limit by the gradient: it does not double again on the braked window', () => {
    const after = braked(doubled, options) as ControllerState
    // The braked window: 64 in flight at first, then 32 at the baseline latency.
    const next = step(after, win(100, 0, 100 * 10, 64), options)
    expect(next.slowStart).toBe(false)
    expect(next.limit).toBeLessThanOrEqual(36)
    // Before (a brake of the limit alone, the state still in slow start with good = 32): 128.
    const blind = step({ ...doubled }, win(100, 0, 100 * 10, 64), options)
    expect(blind.limit).toBe(128)
  })

  it('the step after a brake never goes below the last clean limit: the braked window’s queue was the doubling’s', () => {
    const after = braked(doubled, options) as ControllerState
    // A brake late in the window: its median at 1.33 x the baseline (gradient 0.75). Before: 29.
    const next = step(after, win(100, 0, 100 * (10 / 0.75), 64), options)
    expect(next.limit).toBe(32)
    // The step after that one follows the gradient again.
    const later = step(next, win(100, 0, 100 * (10 / 0.75), 32), options)
    expect(later.limit).toBeLessThan(32)
  })

  it('brakes nothing outside a doubling: not in slow start, not above the last clean limit, during a probe, without a baseline', () => {
    expect(braked({ ...doubled, slowStart: false }, options)).toBeUndefined()
    expect(braked({ ...doubled, limit: 32, estimate: 32 }, options)).toBeUndefined()
    expect(braked({ ...doubled, probing: true }, options)).toBeUndefined()
    expect(braked({ ...doubled, baselineMs: undefined }, options)).toBeUndefined()
    expect(braked({ ...doubled, good: undefined }, options)).toBeUndefined()
  })
})
