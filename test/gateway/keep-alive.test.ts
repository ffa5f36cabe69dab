// Permit keep-alive in the real `tollgate-gateway` bin (--permit-keepalive-ms, concurrency.keepAliveMs), as
// separate processes sharing Redis, in front of an upstream that counts its own requests in flight:
// the cap holds across replicas, no fencing header is sent, and kept permits go back to Redis at
// SIGTERM and at a reload, not only when their time is up.
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createRedisStore, createSemaphore } from '../../src/index.js'
import { eventually, sleep } from '../helpers/contract.js'
import { baseFlags, metric, redisUrl, spawnGateway } from '../helpers/gateway.js'
import {
  scriptCallCount,
  connectCluster,
  connectStandalone,
  connectTo,
  topology,
  uniquePrefix,
} from '../helpers/redis.js'
import { startRedisServer } from '../helpers/redis-server.js'
import { startUpstream } from '../helpers/upstream.js'

let dir: string
beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'tollgate-keepalive-'))
})
afterAll(async () => {
  await rm(dir, { recursive: true, force: true })
})

const KINDS = {
  standalone: {
    flags: () => ['--redis', redisUrl(topology().standalone)],
    connect: () => connectStandalone(),
  },
  cluster: {
    flags: () => ['--redis-cluster', topology().cluster.map(redisUrl).join(',')],
    connect: () => connectCluster(),
  },
} as const

/** Holders of the gateway's global bucket, read from Redis by a client of the test's own. */
function holdersIn(
  kind: keyof typeof KINDS,
  prefix: string,
  client = KINDS[kind].connect(),
): () => Promise<number> {
  const store = createRedisStore(client, { prefix })
  const bucket = createSemaphore(store, 'global:*', { permits: 1 })
  return async () => (await bucket.stats()).holders
}

/** One replica on the standalone Redis with `--permits 3 --permit-keepalive-ms 10000` (and `extra`),
 * its upstream, and the holders of its global bucket. */
async function keepingGateway(extra: string[] = []) {
  const upstream = await startUpstream()
  const prefix = uniquePrefix().slice(0, -1)
  const gateway = await spawnGateway([
    ...baseFlags(upstream.url, prefix),
    ...KINDS.standalone.flags(),
    '--permits',
    '3',
    '--permit-keepalive-ms',
    '10000',
    ...extra,
  ])
  return { upstream, gateway, holders: holdersIn('standalone', prefix) }
}

describe.each(['standalone', 'cluster'] as const)('permit keep-alive [%s]', (kind) => {
  it('G1: 3 replicas, 3 closed-loop clients each, permits=5: the upstream never sees more than 5, and no fence', async () => {
    const upstream = await startUpstream()
    const prefix = uniquePrefix().slice(0, -1)
    const flags = [
      ...baseFlags(upstream.url, prefix),
      ...KINDS[kind].flags(),
      '--permits',
      '5',
      '--permit-keepalive-ms',
      '50',
      '--max-wait-ms',
      '30000',
      '--log-level',
      'warn',
    ]
    const gateways = await Promise.all([0, 1, 2].map(() => spawnGateway(flags)))
    // Each client sends its next request when the last is answered (fetch keeps its connection):
    // 9 clients for 5 permits across the fleet, so some wait and finished permits are kept. Each
    // request holds its permit 20 ms or more, so the cap is reached however slow the clients are. 150
    // requests in all, however long a loaded machine takes (the deadline only bounds a hang).
    const until = Date.now() + 30_000
    const statuses: number[] = []
    let sent = 0
    await Promise.all(
      gateways.flatMap((gateway) =>
        [0, 1, 2].map(async (c) => {
          while (sent < 150 && Date.now() < until) {
            sent++
            const response = await fetch(`${gateway.url}/work?ms=${20 + c}`)
            await response.text()
            statuses.push(response.status)
          }
        }),
      ),
    )
    expect(statuses.filter((status) => status !== 200)).toEqual([])
    expect(upstream.probe.entered).toBe(statuses.length)
    expect(statuses.length).toBe(150)
    expect(upstream.probe.max).toBe(5)
    // A permit serves several requests, so its fence would not be any one request's: none is sent.
    expect(upstream.probe.fences).toEqual([])
    for (const gateway of gateways) gateway.kill('SIGTERM')
    for (const gateway of gateways) expect(await gateway.exited).toEqual({ code: 0, signal: null })
    expect(await holdersIn(kind, prefix)()).toBe(0)
  }, 60_000)
})

describe('permit keep-alive in one replica', () => {
  it('serves sequential requests on one permit: one Redis script call instead of two per request', async () => {
    // A private server: its command counts are this test's alone.
    const redis = await startRedisServer()
    try {
      const upstream = await startUpstream()
      const client = connectTo(redis)
      const scripts = () => scriptCallCount(client)
      /** Script calls for 30 sequential requests; `atLeast`: wait until that many reached Redis (the
       * last request's release goes out after its response, so it may still be on its way). */
      const run = async (extra: string[], atLeast = 0) => {
        const gateway = await spawnGateway([
          ...baseFlags(upstream.url, uniquePrefix().slice(0, -1)),
          '--redis',
          redis.url,
          '--permits',
          '3',
          ...extra,
        ])
        const before = await scripts()
        for (let i = 0; i < 30; i++) expect((await fetch(`${gateway.url}/work?ms=1`)).status).toBe(200)
        if (atLeast > 0)
          await eventually(async () => (await scripts()) - before >= atLeast, 3000).catch(() => {})
        const calls = (await scripts()) - before
        gateway.kill('SIGTERM')
        await gateway.exited
        return calls
      }
      const kept = await run(['--permit-keepalive-ms', '10000'])
      const plain = await run([], 60)
      expect(plain).toBeGreaterThanOrEqual(60) // an acquire and a release per request
      expect(kept).toBe(1) // one acquire; the release comes at SIGTERM, after the count
    } finally {
      await redis.stop()
    }
  }, 30_000)

  it('keeps an idle permit in Redis, and gives it back at SIGTERM at once, also while a request is in flight', async () => {
    const { upstream, gateway, holders } = await keepingGateway()
    // Two at once, then both finished: two permits kept while idle.
    const pair = await Promise.all([0, 1].map(() => fetch(`${gateway.url}/work?ms=50`)))
    expect(pair.map((response) => response.status)).toEqual([200, 200])
    expect(await holders()).toBe(2)
    let text = await (await fetch(`${gateway.adminUrl}/metrics`)).text()
    expect(metric(text, 'tollgate_requests_in_flight', { route: 'default' })).toBe(0)
    expect(metric(text, 'tollgate_permits_kept', { route: 'default' })).toBe(2)
    // A slow request takes one of them; the other stays kept.
    const slow = fetch(`${gateway.url}/hold`)
    await eventually(() => upstream.probe.holders.length === 1)
    // (A scrape's text is made at most once a second: the next one shows it.)
    await eventually(async () => {
      text = await (await fetch(`${gateway.adminUrl}/metrics`)).text()
      return metric(text, 'tollgate_permits_kept', { route: 'default' }) === 1
    }, 3000)
    expect(await holders()).toBe(2)
    const stoppedAt = Date.now()
    gateway.kill('SIGTERM')
    // The idle one goes back at once, not when the drain ends (nor after 10 s or the 30 s TTL).
    await eventually(async () => (await holders()) === 1, 3000)
    expect(Date.now() - stoppedAt).toBeLessThan(3000)
    upstream.probe.holders.shift()!()
    expect((await slow).status).toBe(200)
    expect(await gateway.exited).toEqual({ code: 0, signal: null })
    expect(await holders()).toBe(0)
  }, 30_000)

  it('a limit lowered through the admin API applies to its kept permits at once', async () => {
    const { upstream, gateway, holders } = await keepingGateway(['--max-wait-ms', '10000'])
    const three = await Promise.all([0, 1, 2].map(() => fetch(`${gateway.url}/work?ms=50`)))
    expect(three.map((response) => response.status)).toEqual([200, 200, 200])
    expect(await holders()).toBe(3) // all kept
    const put = await fetch(`${gateway.adminUrl}/limits/default`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ permits: 1 }),
    })
    expect(put.status).toBe(200)
    expect(await holders()).toBe(0) // flushed with the change, before it answered
    // Three now: one runs, two wait (the kept permits would have let all three in).
    const held = [0, 1, 2].map(() => fetch(`${gateway.url}/hold`))
    await eventually(() => upstream.probe.holders.length === 1)
    await sleep(300)
    expect(upstream.probe.holders.length).toBe(1)
    for (let i = 0; i < 3; i++) {
      await eventually(() => upstream.probe.holders.length === 1)
      upstream.probe.holders.shift()!()
    }
    expect((await Promise.all(held)).map((response) => response.status)).toEqual([200, 200, 200])
  }, 30_000)

  it('a reload gives the kept permits of the old routes back at once', async () => {
    const upstream = await startUpstream()
    const prefix = uniquePrefix().slice(0, -1)
    const file = path.join(dir, 'keepalive.yaml')
    await writeFile(
      file,
      `defaults:\n  upstream: ${upstream.url}\n  concurrency: { permits: 3, keepAliveMs: 10000 }\n`,
    )
    const gateway = await spawnGateway([
      '--config',
      file,
      ...KINDS.standalone.flags(),
      '--port',
      '0',
      '--admin-port',
      '0',
      '--prefix',
      prefix,
    ])
    const holders = holdersIn('standalone', prefix)
    expect((await fetch(`${gateway.url}/work?ms=1`)).status).toBe(200)
    expect(await holders()).toBe(1)
    const reloadedAt = Date.now()
    gateway.kill('SIGHUP')
    await eventually(async () => (await holders()) === 0, 5000)
    expect(Date.now() - reloadedAt).toBeLessThan(5000)
    // The new routes keep their own.
    expect((await fetch(`${gateway.url}/work?ms=1`)).status).toBe(200)
    expect(await holders()).toBe(1)
  }, 30_000)
})
