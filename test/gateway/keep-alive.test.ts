// Permit keep-alive in the real `tollgate` bin (--permit-keepalive-ms, concurrency.keepAliveMs), as
// separate processes sharing Redis, in front of an upstream that counts its own requests in flight:
// the cap holds across replicas, no fencing header is sent, and kept permits go back to Redis at
// SIGTERM and at a reload, not only when their time is up.
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createRedisStore, createSemaphore } from '../../src/index.js'
import { eventually } from '../helpers/contract.js'
import { baseFlags, metric, redisUrl, spawnGateway } from '../helpers/gateway.js'
import { connectCluster, connectStandalone, topology, uniquePrefix } from '../helpers/redis.js'
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
function holdersIn(kind: keyof typeof KINDS, prefix: string): () => Promise<number> {
  const store = createRedisStore(KINDS[kind].connect(), { prefix })
  const bucket = createSemaphore(store, 'global:*', { permits: 1 })
  return async () => (await bucket.stats()).holders
}

describe.each(['standalone', 'cluster'] as const)('permit keep-alive [%s]', (kind) => {
  it('G1: 3 replicas, 300 concurrent requests, permits=5: the upstream never sees more than 5, and no fence', async () => {
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
      '--max-queue',
      '1000',
      '--log-level',
      'warn',
    ]
    const gateways = await Promise.all([0, 1, 2].map(() => spawnGateway(flags)))
    const statuses = await Promise.all(
      Array.from({ length: 300 }, async (_, i) => {
        const response = await fetch(`${gateways[i % 3]!.url}/work?ms=${i % 5}`)
        await response.text()
        return response.status
      }),
    )
    expect(statuses.filter((status) => status !== 200)).toEqual([])
    expect(upstream.probe.entered).toBe(300)
    expect(upstream.probe.max).toBe(5)
    // A lease serves several requests, so its fence would not be any one request's: none is sent.
    expect(upstream.probe.fences).toEqual([])
    for (const gateway of gateways) gateway.kill('SIGTERM')
    for (const gateway of gateways) expect(await gateway.exited).toEqual({ code: 0, signal: null })
    expect(await holdersIn(kind, prefix)()).toBe(0)
  }, 60_000)
})

describe('permit keep-alive in one replica', () => {
  it("keeps a finished request's permit in Redis while idle, and gives it back at SIGTERM, not at expiry", async () => {
    const upstream = await startUpstream()
    const prefix = uniquePrefix().slice(0, -1)
    const gateway = await spawnGateway([
      ...baseFlags(upstream.url, prefix),
      ...KINDS.standalone.flags(),
      '--permits',
      '3',
      '--permit-keepalive-ms',
      '10000',
    ])
    const holders = holdersIn('standalone', prefix)
    for (let i = 0; i < 10; i++) expect((await fetch(`${gateway.url}/work?ms=1`)).status).toBe(200)
    // Sequential requests: one lease served them all, and stays with this replica while idle.
    expect(await holders()).toBe(1)
    const text = await (await fetch(`${gateway.adminUrl}/metrics`)).text()
    expect(metric(text, 'tollgate_requests_in_flight', { route: 'default' })).toBe(0)
    expect(metric(text, 'tollgate_permits_kept', { route: 'default' })).toBe(1)
    const stoppedAt = Date.now()
    gateway.kill('SIGTERM')
    expect(await gateway.exited).toEqual({ code: 0, signal: null })
    expect(await holders()).toBe(0)
    expect(Date.now() - stoppedAt).toBeLessThan(5000) // not the 10 s keep-alive, nor the 30 s TTL
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
