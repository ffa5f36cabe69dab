// The gateway's priorities and fair shares (docs/gateway/behaviour.md, "Priorities and fair shares"): the
// config's rules, each refused with the path and the fix, and what a request's class and flow are.
import { describe, expect, it } from 'vitest'
import { GatewayConfigError, parseFlags, resolveConfig, validateConfigFile } from '../../src/gateway/index.js'

const upstream = 'http://127.0.0.1:3000'

/** The config of one file (validated, then resolved). */
function load(file: unknown) {
  return resolveConfig(validateConfigFile(file))
}

/** The message of the GatewayConfigError loading `file` throws. */
function problem(file: unknown): string {
  try {
    load(file)
  } catch (error) {
    expect(error).toBeInstanceOf(GatewayConfigError)
    return (error as Error).message
  }
  throw new Error('expected a GatewayConfigError')
}

const route = (concurrency: Record<string, unknown>, name = 'api', pathPrefix = '/api') => ({
  name,
  match: { pathPrefix },
  concurrency,
})

describe('gateway config: priority, flow, maxQueued', () => {
  it('resolves the design example: a class per route, or per request from a trusted header and tenants', () => {
    const config = load({
      defaults: { upstream },
      routes: [
        route({ per: 'global', permits: 32, priority: 'critical' }, 'play', '/play'),
        route({ per: 'global', permits: 32, priority: 'sheddable', maxWaitMs: 250 }, 'prefetch', '/prefetch'),
        route({
          per: 'route',
          permits: 32,
          priority: {
            header: 'X-Priority',
            trustHeader: true,
            tenants: { acme: 'critical' },
            default: 'standard',
            maxWaitMs: { critical: 2000, sheddable: 200 },
          },
          flow: { from: 'tenant', weights: { acme: 3 }, max: 8, maxFor: { free: 2 } },
          maxQueued: 2000,
        }),
      ],
    })
    const [play, prefetch, api] = config.routes.map((r) => r.concurrency!)
    expect(play!.priority).toEqual({ header: undefined, tenants: {}, default: 6, maxWaitMs: {} })
    expect(prefetch!.priority?.default).toBe(2)
    expect(prefetch!.maxWaitMs).toBe(250)
    expect(api!.priority).toEqual({
      header: 'x-priority',
      tenants: { acme: 6 },
      default: 4,
      maxWaitMs: { 6: 2000, 2: 200 },
    })
    expect(api!.flow).toEqual({
      from: 'tenant',
      header: undefined,
      weights: { acme: 3 },
      max: 8,
      maxFor: { free: 2 },
    })
    expect(api!.maxQueued).toBe(2000)
    // A route without them is the plain FIFO bucket it was.
    expect(
      load({ defaults: { upstream }, routes: [route({ permits: 4 })] }).routes[0]!.concurrency,
    ).toMatchObject({
      priority: undefined,
      flow: undefined,
      maxQueued: 0,
    })
  })

  it('refuses a trusted-header priority without trustHeader: true, saying why', () => {
    const message = problem({
      defaults: { upstream },
      routes: [route({ priority: { header: 'x-priority' } })],
    })
    expect(message).toContain('routes[0].concurrency.priority.trustHeader: required (true) beside header')
    expect(message).toContain('a client could claim critical by sending x-priority')
    expect(
      problem({
        defaults: { upstream },
        routes: [route({ priority: { header: 'x-priority', trustHeader: false } })],
      }),
    ).toContain('priority.trustHeader: required (true)')
  })

  it('refuses flows from the tenant on a per: tenant bucket, naming the choice', () => {
    expect(
      problem({ defaults: { upstream }, routes: [route({ per: 'tenant', flow: { from: 'tenant' } })] }),
    ).toBe(
      'routes[0].concurrency.flow.from: not with per: tenant: flows share one bucket, and per: tenant makes one bucket per tenant; choose per: route (or global) to share the limit fairly, or keep per: tenant without flow',
    )
  })

  it('refuses permit keep-alive beside priority or flow', () => {
    expect(
      problem({ defaults: { upstream }, routes: [route({ keepAliveMs: 200, priority: 'critical' })] }),
    ).toBe(
      "routes[0].concurrency.keepAliveMs: not beside priority: a kept permit would serve this replica's next request past the queue's order (set keepAliveMs: 0)",
    )
    expect(
      problem({ defaults: { upstream }, routes: [route({ keepAliveMs: 200, flow: { from: 'ip' } })] }),
    ).toContain('keepAliveMs: not beside flow')
  })

  it('per: global routes may differ in priority and maxWaitMs, not in flow or maxQueued', () => {
    const shared = { per: 'global', permits: 32, flow: { from: 'tenant' }, maxQueued: 100 }
    const ok = load({
      defaults: { upstream },
      routes: [
        route({ ...shared, priority: 'critical', maxWaitMs: 2000 }, 'play', '/play'),
        route({ ...shared, priority: 'sheddable', maxWaitMs: 250 }, 'prefetch', '/prefetch'),
      ],
    })
    expect(ok.routes.map((r) => r.concurrency!.priority!.default)).toEqual([6, 2])
    expect(
      problem({
        defaults: { upstream },
        routes: [
          route({ ...shared, priority: 'critical' }, 'play', '/play'),
          route({ ...shared, flow: { from: 'ip' } }, 'prefetch', '/prefetch'),
        ],
      }),
    ).toBe(
      'routes[1].concurrency.flow: per: global routes share one bucket, so their flow settings must equal those of routes[0] (priority and maxWaitMs may differ)',
    )
    expect(
      problem({
        defaults: { upstream },
        routes: [
          route({ ...shared }, 'play', '/play'),
          route({ ...shared, maxQueued: 5 }, 'prefetch', '/prefetch'),
        ],
      }),
    ).toBe(
      'routes[1].concurrency.maxQueued: per: global routes share one bucket, so maxQueued must equal that of routes[0] (100)',
    )
    // One class, two waits: which one would the shared queue apply?
    expect(
      problem({
        defaults: { upstream },
        routes: [
          route({ per: 'global', priority: 'critical', maxWaitMs: 2000 }, 'play', '/play'),
          route({ per: 'global', priority: 'critical', maxWaitMs: 100 }, 'prefetch', '/prefetch'),
        ],
      }),
    ).toBe(
      'routes[1].concurrency: per: global routes share one queue: its critical requests wait 2000 ms by routes[0] but 100 ms here; give the class one maxWaitMs (or a different class)',
    )
  })

  it('refuses maxQueued on a bucket that is no fair queue', () => {
    expect(problem({ defaults: { upstream }, routes: [route({ maxQueued: 10 })] })).toBe(
      'routes[0].concurrency.maxQueued: only with priority or flow: maxQueued bounds a fair queue across the fleet (maxQueue bounds each replica)',
    )
  })

  it('names each bad value and unknown field', () => {
    const message = problem({
      defaults: { upstream },
      routes: [
        route({ priority: 'urgent' }, 'a', '/a'),
        route({ priority: 9 }, 'b', '/b'),
        route({ priority: { header: 'x-p', trustHeader: true, tenant: {} } }, 'c', '/c'),
        route({ priority: { default: 'standard', maxWaitMs: { urgent: 5 } } }, 'd', '/d'),
        route({ flow: { from: 'cookie' } }, 'e', '/e'),
        route({ flow: { from: 'ip', weights: { acme: 101 }, max: 0, per: 1 } }, 'f', '/f'),
        route({ maxQueued: -1 }, 'g', '/g'),
      ],
    })
    const lines = message.split('\n')
    const classes = 'expected critical, standard, sheddable or an integer from 0 to 7'
    expect(lines).toContain(
      `routes[0].concurrency.priority: ${classes}, or an object with header, trustHeader, tenants, default, maxWaitMs`,
    )
    expect(lines).toContain(`routes[1].concurrency.priority: ${classes}`)
    expect(lines).toContain('routes[2].concurrency.priority.tenant: unknown field')
    expect(lines).toContain(`routes[3].concurrency.priority.maxWaitMs.urgent: ${classes} as a class`)
    expect(lines).toContain('routes[4].concurrency.flow.from: expected tenant, ip or header:<name>')
    expect(lines).toContain('routes[5].concurrency.flow.weights.acme: expected an integer from 1 to 100')
    expect(lines).toContain('routes[5].concurrency.flow.max: expected a positive integer')
    expect(lines).toContain('routes[5].concurrency.flow.per: unknown field')
    expect(lines).toContain('routes[6].concurrency.maxQueued: expected a positive integer')
  })

  it('--priority-header (trusted by naming it) and --flow-from for the single route, also from the environment', () => {
    const flags = parseFlags(['--upstream', upstream, '--priority-header', 'X-Prio'], {
      TOLLGATE_FLOW_FROM: 'header:X-User',
    })
    expect(resolveConfig({}, flags).routes[0]!.concurrency).toMatchObject({
      priority: { header: 'x-prio', tenants: {}, default: 4, maxWaitMs: {} },
      flow: { from: 'header', header: 'x-user', weights: {}, max: 0, maxFor: {} },
    })
    expect(() => parseFlags(['--flow-from', 'cookie'])).toThrow(
      '--flow-from: expected tenant, ip or header:<name> (got "cookie")',
    )
    expect(() =>
      resolveConfig({}, parseFlags(['--upstream', upstream, '--per', 'ip', '--flow-from', 'ip'])),
    ).toThrow('routes[0].concurrency.flow.from: not with per: ip')
  })
})
