// Smoke test on the previous majors: Express 4 and Koa 2.
import { describe, expect, it } from 'vitest'
import { createMemoryStore } from '../../src/index.js'
import { get, startApp } from '../helpers/apps.js'
import { eventually } from '../helpers/contract.js'

describe.each(['express4', 'koa2'] as const)('semaphore() on %s', (framework) => {
  it('G1 G3: caps, rejects with headers and releases on close', async () => {
    const app = await startApp(framework, { permits: 2, store: createMemoryStore(), maxWaitMs: 100 })
    const responses = await Promise.all(Array.from({ length: 10 }, () => get(`${app.url}/work?ms=10`)))
    expect(responses.map((r) => r.status)).toContain(200)
    expect(app.probe.max).toBeLessThanOrEqual(2)
    const holders = [get(`${app.url}/hold`), get(`${app.url}/hold`)]
    await eventually(() => app.probe.holders.length === 2)
    const rejected = await get(`${app.url}/work`)
    expect(rejected.status).toBe(503)
    expect(rejected.headers.get('retry-after')).toBe('1')
    app.probe.holders.splice(0).forEach((release) => release())
    await Promise.all(holders)
    await eventually(() => app.counters.inFlight === 0)
  })
})
