// The adaptive limit's controller on synthetic windows (no Redis, no clock): it converges on an
// upstream's capacity, holds there, follows a capacity change, backs off on drops above a share of
// the window's requests, and stays within min and max; and which of its changes get a log line. One window in probeEvery runs at a quarter of the limit to measure the baseline: the
// checks leave those out. The upstream model: C requests served at once in S ms each, the rest queue inside it,
// so with L in flight (clients always offer more than the limit) a request takes S x max(1, L / C).
import { describe, expect, it } from 'vitest'
import {
  type ControllerState,
  initialState,
  parseAdaptiveLimitOptions,
  type ResolvedAdaptiveLimitOptions,
  step,
  type WindowSummary,
} from '../../src/primitives/adaptive/controller.js'
import { LimitChangeLog } from '../../src/primitives/adaptive/change-log.js'
import { ConfigError } from '../../src/index.js'

/** One window of a saturated upstream of capacity `c` and service time `s` ms, at limit `limit`. */
function window(limit: number, c: number, s: number, windowMs: number, jitter = 0): WindowSummary {
  const latency = s * Math.max(1, limit / c) * (1 + jitter)
  const count = Math.round((limit * windowMs) / latency)
  return { count, drops: 0, latencySumMs: count * latency, maxInFlight: limit }
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
    // A probe window (at a quarter of the limit, by design) is left out: NaN.
    limits.push(state.probing ? Number.NaN : state.limit)
  }
  return { limits, state }
}

const within = (value: number, target: number, share: number) =>
  Number.isNaN(value) || (value >= target * (1 - share) && value <= target * (1 + share))

describe('the gradient controller', () => {
  const options = parseAdaptiveLimitOptions({ min: 1, max: 1000, initial: 4 })

  it('converges on the capacity within 10 windows and holds there within ±25 %, once in probeEvery at a quarter', () => {
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
      return { count, drops: 0, latencySumMs: count * latency, maxInFlight: limit }
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
    state = step(state, { count: 100, drops: 6, latencySumMs: 940, maxInFlight: state.limit }, options)
    expect(state.estimate).toBeCloseTo(before * 0.9)
    expect(state.last?.reason).toBe('drops')
  })

  it('a window with drops up to dropShare steps on the latency of the rest: one client’s 503 per window among many requests does not back off', () => {
    let state = run(initialState(options), options, 80, () => 32).state
    const limit = state.limit
    // 5 of 100 (the share, not above it), at the unloaded latency: the gradient decides, and holds.
    for (let i = 0; i < 30; i++) {
      state = step(state, { count: 100, drops: 5, latencySumMs: 95 * 10, maxInFlight: state.limit }, options)
      expect(state.last?.reason, `window ${i}`).not.toBe('drops')
    }
    expect(state.limit).toBeGreaterThanOrEqual(limit)
    // Above the share, however few the requests (a hung upstream's timeouts come one per window).
    const full = state.estimate
    state = step(state, { count: 1, drops: 1, latencySumMs: 0, maxInFlight: state.limit }, options)
    expect(state.last?.reason).toBe('drops')
    expect(state.estimate).toBeCloseTo(full * 0.9)
    // dropShare 0: any drop backs off, as before the share existed.
    const strict = parseAdaptiveLimitOptions({ min: 1, max: 1000, initial: 4, dropShare: 0 })
    const before = state.estimate
    const next = step(state, { count: 1000, drops: 1, latencySumMs: 9990, maxInFlight: state.limit }, strict)
    expect(next.last?.reason).toBe('drops')
    expect(next.estimate).toBeCloseTo(before * 0.9)
  })

  it('does not grow while the fleet uses less than half the limit, and an empty window changes nothing', () => {
    let state = run(initialState(options), options, 80, () => 32).state
    const limit = state.limit
    state = step(state, { count: 50, drops: 0, latencySumMs: 500, maxInFlight: 3 }, options)
    expect(state.limit).toBe(limit)
    expect(state.last?.reason).toBe('app-limited')
    state = step(state, { count: 0, drops: 0, latencySumMs: 0, maxInFlight: 0 }, options)
    expect(state.limit).toBe(limit)
    expect(state.last?.reason).toBe('empty')
  })

  it('a window whose mean latency is 0 (latencies rounded away) or not a number holds the limit, and the next windows step as before', () => {
    let state = run(initialState(options), options, 80, () => 32).state
    state = step(state, { count: 10, drops: 1, latencySumMs: 90, maxInFlight: state.limit }, options)
    const limit = state.limit
    for (const latencySumMs of [0, Number.NaN, -1]) {
      state = step(state, { count: 10, drops: 0, latencySumMs, maxInFlight: state.limit }, options)
      expect(state.limit, String(latencySumMs)).toBe(limit)
      expect(Number.isFinite(state.estimate)).toBe(true)
    }
    expect(Number.isFinite(state.baselineMs)).toBe(true)
    state = run(state, options, 20, () => 32).state
    expect(within(state.limit, 32, 0.25)).toBe(true)
  })

  it("across a fleet (windows stepped a window late), a probe's baseline is the latency of the window that ran at a quarter, and the loaded window before it is stepped as any other", () => {
    const every = parseAdaptiveLimitOptions({ min: 1, max: 1000, initial: 32, probeEvery: 10 })
    let state: ControllerState = { ...initialState(every), slowStart: false, baselineMs: 10, steps: 9 }
    state = step(state, window(32, 32, 10, 1000), every, 1) // step 10: the next window runs at a quarter
    expect(state.probing).toBe(true)
    expect(state.limit).toBe(8)
    // Step 11 steps the window before that one, which ran at the full limit: with drops, it backs off
    // (and the limit is the full estimate again).
    const estimate = state.estimate
    state = step(state, { count: 100, drops: 10, latencySumMs: 1800, maxInFlight: 32 }, every, 1)
    expect(state.last?.reason).toBe('drops')
    expect(state.limit).toBe(Math.round(estimate * 0.9))
    // Step 12 steps the quarter's window: its latency (12 ms, the upstream got slower) is the baseline.
    state = step(state, { count: 100, drops: 0, latencySumMs: 1200, maxInFlight: 8 }, every, 1)
    expect(state.last?.reason).toBe('probe')
    expect(state.baselineMs).toBe(12)
  })

  it('never leaves [min, max]', () => {
    const capped = parseAdaptiveLimitOptions({ min: 3, max: 10, initial: 5 })
    // An upstream with endless capacity: the limit climbs to max and stays.
    expect(run(initialState(capped), capped, 50, () => 1e9).limits.slice(-10)).toEqual(Array(10).fill(10))
    // An upstream that errs on everything: down to min and no lower.
    let state = initialState(capped)
    for (let i = 0; i < 50; i++) {
      state = step(state, { count: 10, drops: 10, latencySumMs: 0, maxInFlight: state.limit }, capped)
      expect(state.limit).toBeGreaterThanOrEqual(3)
    }
    expect(state.limit).toBe(3)
  })
})

describe('the AIMD controller', () => {
  const options = parseAdaptiveLimitOptions({ algorithm: 'aimd', min: 2, max: 50, initial: 10, increase: 2 })

  it('adds on a clean window, multiplies on drops, holds when app-limited', () => {
    let state = initialState(options)
    state = step(state, { count: 100, drops: 0, latencySumMs: 1000, maxInFlight: 10 }, options)
    expect(state.limit).toBe(12)
    state = step(state, { count: 100, drops: 10, latencySumMs: 900, maxInFlight: 12 }, options)
    expect(state.estimate).toBeCloseTo(10.8)
    expect(state.limit).toBe(11)
    state = step(state, { count: 100, drops: 0, latencySumMs: 1000, maxInFlight: 2 }, options)
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
