// outage: 'share' (src/admission/outage.ts) on a private redis-server that the tests pause (SIGSTOP:
// hung) and kill (dead) by PID: three replicas (three stores, three admissions) in front of an
// upstream that counts its own requests in flight. The counter is the test's, independent of what
// the admissions count.
import { Redis } from 'ioredis'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { semaphoreAdmission } from '../../src/admission/buckets.js'
import type { Admission } from '../../src/admission/admission.js'
import { AbortFlag } from '../../src/core/abort.js'
import { ConfigError, createRedisStore, type Store } from '../../src/index.js'
import { eventually, sleep } from '../helpers/contract.js'
import { uniquePrefix } from '../helpers/redis.js'
import { type RedisServerHandle, startRedisServer } from '../helpers/redis-server.js'

const COMMAND_TIMEOUT_MS = 300
let server: RedisServerHandle
beforeAll(async () => {
  server = await startRedisServer()
})
afterAll(async () => {
  await server.stop()
})

const opened: { close(): unknown }[] = []
afterEach(async () => {
  server.kill('SIGCONT')
  for (const item of opened.splice(0).reverse()) await item.close()
})

interface Req {
  tenant?: string
}

function replica(prefix: string, options: Record<string, unknown> = {}): Admission<Req> {
  const client = new Redis({
    host: server.host,
    port: server.port,
    retryStrategy: () => 50,
    maxRetriesPerRequest: 1,
  })
  client.on('error', () => undefined)
  const store: Store = createRedisStore(client, { prefix, commandTimeoutMs: COMMAND_TIMEOUT_MS })
  opened.push({ close: () => store.close() }, { close: () => client.disconnect() })
  const admission = semaphoreAdmission<Req>({
    permits: 12,
    store,
    name: 'share',
    outage: 'share',
    maxWaitMs: 2000,
    ...options,
  })
  opened.push({ close: () => admission.close() })
  return admission
}

/** Closed-loop clients over `replicas`, each request 20 ms in the upstream; the upstream's own count. */
function drive(replicas: readonly Admission<Req>[], clients: number, req: (i: number) => Req = () => ({})) {
  const upstream = { inFlight: 0, max: 0, served: 0, maxAnswerMs: 0 }
  let running = true
  const loops = Array.from({ length: clients }, async (_, i) => {
    const admission = replicas[i % replicas.length] as Admission<Req>
    while (running) {
      const asked = Date.now()
      const request = req(i)
      const result = await admission.admit(request, new AbortFlag(), admission.bucketOf(request))
      upstream.maxAnswerMs = Math.max(upstream.maxAnswerMs, Date.now() - asked)
      if (result.outcome !== 'admitted') {
        await sleep(10)
        continue
      }
      upstream.inFlight++
      upstream.max = Math.max(upstream.max, upstream.inFlight)
      await sleep(20)
      upstream.inFlight--
      upstream.served++
      await admission.release(result.info, { status: 200 })
    }
  })
  return {
    upstream,
    /** Reset the phase's figures. */
    phase() {
      const before = { ...upstream }
      upstream.max = upstream.inFlight
      upstream.maxAnswerMs = 0
      return before
    },
    async stop() {
      running = false
      await Promise.all(loops)
    },
  }
}

describe("outage: 'share'", () => {
  it('3 replicas, limit 12: within the limit through a hung store, a dead one and both recoveries; each replica admits its share meanwhile', async () => {
    const prefix = uniquePrefix().slice(0, -1)
    const replicas = [replica(prefix), replica(prefix), replica(prefix)]
    await eventually(() => replicas.every((r) => r.outage?.replicas === 3), 5000)
    const load = drive(replicas, 36)
    try {
      await sleep(1000)
      const normal = load.phase()
      expect(normal.max).toBeLessThanOrEqual(12)

      server.kill('SIGSTOP') // hung
      const hungAt = load.upstream.served
      await sleep(2000)
      const hung = load.phase()
      const hungServed = load.upstream.served - hungAt
      server.kill('SIGCONT')
      await eventually(() => replicas.every((r) => r.outage?.local === false), 5000)
      await sleep(1000)
      const recovered = load.phase()

      server.kill('SIGKILL') // dead, then back on the same port
      await sleep(1500)
      const dead = load.phase()
      await server.restart()
      await eventually(() => replicas.every((r) => r.outage?.local === false), 10_000)
      await sleep(1000)
      const back = load.phase()

      // The upstream's own count: never above the limit, in any phase.
      for (const [phase, figures] of Object.entries({ normal, hung, recovered, dead, back }))
        expect(figures.max, phase).toBeLessThanOrEqual(12)
      // Each replica admitted its share (4) while the store hung: work went on.
      expect(hungServed).toBeGreaterThan(100)
      // Nobody waited on the hung store past its command timeout and a little more.
      expect(hung.maxAnswerMs).toBeLessThan(1000)
    } finally {
      await load.stop()
    }
  }, 60_000)

  it('a replica started during an outage admits outageShare per bucket', async () => {
    const prefix = uniquePrefix().slice(0, -1)
    server.kill('SIGSTOP')
    const lone = replica(prefix, { outageShare: 2 })
    const load = drive([lone], 8)
    try {
      await sleep(1500)
      expect(load.upstream.max).toBe(2)
      expect(load.upstream.served).toBeGreaterThan(20)
    } finally {
      await load.stop()
      server.kill('SIGCONT')
    }
  }, 30_000)

  it('per-tenant buckets: each its share of its own limit', async () => {
    const prefix = uniquePrefix().slice(0, -1)
    const options = { key: (req: Req) => req.tenant ?? 'none', permits: 6 }
    const replicas = [replica(prefix, options), replica(prefix, options)]
    await eventually(() => replicas.every((r) => r.outage?.replicas === 2), 5000)
    server.kill('SIGSTOP')
    const perTenant = { a: { inFlight: 0, max: 0 }, b: { inFlight: 0, max: 0 } }
    let running = true
    const loops = Array.from({ length: 24 }, async (_, i) => {
      const admission = replicas[i % 2] as Admission<Req>
      const tenant = i % 4 < 2 ? 'a' : 'b'
      const count = perTenant[tenant]
      while (running) {
        const result = await admission.admit({ tenant }, new AbortFlag(), admission.bucketOf({ tenant }))
        if (result.outcome !== 'admitted') {
          await sleep(10)
          continue
        }
        count.inFlight++
        count.max = Math.max(count.max, count.inFlight)
        await sleep(20)
        count.inFlight--
        await admission.release(result.info, { status: 200 })
      }
    })
    try {
      await sleep(1500)
    } finally {
      running = false
      await Promise.all(loops)
      server.kill('SIGCONT')
    }
    // 6 per tenant, 2 replicas: 3 each, 6 in all per tenant at most; both tenants served.
    expect(perTenant.a.max).toBeLessThanOrEqual(6)
    expect(perTenant.b.max).toBeLessThanOrEqual(6)
    expect(perTenant.a.max).toBeGreaterThan(0)
    expect(perTenant.b.max).toBeGreaterThan(0)
  }, 30_000)

  it('a flapping store (paused and resumed every 200 ms) never admits above the limit', async () => {
    const prefix = uniquePrefix().slice(0, -1)
    const replicas = [replica(prefix), replica(prefix), replica(prefix)]
    await eventually(() => replicas.every((r) => r.outage?.replicas === 3), 5000)
    const load = drive(replicas, 36)
    try {
      for (let i = 0; i < 10; i++) {
        server.kill('SIGSTOP')
        await sleep(200)
        server.kill('SIGCONT')
        await sleep(200)
      }
      await sleep(1000)
      expect(load.upstream.max).toBeLessThanOrEqual(12)
      expect(load.upstream.served).toBeGreaterThan(100)
    } finally {
      await load.stop()
    }
  }, 60_000)

  it('the aliases keep their meaning, and bad input names the fix', () => {
    const store = createRedisStore(new Redis({ lazyConnect: true }), { prefix: uniquePrefix().slice(0, -1) })
    opened.push({ close: () => store.close() })
    const config = (options: Record<string, unknown>) =>
      semaphoreAdmission({ permits: 1, store, ...options }).config
    expect(config({ failOpen: true })).toMatchObject({ outage: 'open', failOpen: true })
    expect(config({})).toMatchObject({ outage: 'closed', failOpen: false })
    expect(config({ outage: 'open' })).toMatchObject({ outage: 'open', failOpen: true })
    expect(config({ outage: 'open', failOpen: true })).toMatchObject({ outage: 'open' })
    expect(() => config({ outage: 'share', failOpen: true })).toThrow(ConfigError)
    expect(() => config({ outage: 'half' })).toThrow(/outage.*'closed', 'open' or 'share'/)
    expect(() => config({ outageShare: 2 })).toThrow(/outageShare.*only with outage: 'share'/)
  })
})
