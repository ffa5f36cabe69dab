// A request's priority class and flow in a fair route (routes.ts disciplineOf), and the metric series
// they add: the class from a trusted header, the tenant or the route; a hostile value never fails the
// request nor adds a series.
import { describe, expect, it } from 'vitest'
import { resolveConfig, validateConfigFile } from '../../src/gateway/index.js'
import { fairFigures, flowState } from '../../src/gateway/ops/limit-figures.js'
import { createMetrics } from '../../src/gateway/ops/metrics.js'
import { disciplineOf, fairOptions, type RequestFacts } from '../../src/gateway/routes.js'

const upstream = 'http://127.0.0.1:3000'

/** The discipline of the first route of a config whose concurrency is `concurrency`. */
function decide(concurrency: Record<string, unknown>) {
  const config = resolveConfig(
    validateConfigFile({
      defaults: { upstream },
      routes: [{ name: 'api', match: { pathPrefix: '/' }, concurrency }],
    }),
  )
  const discipline = disciplineOf(config.routes[0]!.concurrency!)
  return (headers: RequestFacts['headers'], clientAddress = '10.0.0.1') =>
    discipline({
      method: 'GET',
      match: '/',
      headers,
      clientAddress,
      weight: 1,
      priority: 4,
      flow: undefined,
      flowLabel: 'other',
    })
}

describe('a request in a fair route', () => {
  it('takes its class from the route, for every request', () => {
    const of = decide({ priority: 'sheddable', weight: 2, permits: 4 })
    expect(of({})).toEqual({ weight: 2, priority: 2, flow: undefined, flowLabel: 'other' })
    expect(of({ 'x-priority': 'critical' }).priority).toBe(2)
  })

  it('takes its class from a trusted header, else its tenant, else the default', () => {
    const of = decide({
      priority: {
        header: 'X-Priority',
        trustHeader: true,
        tenants: { acme: 'critical', slow: 1 },
        default: 3,
      },
    })
    expect(of({ 'x-priority': 'sheddable' }).priority).toBe(2)
    expect(of({ 'x-priority': ' Critical ' }).priority).toBe(6)
    expect(of({ 'x-priority': '7' }).priority).toBe(7)
    // A repeated header counts as its first value, as the tenant header does.
    expect(of({ 'x-priority': ['0', 'critical'] }).priority).toBe(0)
    expect(of({ 'x-priority': '5, critical' }).priority).toBe(5)
    // The header wins over the tenant; a value that names no class is no error: the next source.
    expect(of({ 'x-priority': 'sheddable', 'x-tenant-id': 'acme' }).priority).toBe(2)
    expect(of({ 'x-priority': 'urgent', 'x-tenant-id': 'acme' }).priority).toBe(6)
    expect(of({ 'x-priority': '8', 'x-tenant-id': 'slow' }).priority).toBe(1)
    expect(of({ 'x-priority': 'x'.repeat(10_000) }).priority).toBe(3)
    // Own keys only: a tenant called constructor is no tenant of the config.
    expect(of({ 'x-tenant-id': 'constructor' }).priority).toBe(3)
    expect(of({}).priority).toBe(3)
  })

  it('never reads a header the config did not trust', () => {
    const of = decide({ priority: { tenants: { acme: 'critical' } } })
    expect(of({ 'x-priority': 'critical' }).priority).toBe(4)
    expect(of({ 'x-tenant-id': 'acme' }).priority).toBe(6)
  })

  it('takes its flow from the tenant, the address or a header; labels only the flows the config names', () => {
    const byTenant = decide({ flow: { from: 'tenant', weights: { acme: 3 }, maxFor: { free: 1 } } })
    expect(byTenant({ 'x-tenant-id': 'acme' })).toMatchObject({ flow: 'acme', flowLabel: 'acme' })
    expect(byTenant({ 'x-tenant-id': ' free, acme' })).toMatchObject({ flow: 'free', flowLabel: 'free' })
    expect(byTenant({ 'x-tenant-id': 'mallory' })).toMatchObject({ flow: 'mallory', flowLabel: 'other' })
    expect(byTenant({ 'x-tenant-id': 'toString' })).toMatchObject({ flowLabel: 'other' })
    expect(byTenant({})).toMatchObject({ flow: undefined, flowLabel: 'other' })
    expect(decide({ flow: { from: 'ip' } })({}, '10.1.2.3')).toMatchObject({ flow: '10.1.2.3' })
    expect(decide({ flow: { from: 'header:X-User' } })({ 'x-user': 'u1' })).toMatchObject({ flow: 'u1' })
  })

  it('a hostile header never adds a metric series', async () => {
    const of = decide({
      priority: { header: 'x-priority', trustHeader: true },
      flow: { from: 'header:x-user', weights: { acme: 2 } },
    })
    const metrics = createMetrics(['api'], { processMetrics: false })
    const fair = metrics.route('api').fair()
    const seen = (text: string) => text.split('\n').filter((line) => /^tollgate_(class|flow)_/.test(line))
    const count = (headers: RequestFacts['headers']) => {
      const facts = of(headers)
      fair.arrived(facts)
      fair.admitted(facts)
      fair.rejected(facts, 'timeout')
    }
    count({ 'x-priority': 'critical', 'x-user': 'acme' })
    count({ 'x-user': 'bob' })
    const before = seen(await metrics.registry.metrics())
    expect(before).toContain('tollgate_class_admitted_total{route="api",class="critical"} 1')
    expect(before).toContain('tollgate_flow_admitted_total{route="api",flow="acme"} 1')
    expect(before).toContain('tollgate_flow_admitted_total{route="api",flow="other"} 1')
    for (let i = 0; i < 500; i++)
      count({ 'x-priority': `p${i}\u0000"}`, 'x-user': `${'evil'.repeat(i % 90)}${i}"} 1\n` })
    const after = seen(await metrics.registry.metrics())
    expect(after.map((line) => line.replace(/ \d+$/, ''))).toEqual(
      before.map((line) => line.replace(/ \d+$/, '')),
    )
    expect(after).toContain('tollgate_flow_admitted_total{route="api",flow="other"} 501')
    expect(after).toContain('tollgate_class_admitted_total{route="api",class="standard"} 501')
  })
})

describe('a fair bucket in /limits and the dashboard', () => {
  it('names classes (critical, p5), and gives a flow its weight and cap from the config, own keys only', () => {
    expect(
      fairFigures({
        classes: { critical: { waiting: 2 }, 5: { waiting: 1 }, sheddable: { waiting: 3 } },
        parked: 1,
        evicted: { 2: 4 },
      }),
    ).toEqual({
      classes: { critical: { waiting: 2 }, p5: { waiting: 1 }, sheddable: { waiting: 3 } },
      parked: 1,
      evicted: { sheddable: 4 },
      saturated: [],
      mixed: null,
    })
    const concurrency = resolveConfig(
      validateConfigFile({
        defaults: { upstream },
        routes: [
          {
            match: { pathPrefix: '/' },
            concurrency: { flow: { from: 'tenant', weights: { acme: 3 }, max: 4, maxFor: { free: 1 } } },
          },
        ],
      }),
    ).routes[0]!.concurrency!
    const fleet = { flows: new Map([['acme', { waiting: 5, held: 2, parked: 0 }]]) }
    expect(flowState(concurrency, fleet, 'acme', 0.5)).toEqual({
      flow: 'acme',
      share: 0.5,
      weight: 3,
      max: 4,
      waiting: 5,
      held: 2,
      parked: 0,
    })
    expect(flowState(concurrency, undefined, 'free')).toMatchObject({ weight: 1, max: 1, waiting: null })
    expect(flowState(concurrency, undefined, 'constructor')).toMatchObject({ weight: 1, max: 4 })
  })
})

describe('the admission options of a fair route', () => {
  const routes = (...concurrency: Record<string, unknown>[]) =>
    resolveConfig(
      validateConfigFile({
        defaults: { upstream },
        routes: concurrency.map((c, i) => ({
          name: `r${i}`,
          match: { pathPrefix: `/r${i}` },
          concurrency: c,
        })),
      }),
    ).routes.map((r) => r.concurrency!)

  it('a shared per: global queue: each class waits as its route says; flows capped by name, own keys only', () => {
    const [play, prefetch] = routes(
      {
        per: 'global',
        priority: 'critical',
        maxWaitMs: 2000,
        flow: { from: 'ip', max: 4, maxFor: { bulk: 1 } },
      },
      {
        per: 'global',
        priority: 'sheddable',
        maxWaitMs: 250,
        flow: { from: 'ip', max: 4, maxFor: { bulk: 1 } },
      },
    )
    const options = fairOptions(play!, [play!, prefetch!]) as Record<string, unknown> & {
      overload: { flowMax: (flow: string) => number | undefined; flowWeights: object; maxQueued?: number }
      priority: (req: { priority: number }) => number
    }
    expect(options.maxWaitMs).toEqual({ standard: 2000, critical: 2000, sheddable: 250 })
    expect(options.overload.flowWeights).toEqual({})
    expect(options.overload.maxQueued).toBeUndefined()
    expect(['bulk', 'other', 'constructor'].map(options.overload.flowMax)).toEqual([1, 4, 4])
    expect(options.priority({ priority: 6 })).toBe(6)
  })

  it('a plain route hands over nothing; one wait for every class is a number', () => {
    const [plain, fixed, header] = routes(
      { per: 'route', maxWaitMs: 300 },
      { per: 'route', priority: 'critical', maxWaitMs: 300, maxQueued: 9 },
      { per: 'route', priority: { header: 'x-p', trustHeader: true, maxWaitMs: { 5: 100 } } },
    )
    expect(fairOptions(plain!, [plain!])).toEqual({})
    expect(fairOptions(fixed!, [fixed!])).toMatchObject({ maxWaitMs: 300, overload: { maxQueued: 9 } })
    expect((fairOptions(fixed!, [fixed!]) as { overload: object }).overload).toEqual({ maxQueued: 9 })
    expect(fairOptions(header!, [header!]).maxWaitMs).toEqual({
      standard: 1000,
      0: 1000,
      1: 1000,
      sheddable: 1000,
      3: 1000,
      5: 100,
      critical: 1000,
      7: 1000,
    })
  })
})
