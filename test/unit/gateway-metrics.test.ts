// The gateway's per-request series are plain numbers read at scrape time (metrics.ts): their text must
// be what prom-client itself writes for the same observations, so dashboards and alerts cannot tell.
import { Counter, Gauge, Histogram, Registry } from 'prom-client'
import { describe, expect, it } from 'vitest'
import { createMetrics, PlainHistogram, statusClass } from '../../src/gateway/ops/metrics.js'

const BUCKETS = [0.001, 0.01, 0.1, 1]
/** Edges included: a value equal to a bound belongs to that bucket (le = less than or equal). */
const SAMPLES = [0, 0.0005, 0.001, 0.0010001, 0.01, 0.05, 1, 1.5, 1e9]

describe('PlainHistogram', () => {
  it('writes exactly what a prom-client Histogram writes for the same observations', async () => {
    const theirs = new Registry()
    const reference = new Histogram({
      name: 'h',
      help: 'help text',
      labelNames: ['route'],
      buckets: BUCKETS,
      registers: [theirs],
    })
    const ours = new Registry()
    const plain = new PlainHistogram({
      name: 'h',
      help: 'help text',
      label: 'route',
      buckets: BUCKETS,
      registers: [ours],
    })
    for (const route of ['a', 'b']) {
      const series = plain.series(route)
      for (const value of SAMPLES) {
        reference.labels(route).observe(value)
        series.observe(value)
      }
    }
    plain.series('a').observe(0.02)
    reference.labels('a').observe(0.02)
    // What prom-client refuses (it throws) is dropped, never poisoning the sum.
    for (const bad of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]) {
      plain.series('a').observe(bad)
      expect(() => reference.labels('a').observe(bad)).toThrow()
    }
    expect(await ours.metrics()).toBe(await theirs.metrics())
  })
})

describe('gateway route series', () => {
  it('are read into the registry at scrape time, as prom-client series would show them', async () => {
    const metrics = createMetrics(['r1', 'r2'], { processMetrics: false })
    const r1 = metrics.route('r1')
    r1.admitted += 3
    r1.inFlight += 2
    r1.inFlight--
    for (const status of [200, 204, 404, 503, 99, 799]) {
      const index = statusClass(status)
      r1.responses[index] = (r1.responses[index] ?? 0) + 1
    }
    const text = await metrics.registry.metrics()

    const theirs = new Registry()
    const admitted = new Counter({ name: 'a', help: 'h', labelNames: ['route'], registers: [theirs] })
    admitted.inc({ route: 'r1' }, 3)
    admitted.inc({ route: 'r2' }, 0)
    expect(lines(text, 'tollgate_admitted_total')).toEqual(['{route="r1"} 3', '{route="r2"} 0'])
    expect(lines(await theirs.metrics(), 'a')).toEqual(['{route="r1"} 3', '{route="r2"} 0'])
    const inFlight = new Gauge({ name: 'g', help: 'h', labelNames: ['route'], registers: [theirs] })
    inFlight.set({ route: 'r1' }, 1)
    expect(lines(text, 'tollgate_requests_in_flight')).toEqual(['{route="r1"} 1', '{route="r2"} 0'])
    expect(lines(text, 'tollgate_responses_total')).toEqual([
      '{route="r1",class="other"} 1',
      '{route="r1",class="2xx"} 2',
      '{route="r1",class="4xx"} 1',
      '{route="r1",class="5xx"} 1',
      '{route="r1",class="7xx"} 1',
    ])
    // Every known route's histograms exist from the start, at 0.
    expect(lines(text, 'tollgate_wait_seconds_count')).toEqual(['{route="r1"} 0', '{route="r2"} 0'])
  })
})

/** The label sets and values of one metric's lines. */
function lines(text: string, name: string): string[] {
  return text
    .split('\n')
    .filter((line) => line.startsWith(`${name}{`))
    .map((line) => line.slice(name.length))
}
