// The disconnect matrix: every way a client leaves, on all four request paths ({lean front end,
// http.Server} × {lean upstream pool, undici}, each side picked by GatewayOptions.lean), against a
// real Redis store and a recording upstream.
//
// For each case on each combination: the upstream's request is given up within a bound (the
// recording upstream sees it close, or never sees it), the permit is released exactly once (the
// private Redis server's script calls: each request's acquisition and release, no more, still so
// after a settle; a fresh request then gets the one permit), and the close contract
// (src/gateway/http/close-contract.ts) counted no breach.
import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest'
import type { Gateway } from '../../src/gateway/index.js'
import { liveParsers } from '../../src/gateway/http/lean/llhttp.js'
import { eventually, sleep } from '../helpers/contract.js'
import { redisUrl } from '../helpers/gateway.js'
import { counterTotal, startInProcess } from '../helpers/in-process-gateway.js'
import { type RawConnection, rawConnect } from '../helpers/raw-http.js'
import { type Recorder, startRecorder } from '../helpers/recorder.js'
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

/** How long a cut is given to reach the upstream: at once where the connection is read, within the
 * reset probe's second where it is not (a request parsed behind the one in flight, http.Server). */
const GIVEN_UP_MS = 2500
/** After the script calls reached what they should, this long for any late one (a second release). */
const SETTLE_MS = 200
/** No new script call for this long: a queued request's wait group has subscribed (its re-checks back
 * off up to 200 ms apart before that). */
const QUIET_MS = 300
/** What a close of the gateway may take when every request has ended: far below the 10 s grace period
 * it waits for one that has not. */
const CLOSED_MS = 5000

interface Leaving {
  port: number
  upstream: Recorder
  /** Script calls since the gateway started. */
  scripts(): Promise<number>
}

/** A way to leave: run it, resolve with the script calls it must come to (two per request that got
 * the permit or a place in its queue: the acquisition, the release) and the paths the upstream must
 * never see. */
interface Case {
  id: string
  title: (combination: Combination) => string
  leave(at: Leaving): Promise<{ scripts: number; unseen?: string[] }>
}

const get = (path: string) => `GET ${path} HTTP/1.1\r\nHost: gw\r\n\r\n`

/** The upstream has `path`'s request in flight. */
const inFlight = (upstream: Recorder, path: string) => eventually(() => upstream.inFlight.get(path) === 1)

/** The upstream's request of `path` closed (given up), within GIVEN_UP_MS. */
async function givenUp(upstream: Recorder, path: string): Promise<void> {
  await eventually(() => upstream.inFlight.get(path) === 0, GIVEN_UP_MS).catch(() => {})
  expect(upstream.inFlight.get(path), `${path} still in flight upstream after ${GIVEN_UP_MS} ms`).toBe(0)
}

const CASES: Case[] = [
  {
    id: 'a',
    title: () => '(a) the client leaves (FIN) while its request is queued for the permit',
    async leave({ port, upstream, scripts }) {
      const holder = await rawConnect(port)
      holder.write(get('/hold-a'))
      await inFlight(upstream, '/hold-a')
      const queued = await rawConnect(port)
      queued.write(get('/queued'))
      // What holding and queueing cost, counted once it is quiet: the holder's acquisition, the queued
      // one's, and the re-checks of a new wait group until it has subscribed (core/client/wait-group.ts:
      // they back off up to 200 ms apart, so quiet is no new call for longer than that).
      await eventually(async () => (await scripts()) >= 2)
      let queuedCalls = -1
      await eventually(async () => {
        const now = await scripts()
        if (now === queuedCalls) return true
        queuedCalls = now
        await sleep(QUIET_MS)
        return false
      }, 10_000)
      queued.socket.end()
      // Its place in the queue is given back (one call) before the holder's permit is released: the
      // permit goes to nobody who has left, and the queued request is never forwarded.
      await eventually(async () => (await scripts()) === queuedCalls + 1, 3000)
      upstream.release()
      await holder.waitFor(/held GET \/hold-a/)
      // Then two releases: the queued one's place in the queue, the holder's permit.
      return { scripts: queuedCalls + 2, unseen: ['/queued'] }
    },
  },
  {
    id: 'b',
    title: () => "(b) the client leaves (reset) while waiting for the upstream's response head",
    async leave({ port, upstream }) {
      const client = await rawConnect(port)
      client.write(get('/hold-b'))
      await inFlight(upstream, '/hold-b')
      client.socket.resetAndDestroy()
      await givenUp(upstream, '/hold-b')
      return { scripts: 2 }
    },
  },
  {
    id: 'c',
    // A request with a body goes to http.Server and undici whatever the combination: the lean front
    // end hands the connection over, the lean pool takes bodiless requests only.
    title: (combination) => {
      const notes = [
        ...(combination.frontEnd ? ['handed to http.Server'] : []),
        ...(combination.upstream ? ['sent by undici'] : []),
      ]
      return `(c) the client leaves (FIN) mid-request-body${notes.length > 0 ? ` (a body: ${notes.join(', ')})` : ''}`
    },
    async leave({ port, upstream }) {
      const client = await rawConnect(port)
      client.write(`POST /upload HTTP/1.1\r\nHost: gw\r\nContent-Length: 1000\r\n\r\n${'x'.repeat(100)}`)
      await inFlight(upstream, '/upload')
      client.socket.end() // 100 bytes of 1000
      await givenUp(upstream, '/upload')
      return { scripts: 2 }
    },
  },
  {
    id: 'd',
    title: () => "(d) the client leaves (reset) mid-response: the upstream's head and part of its body sent",
    async leave({ port, upstream }) {
      const client = await rawConnect(port)
      client.write(get('/drip?chunks=50'))
      await client.waitFor(/drip\n/)
      client.socket.resetAndDestroy()
      await givenUp(upstream, '/drip')
      return { scripts: 2 }
    },
  },
  {
    id: 'e',
    title: () => '(e) a pipelined request behind another, whose connection is reset',
    async leave({ port, upstream }) {
      const client = await rawConnect(port)
      // One write: the chunk that brought /hold-e (in flight now) brought /behind too, so it is parsed
      // behind it (http.Server) or read ahead (lean) when the connection is reset.
      client.write(get('/hold-e') + get('/behind'))
      await inFlight(upstream, '/hold-e')
      client.socket.resetAndDestroy()
      await givenUp(upstream, '/hold-e')
      return { scripts: 2, unseen: ['/behind'] }
    },
  },
]

/** Breaches of the close contract the gateway counted. */
async function breaches(gateway: Gateway): Promise<number> {
  return counterTotal(gateway.metrics.contractBreaches)
}

for (const combination of COMBINATIONS)
  for (const leaving of CASES)
    it(`[${combination.name}] ${leaving.title(combination)}: given up, its permit released once`, async () => {
      const upstream = await startRecorder()
      const { port, gateway } = await start(combination, upstream)
      const store = connectTo(redis)
      const before = await scriptCallCount(store)
      const scripts = async () => (await scriptCallCount(store)) - before
      try {
        const { scripts: expected, unseen = [] } = await leaving.leave({ port, upstream, scripts })
        // Counted by the store: what each request took came back, once; late calls had time to come.
        await eventually(async () => (await scripts()) >= expected, 3000).catch(() => {})
        await sleep(SETTLE_MS)
        expect(await scripts(), 'script calls: acquisitions and releases').toBe(expected)
        expect(await breaches(gateway), 'close contract breaches').toBe(0)
        for (const path of unseen)
          expect(
            upstream.requests.map((request) => request.url),
            `${path} reached the upstream`,
          ).not.toContain(path)
        // The one permit is free: a new request is served at once, not queued behind a lost one.
        const after: RawConnection = await rawConnect(port)
        after.write(get('/after'))
        await after.waitFor(/ok GET \/after/, 2000)
        after.socket.end()
        // Every request has ended, the one that never took a permit too (a pipelined one whose
        // connection closed): the drain has none to wait for.
        const closing = performance.now()
        await gateway.close()
        expect(performance.now() - closing, 'the close waited for a request that never ended').toBeLessThan(
          CLOSED_MS,
        )
      } finally {
        upstream.release()
        store.disconnect()
      }
    })
