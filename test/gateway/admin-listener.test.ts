// The admin listener under hostile clients (docs/gateway.md, "Admin listener"): many askers of one
// answer at once. A real gateway, a private redis-server whose INFO commandstats count what the
// listener costs the store, raw sockets on the client side.
import net from 'node:net'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import type { Gateway } from '../../src/gateway/index.js'
import { startInProcess } from '../helpers/in-process-gateway.js'
import { rawConnect } from '../helpers/raw-http.js'
import { commandCount, connectTo, scriptCallCount } from '../helpers/redis.js'
import { type RedisServerHandle, startRedisServer } from '../helpers/redis-server.js'
import { startUpstream } from '../helpers/upstream.js'

let redis: RedisServerHandle
beforeAll(async () => {
  // Private: its command counts are this file's gateways' alone.
  redis = await startRedisServer()
}, 30_000)
afterAll(async () => {
  await redis?.stop()
})

const gateways: Gateway[] = []
afterEach(async () => {
  await Promise.all(gateways.splice(0).map((gateway) => gateway.close()))
})

/** Routes of the gateway: each /metrics and each data.json snapshot reads every one's limit from the
 * store. */
const ROUTES = 20

describe('the admin listener', () => {
  it('many askers at once share one computation: /metrics, /readyz and data.json cost the store what one asker does; /healthz nothing', async () => {
    const upstream = await startUpstream()
    const { gateway } = await startInProcess(
      gateways,
      {
        admin: { host: '127.0.0.1', port: 0 },
        defaults: { upstream: upstream.url, concurrency: { per: 'route', permits: 10 } },
        routes: Array.from({ length: ROUTES }, (_, i) => ({
          name: `r${i}`,
          match: { pathPrefix: `/r${i}` },
        })),
      },
      ['--redis', redis.url],
    )
    const port = (gateway.admin!.address() as net.AddressInfo).port
    const store = connectTo(redis)
    const askers = 50
    const askAll = async (asked: string) => {
      const answers = await Promise.all(
        Array.from({ length: askers }, async () => {
          const client = await rawConnect(port)
          client.write(`GET ${asked} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`)
          return client.closed
        }),
      )
      return answers.map((text) => Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1]))
    }
    const costOf = async (asked: string) => {
      const [pings, reads] = [await commandCount(store, 'ping'), await scriptCallCount(store)]
      expect(await askAll(asked)).toEqual(Array(askers).fill(200))
      return {
        pings: (await commandCount(store, 'ping')) - pings,
        reads: (await scriptCallCount(store)) - reads,
      }
    }
    // Before: 50 PINGs and 50 x 20 reads for /metrics, 50 PINGs for /readyz.
    expect(await costOf('/metrics')).toEqual({ pings: 1, reads: ROUTES })
    expect(await costOf('/readyz')).toEqual({ pings: 1, reads: 0 })
    expect(await costOf('/dashboard/data.json')).toEqual({ pings: 0, reads: ROUTES })
    expect(await costOf('/healthz')).toEqual({ pings: 0, reads: 0 })
    // The text, made one metric at a time, is the registry's: the same series in the same order.
    const served = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text()
    const series = (text: string) => text.split('\n').filter((line) => line.startsWith('# '))
    expect(series(served)).toEqual(series(await gateway.metrics.registry.metrics()))
    expect(served.endsWith('\n') && !served.endsWith('\n\n')).toBe(true)
  })
})
