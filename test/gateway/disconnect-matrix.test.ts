// Every way a client leaves, on all four request paths: {lean front end, http.Server} × {lean
// upstream pool, undici} (GatewayOptions.lean picks each side). A real Redis store counts the permits
// and a recording upstream judges what reached it.
import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest'
import type { Gateway } from '../../src/gateway/index.js'
import { liveParsers } from '../../src/gateway/http/lean/llhttp.js'
import { redisUrl } from '../helpers/gateway.js'
import { startInProcess } from '../helpers/in-process-gateway.js'
import { rawConnect } from '../helpers/raw-http.js'
import { type Recorder, startRecorder } from '../helpers/recorder.js'
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

const COMBINATIONS = [
  { name: 'lean front end + lean upstream', frontEnd: true, upstream: true },
  { name: 'lean front end + undici', frontEnd: true, upstream: false },
  { name: 'http.Server + lean upstream', frontEnd: false, upstream: true },
  { name: 'http.Server + undici', frontEnd: false, upstream: false },
] as const
type Combination = (typeof COMBINATIONS)[number]

/** A gateway on `combination`'s paths in front of `upstream`: one permit per route, a queue of 5 s. */
async function start(
  combination: Combination,
  upstream: Recorder,
): Promise<{ port: number; gateway: Gateway }> {
  return startInProcess(
    gateways,
    { defaults: { upstream: upstream.url, concurrency: { per: 'route', permits: 1, maxWaitMs: 5000 } } },
    ['--redis', redisUrl(redis)],
    { frontEnd: combination.frontEnd, upstream: combination.upstream },
  )
}

/** Requests undici creates while `run` runs (its diagnostics channel: undici's, not the lean pool's). */
async function undiciRequests(run: () => Promise<void>): Promise<number> {
  let created = 0
  const count = () => created++
  subscribe('undici:request:create', count)
  try {
    await run()
  } finally {
    unsubscribe('undici:request:create', count)
  }
  return created
}

for (const combination of COMBINATIONS) {
  it(`[${combination.name}] serves a bodiless GET on the paths it names`, async () => {
    const upstream = await startRecorder()
    const { port } = await start(combination, upstream)
    const parsers = liveParsers()
    const client = await rawConnect(port)
    let parsersWhileOpen = 0
    const undici = await undiciRequests(async () => {
      client.write('GET /plain HTTP/1.1\r\nHost: gw\r\n\r\n')
      await client.waitFor(/ok GET \/plain/)
      parsersWhileOpen = liveParsers() - parsers
    })
    // The lean front end parses a connection with a request parser of its own; http.Server with
    // Node's, not counted there. The lean pool creates no undici request.
    expect(parsersWhileOpen, 'lean request parsers of the open connection').toBe(combination.frontEnd ? 1 : 0)
    expect(undici, 'undici requests').toBe(combination.upstream ? 0 : 1)
  })
}
