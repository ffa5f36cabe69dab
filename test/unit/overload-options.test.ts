// The middleware's overload options (docs/middleware.md, "Overload"): `priority`, `flow`, `overload` and maxWaitMs
// per class, checked at construction (ConfigError naming the option, unknown keys refused), and a
// request's class and flow taken from the user's functions, whose failures take the default.
import { describe, expect, it } from 'vitest'
import { ConfigError } from '../../src/core/errors.js'
import { createMemoryStore } from '../../src/index.js'
import { fairRequests, rwlockAdmission, semaphoreAdmission } from '../../src/admission/buckets.js'
import { resolveCommon, type SemaphoreMiddlewareOptions } from '../../src/admission/options.js'

type Req = { priority?: unknown; flow?: unknown; throws?: boolean }
const shape = { method: () => 'GET', path: () => '/' }

function refusal(options: SemaphoreMiddlewareOptions<Req>, keepAliveMs = 0): string {
  try {
    semaphoreAdmission<Req>({ store: createMemoryStore(), ...options }, keepAliveMs)
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError)
    return (error as Error).message
  }
  throw new Error('expected a ConfigError')
}

describe('the overload options are checked at construction', () => {
  it('names a bad priority or flow, an unknown key and a misspelt one', () => {
    expect(refusal({ permits: 2, priority: 'critical' as never })).toMatch(
      /Invalid option "priority": expected a function of the request/,
    )
    expect(refusal({ permits: 2, flow: 'tenant' as never })).toMatch(
      /Invalid option "flow": expected a function/,
    )
    expect(refusal({ permits: 2, overload: [] as never })).toMatch(/Invalid option "overload"/)
    expect(refusal({ permits: 2, priorty: () => 'critical' } as never)).toMatch(/did you mean "priority"\?/)
    expect(refusal({ permits: 2, overload: { flowWeight: {} } as never })).toMatch(
      /did you mean "flowWeights"\?/,
    )
    expect(refusal({ permits: 2, overload: { maxQueue: 5 } as never })).toMatch(/overload\.maxQueued/)
    expect(refusal({ permits: 2, priority: () => 'critical' }, 5000)).toMatch(
      /no permit keep-alive beside priority/,
    )
  })

  it('takes maxWaitMs per class: by name or number, a missing class taking standard’s', () => {
    const store = createMemoryStore()
    const byName = resolveCommon({ store, maxWaitMs: { critical: 2000, sheddable: 250 } })
    expect(byName.maxWaitByClass).toEqual([1000, 1000, 250, 1000, 1000, 1000, 2000, 1000])
    expect(byName.maxWaitMs).toBe(1000)
    const byNumber = resolveCommon({ store, maxWaitMs: { standard: 500, 7: 0 } })
    expect(byNumber.maxWaitByClass).toEqual([500, 500, 500, 500, 500, 500, 500, 0])
    expect(byNumber.maxWaitMs).toBe(500)
    expect(resolveCommon({ store, maxWaitMs: 300 }).maxWaitByClass).toBeUndefined()
    const bad = (maxWaitMs: unknown) => () => resolveCommon({ store, maxWaitMs: maxWaitMs as never })
    expect(bad({ urgent: 10 })).toThrow(/Unknown priority class "urgent" in maxWaitMs/)
    expect(bad({ 8: 10 })).toThrow(/Unknown priority class "8"/)
    expect(bad({ critical: 10, 6: 20 })).toThrow(/gives class 6 twice/)
    expect(bad({ sheddable: -1 })).toThrow(/"maxWaitMs.sheddable": expected an integer from 0 to 600000/)
    // A read/write lock has no classes.
    expect(() => rwlockAdmission<Req>({ store, maxWaitMs: { critical: 10 } as never }, shape)).toThrow(
      /"maxWaitMs": expected an integer from 0 to 600000 \(received/,
    )
  })
})

describe("a request's class and flow", () => {
  it('a throwing or invalid priority() or flow() takes the default, logged once per kind', () => {
    const logged: string[] = []
    const logger = { warn() {}, error: (message: string) => void logged.push(message) }
    const of = fairRequests<Req>(
      {
        priority: (req) => {
          if (req.throws) throw new Error('boom')
          return req.priority as never
        },
        flow: (req) => {
          if (req.throws) throw new Error('boom')
          return req.flow as never
        },
      },
      { flowMax: { acme: 2 } },
      logger,
    )
    expect(of({ priority: 'critical', flow: ' acme ' })).toEqual({ priority: 6, flow: 'acme', cap: 2 })
    expect(of({ priority: 3, flow: 42 })).toEqual({ priority: 3, flow: '42', cap: undefined })
    expect(of({ priority: undefined, flow: '' })).toEqual({ priority: 4, flow: undefined, cap: undefined })
    for (let i = 0; i < 3; i++) {
      expect(of({ priority: 'urgent', flow: { id: 1 } })).toMatchObject({ priority: 4, flow: undefined })
      expect(of({ priority: 8, flow: [] })).toMatchObject({ priority: 4, flow: undefined })
      expect(of({ throws: true })).toMatchObject({ priority: 4, flow: undefined })
    }
    expect(logged.sort()).toEqual([
      'tollgate: flow() returned no string; counting the request to the default flow (said once)',
      'tollgate: flow() threw; counting the request to the default flow (said once)',
      "tollgate: priority() returned no class; counting the request as 'standard' (said once)",
      "tollgate: priority() threw; counting the request as 'standard' (said once)",
    ])
    // A hostile flow name is bounded (hashed past 256 characters), never refused.
    const long = of({ flow: 'x'.repeat(10_000) }).flow as string
    expect(long.length).toBeLessThanOrEqual(256)
    expect(long).toMatch(/^sha256:/)
  })
})
