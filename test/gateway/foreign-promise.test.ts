// An app that embeds the gateway (createGateway) may have replaced the global Promise with a polyfill
// or Bluebird. The gateway's own promises are native ones, so it tells a promise by its then(), not by
// `instanceof Promise`: a request admitted through Redis (a promise) is proxied as usual.
import { afterEach, expect, it } from 'vitest'
import type { Gateway } from '../../src/gateway/index.js'
import { whilePromiseReplacedAsync } from '../helpers/foreign-promise.js'
import { redisUrl } from '../helpers/gateway.js'
import { startInProcess } from '../helpers/in-process-gateway.js'
import { rawExchange, statuses } from '../helpers/raw-http.js'
import { topology } from '../helpers/redis.js'
import { startUpstream } from '../helpers/upstream.js'

const gateways: Gateway[] = []
afterEach(async () => {
  await Promise.all(gateways.splice(0).map((gateway) => gateway.close()))
})

for (const lean of [true, false]) {
  it(`a request admitted through Redis is proxied while the global Promise is replaced [lean ${lean}]`, async () => {
    const upstream = await startUpstream()
    const { port } = await startInProcess(
      gateways,
      { defaults: { upstream: upstream.url, concurrency: { per: 'route', permits: 10 } } },
      ['--redis', redisUrl(topology().standalone)],
      lean,
    )
    const answer = await whilePromiseReplacedAsync(() =>
      rawExchange(port, 'GET /fast?ms=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'),
    )
    expect(statuses(answer)).toEqual([200])
    expect(upstream.probe.entered).toBe(1)
  })
}
