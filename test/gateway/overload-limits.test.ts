// /limits of a fair route (docs/gateway/behaviour.md, "Priorities and fair shares"): the fleet's waiters by
// class, parked and evicted, the busiest flows this replica saw with their weight and cap, and one
// flow read by name. Hand-over of i38-F: passes once i38-D (Semaphore.stats() with classes,
// parked, evicted; Semaphore.flow(name)) and i38-E (the admission's priority/flow/overload options) merge.
import { pino } from 'pino'
import { afterEach, describe, expect, it } from 'vitest'
import { createGateway, type Gateway, resolveConfig, validateConfigFile } from '../../src/gateway/index.js'
import { eventually } from '../helpers/contract.js'
import { startUpstream } from '../helpers/upstream.js'

const gateways: Gateway[] = []
afterEach(async () => {
  await Promise.all(gateways.splice(0).map((gateway) => gateway.close()))
})

describe('/limits of a fair route', () => {
  it('shows the classes, parked, evicted and the busiest flows; reads a flow by name', async () => {
    const upstream = await startUpstream()
    const config = resolveConfig(
      validateConfigFile({
        defaults: { upstream: upstream.url },
        routes: [
          {
            name: 'api',
            match: { pathPrefix: '/' },
            concurrency: {
              per: 'route',
              permits: 1,
              maxWaitMs: 5000,
              priority: { header: 'x-priority', trustHeader: true },
              flow: { from: 'tenant', weights: { acme: 3 }, max: 2 },
            },
          },
        ],
      }),
    )
    const gateway = createGateway(
      { ...config, port: 0, admin: { host: '127.0.0.1', port: 0, token: undefined } },
      { logger: pino({ level: 'silent' }), processMetrics: false },
    )
    gateways.push(gateway)
    const { url, adminUrl } = await gateway.listen()
    const send = (tenant: string, priority: string, ms: number) =>
      fetch(`${url}/work?ms=${ms}`, { headers: { 'x-tenant-id': tenant, 'x-priority': priority } }).then(
        (response) => response.status,
      )
    const limits = async (path = '') =>
      (await (await fetch(`${adminUrl}/limits/api${path}`)).json()) as Record<string, unknown>
    const held = send('acme', 'standard', 1500)
    const waiting = [send('bob', 'sheddable', 1), send('bob', 'sheddable', 1), send('acme', 'critical', 1)]
    type Bucket = {
      classes: Record<string, { waiting: number }>
      parked: number
      evicted: Record<string, number>
      flows: { flow: string; share: number; weight: number; max: number; waiting: number; held: number }[]
    }
    let bucket: Bucket | undefined
    await eventually(async () => {
      bucket = ((await limits()).buckets as Bucket[])[0]
      return bucket!.classes.critical?.waiting === 1 && bucket!.flows.length === 2
    })
    expect(bucket!.classes).toEqual({ critical: { waiting: 1 }, sheddable: { waiting: 2 } })
    expect(bucket!.parked).toBe(0)
    expect(bucket!.evicted).toEqual({})
    const acme = bucket!.flows.find((f) => f.flow === 'acme')!
    expect(acme).toMatchObject({ weight: 3, max: 2, waiting: 1, held: 1 })
    expect(bucket!.flows.find((f) => f.flow === 'bob')).toMatchObject({ weight: 1, max: 2, waiting: 2 })
    expect(await limits('/flows/acme')).toEqual({
      flow: 'acme',
      weight: 3,
      max: 2,
      waiting: 1,
      held: 1,
      parked: 0,
    })
    expect(await Promise.all([held, ...waiting])).toEqual([200, 200, 200, 200])
  })
})
