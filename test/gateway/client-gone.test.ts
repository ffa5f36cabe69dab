// A client that leaves while its request is held upstream and the gateway is not reading its
// connection (a request parsed behind the held one, or a read-ahead beyond 64 KB handed back to the
// socket): the request is given up (the upstream's connection closes) and its permit released once
// (the store's script calls: one acquisition, one release), on both front ends (docs/gateway/internals.md,
// "Lean paths").
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import type { Gateway } from '../../src/gateway/index.js'
import { eventually, sleep } from '../helpers/contract.js'
import { redisUrl } from '../helpers/gateway.js'
import { startInProcess } from '../helpers/in-process-gateway.js'
import { rawConnect } from '../helpers/raw-http.js'
import { startRecorder } from '../helpers/recorder.js'
import { connectTo, scriptCallCount } from '../helpers/redis.js'
import { type RedisServerHandle, startRedisServer } from '../helpers/redis-server.js'

let redis: RedisServerHandle
beforeAll(async () => {
  redis = await startRedisServer() // private: its script calls are this file's
}, 30_000)
afterAll(async () => {
  await redis?.stop()
})
const gateways: Gateway[] = []
afterEach(async () => {
  await Promise.all(gateways.splice(0).map((gateway) => gateway.close()))
})

const PIPELINED = `GET /x HTTP/1.1\r\nHost: gw\r\nX-Pad: ${'p'.repeat(1000)}\r\n\r\n`

describe('a client that leaves while its request is held upstream', () => {
  for (const [name, lean, behind, leave] of [
    ['lean, 70 KB pipelined (beyond the read-ahead), reset', true, 70_000, 'reset'],
    ['http.Server, nothing behind, half-close', false, 0, 'end'],
    ['http.Server, 2 KB pipelined, reset', false, 2_000, 'reset'],
  ] as const)
    it(`${name}: given up within 2 s, its permit released once`, async () => {
      const upstream = await startRecorder()
      const { port } = await startInProcess(
        gateways,
        { defaults: { upstream: upstream.url, concurrency: { per: 'route', permits: 3 } } },
        ['--redis', redisUrl(redis)],
        lean,
      )
      const store = connectTo(redis)
      const before = await scriptCallCount(store)
      const client = await rawConnect(port)
      client.write('GET /hold HTTP/1.1\r\nHost: gw\r\n\r\n')
      await eventually(() => upstream.inFlight.get('/hold') === 1)
      const bytes = PIPELINED.repeat(Math.ceil(behind / PIPELINED.length))
      for (let at = 0; at < bytes.length; at += 8192)
        await new Promise((resolve) => client.socket.write(bytes.slice(at, at + 8192), resolve))
      await sleep(50)
      if (leave === 'reset') client.socket.resetAndDestroy()
      else client.socket.end()
      try {
        // Before: held until the upstream answered (here, never), in each case.
        await eventually(() => (upstream.inFlight.get('/hold') ?? 0) === 0, 2000)
        await eventually(async () => (await scriptCallCount(store)) - before === 2)
        await sleep(200)
        expect((await scriptCallCount(store)) - before, 'an acquisition and a release').toBe(2)
      } finally {
        upstream.release()
        store.disconnect()
      }
    })
})
