// semaphore() with `priority`, `flow` and `overload` end to end (docs/middleware.md, "Overload"), on the memory
// store's fair queue: the store admits a critical request before an older sheddable one; the local
// maxQueue sheds the newest sheddable for a critical arrival (503, Retry-After, reason "shed"), whose
// handler never runs; maxWaitMs per class; metric labels bounded whatever flow header clients send.
import { Registry } from 'prom-client'
import { describe, expect, it } from 'vitest'
import { createMemoryStore } from '../../src/index.js'
import { get, startApp } from '../helpers/apps.js'
import { eventually } from '../helpers/contract.js'

type Req = { headers: Record<string, string | string[] | undefined> }
const header = (req: Req, name: string) => {
  const value = req.headers[name]
  return Array.isArray(value) ? value[0] : value
}
const options = (extra: Record<string, unknown>) => ({
  store: createMemoryStore(),
  permits: 1,
  priority: (req: Req) => (header(req, 'x-priority') ?? 'standard') as never,
  flow: (req: Req) => header(req, 'x-tenant'),
  ...extra,
})

describe('semaphore() with priorities and flows [express, memory]', () => {
  it('admits a waiting critical request before an older sheddable one', async () => {
    const app = await startApp('express', options({ maxWaitMs: 10_000 }))
    const holder = get(`${app.url}/hold`)
    await eventually(() => app.probe.holders.length === 1)
    const order: string[] = []
    const low = get(`${app.url}/work?ms=1`, { 'x-priority': 'sheddable' }).then((r) => {
      order.push('low')
      return r
    })
    await eventually(() => app.counters.queued === 1)
    const high = get(`${app.url}/work?ms=1`, { 'x-priority': 'critical' }).then((r) => {
      order.push('high')
      return r
    })
    await eventually(() => app.counters.queued === 2)
    app.probe.holders.shift()?.()
    expect([(await holder).status, (await low).status, (await high).status]).toEqual([200, 200, 200])
    expect(order).toEqual(['high', 'low'])
  })

  it('sheds the newest sheddable waiter for a critical arrival: 503, Retry-After, "shed", never run', async () => {
    const app = await startApp('express', options({ maxWaitMs: 10_000, maxQueue: 1 }))
    const holder = get(`${app.url}/hold`)
    await eventually(() => app.probe.holders.length === 1)
    const low = get(`${app.url}/work?ms=1`, { 'x-priority': 'sheddable' })
    await eventually(() => app.counters.queued === 1)
    const high = get(`${app.url}/work?ms=1`, { 'x-priority': 'critical' })
    const shed = await low
    expect(shed.status).toBe(503)
    expect(shed.headers.get('retry-after')).toBe('10')
    expect(JSON.parse(shed.body)).toMatchObject({ reason: 'shed' })
    app.probe.holders.shift()?.()
    expect([(await holder).status, (await high).status]).toEqual([200, 200])
    expect(app.probe.entered).toBe(2) // the holder and the critical one: the shed one never ran
    expect(app.counters.rejected.shed).toBe(1)
  })

  it('times out the sheddable class at its own maxWaitMs, not the critical one', async () => {
    const app = await startApp('express', options({ maxWaitMs: { critical: 10_000, sheddable: 50 } }))
    const holder = get(`${app.url}/hold`)
    await eventually(() => app.probe.holders.length === 1)
    const high = get(`${app.url}/work?ms=1`, { 'x-priority': 'critical' })
    const low = await get(`${app.url}/work?ms=1`, { 'x-priority': 'sheddable' })
    expect(low.status).toBe(503)
    expect(JSON.parse(low.body)).toMatchObject({ reason: 'timeout' })
    expect(app.counters.queued).toBe(1) // the critical one still waits
    app.probe.holders.shift()?.()
    expect([(await holder).status, (await high).status]).toEqual([200, 200])
  })

  it('labels only the flows the config names: a hostile x-tenant adds no series', async () => {
    const registry = new Registry()
    const app = await startApp(
      'express',
      options({
        maxWaitMs: 0,
        name: 'hostile',
        metrics: { registry },
        overload: { flowWeights: { acme: 2 } },
      }),
    )
    const holder = get(`${app.url}/hold`, { 'x-tenant': 'acme' })
    await eventually(() => app.probe.holders.length === 1)
    for (let i = 0; i < 50; i++)
      await get(`${app.url}/work`, { 'x-tenant': `evil-${i}-${'x'.repeat(i * 10)}` })
    app.probe.holders.shift()?.()
    await holder
    const text = await registry.metrics()
    const flows = new Set([...text.matchAll(/flow="([^"]*)"/g)].map((m) => m[1]))
    expect([...flows].sort()).toEqual(['acme', 'other'])
    expect(text).toContain(
      'tollgate_policy_flow_rejected_total{policy="hostile",flow="other",reason="busy"} 50',
    )
    expect(text).toContain('tollgate_policy_flow_admitted_total{policy="hostile",flow="acme"} 1')
  })
})
