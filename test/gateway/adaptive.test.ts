// The gateway with an adaptive limit (docs/adaptive.md), end to end: two replicas of the real
// bin on one Redis, in front of an upstream with a true capacity (C requests served at once, the rest
// queued inside it), under closed-loop load of 3 x C. The replicas find C as one limit, follow it when
// it halves, show it in GET /limits and /metrics, and an operator's override wins while it is set.
import { once } from 'node:events'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import { eventually, sleep } from '../helpers/contract.js'
import { baseFlags, type GatewayProcess, metric, redisUrl, spawnGateway } from '../helpers/gateway.js'
import { topology, uniquePrefix } from '../helpers/redis.js'

const SERVICE_MS = 20

/** An upstream of true capacity `capacity`: that many requests served at once in SERVICE_MS each, the
 * rest queued inside it (FIFO). It counts what is inside it, served and queued. */
async function capacityUpstream(capacity: number) {
  const state = { capacity, inside: 0, serving: 0 }
  const queue: (() => void)[] = []
  const next = () => {
    while (state.serving < state.capacity && queue.length > 0) {
      state.serving++
      const go = queue.shift() as () => void
      setTimeout(() => {
        state.serving--
        go()
        next()
      }, SERVICE_MS)
    }
  }
  const server = http.createServer((req, res) => {
    state.inside++
    queue.push(() => {
      state.inside--
      res.end('ok')
    })
    next()
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const port = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}`,
    state,
    setCapacity(c: number) {
      state.capacity = c
      next()
    },
    close: () => {
      server.closeAllConnections()
      server.close()
    },
  }
}

/** `clients` closed loops of GET / spread over the gateways, each on its own keep-alive socket. */
function load(gateways: readonly GatewayProcess[], clients: number) {
  let running = true
  const agent = new http.Agent({ keepAlive: true, maxSockets: clients })
  const statuses = new Map<number, number>()
  const get = (url: string) =>
    new Promise<void>((resolve) => {
      http
        .get(url, { agent }, (res) => {
          statuses.set(res.statusCode ?? 0, (statuses.get(res.statusCode ?? 0) ?? 0) + 1)
          res
            .resume()
            .on('end', resolve)
            .on('error', () => resolve())
        })
        .on('error', () => resolve())
    })
  const loops = Array.from({ length: clients }, async (_, i) => {
    while (running) await get(`${(gateways[i % gateways.length] as GatewayProcess).url}/`)
  })
  return {
    statuses,
    async stop() {
      running = false
      await Promise.all(loops)
      agent.destroy()
    },
  }
}

async function adaptiveOf(gateway: GatewayProcess) {
  const body = (await (await fetch(`${gateway.adminUrl}/limits/default`)).json()) as {
    buckets: {
      effective: number
      override: number | null
      adaptive: { limit: number; leader: boolean; replicas: number }
    }[]
  }
  return body.buckets[0] as (typeof body.buckets)[number]
}

/** The median of `count` readings, one every `everyMs`. */
async function median(count: number, everyMs: number, read: () => number | Promise<number>): Promise<number> {
  const values: number[] = []
  for (let i = 0; i < count; i++) {
    values.push(await read())
    await sleep(everyMs)
  }
  return values.sort((a, b) => a - b)[Math.floor(count / 2)] as number
}

let upstream: Awaited<ReturnType<typeof capacityUpstream>> | undefined
afterEach(() => {
  upstream?.close()
  upstream = undefined
})

describe('the gateway with an adaptive limit [2 replicas on Redis]', () => {
  it('finds the upstream’s capacity as one limit, follows it when it halves, and an override wins while set', async () => {
    upstream = await capacityUpstream(8)
    const flags = [
      ...baseFlags(upstream.url, uniquePrefix().slice(0, -1)),
      '--redis',
      redisUrl(topology().standalone),
      '--adaptive-max',
      '64',
      '--adaptive-initial',
      '2',
      '--adaptive-window-ms',
      '200',
      '--max-wait-ms',
      '20000',
      '--max-queue',
      '1000',
      '--log-level',
      'info',
    ]
    const gateways = await Promise.all([spawnGateway(flags), spawnGateway(flags)])
    const traffic = load(gateways, 24)
    const up = upstream
    try {
      await sleep(5_000)
      // One limit for both (learnt by each from its report of every window), near the capacity: the
      // upstream's own count of what is inside it stays near 8.
      // Each /limits answer is shared for a second (ops/shared-answer.ts) while a window steps every
      // 200 ms, so the two are read up to a second apart: equal, or one step apart (x 0.9 back-off or
      // +sqrt headroom, under 25 %), never the two unrelated limits of replicas that each learn alone.
      await eventually(
        async () => {
          const [a, b] = (await Promise.all(gateways.map(adaptiveOf))).map((s) => s?.adaptive.limit ?? 0)
          return Math.abs(a! - b!) <= 0.25 * Math.max(a!, b!)
        },
        5_000,
        100,
      )
      const inside = await median(20, 50, () => up.state.inside)
      expect(inside).toBeGreaterThanOrEqual(5)
      expect(inside).toBeLessThanOrEqual(13)
      const states = await Promise.all(gateways.map(adaptiveOf))
      expect(states.filter((s) => s.adaptive.leader)).toHaveLength(1)
      expect(states.every((s) => s.adaptive.replicas === 2)).toBe(true)
      // The gauge says the limit /limits says (read again if a step fell between the two reads).
      let scraped = ''
      await eventually(async () => {
        const limit = (await adaptiveOf(gateways[0]!)).adaptive.limit
        scraped = await (await fetch(`${gateways[0]!.adminUrl}/metrics`)).text()
        return metric(scraped, 'tollgate_adaptive_limit', { route: 'default' }) === limit
      }, 3_000)
      expect(metric(scraped, 'tollgate_adaptive_min_rtt_seconds', { route: 'default' })).toBeGreaterThan(
        0.015,
      )

      // The capacity halves: the limit follows.
      up.setCapacity(4)
      await sleep(4_000)
      expect(await median(20, 50, () => up.state.inside)).toBeLessThanOrEqual(7)

      // An operator's override on one replica holds for both, and the adaptive limit never replaces it.
      const put = await fetch(`${gateways[0]!.adminUrl}/limits/default`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ permits: 2 }),
      })
      expect(put.status).toBe(200)
      await sleep(1_500) // several windows: each step of the adaptive limit meets the override
      expect(await adaptiveOf(gateways[1]!)).toMatchObject({ override: 2, effective: 2 })
      expect(await median(10, 50, () => up.state.inside)).toBeLessThanOrEqual(2)
      await fetch(`${gateways[1]!.adminUrl}/limits/default`, { method: 'DELETE' })
      await eventually(async () => (await adaptiveOf(gateways[0]!)).override === null, 2_000)
      await eventually(async () => (await median(5, 50, () => up.state.inside)) > 2, 5_000)
    } finally {
      await traffic.stop()
    }
    // Every request got an answer from the upstream (none was rejected: they waited in the queue).
    expect([...traffic.statuses.keys()]).toEqual([200])
    // One line per significant change, at most one per 10 s, by the replica that steps.
    const changes = gateways.flatMap((g) =>
      g.logs().filter((line) => line.msg === 'tollgate: adaptive limit changed'),
    )
    expect(changes.length).toBeGreaterThan(0)
    expect(changes.length).toBeLessThanOrEqual(6)
  }, 60_000)
})

describe("the gateway with an adaptive limit of scope 'local'", () => {
  it('SIGTERM while requests wait for a permit: they are all served, and it exits at once', async () => {
    // Before: shutting the limit down closed its store of its own, which dropped the wake-ups, so the
    // waiting requests hung until the process was killed.
    const slow = http.createServer((_req, res) => setTimeout(() => res.end('ok'), 300))
    slow.listen(0, '127.0.0.1')
    await once(slow, 'listening')
    upstream = {
      close: () => {
        slow.closeAllConnections()
        slow.close()
      },
    } as never
    const gateway = await spawnGateway([
      ...baseFlags(`http://127.0.0.1:${(slow.address() as AddressInfo).port}`, uniquePrefix().slice(0, -1)),
      '--redis',
      redisUrl(topology().standalone),
      '--adaptive-max',
      '8',
      '--adaptive-initial',
      '2',
      '--adaptive-scope',
      'local',
      '--max-wait-ms',
      '20000',
    ])
    const agent = new http.Agent({ keepAlive: false })
    const statuses = Array.from(
      { length: 5 },
      () =>
        new Promise<number>((resolve) => {
          http
            .get(`${gateway.url}/`, { agent }, (res) =>
              res.resume().on('end', () => resolve(res.statusCode ?? 0)),
            )
            .on('error', () => resolve(0))
        }),
    )
    // 2 in flight, 3 waiting.
    await eventually(
      async () =>
        metric(await (await fetch(`${gateway.adminUrl}/metrics`)).text(), 'tollgate_requests_queued', {
          route: 'default',
        }) === 3,
    )
    const signalled = performance.now()
    gateway.kill('SIGTERM')
    expect(await Promise.all(statuses)).toEqual([200, 200, 200, 200, 200])
    expect(await gateway.exited).toEqual({ code: 0, signal: null })
    // Two rounds of 300 ms (and the exit): not a drain timeout.
    expect(performance.now() - signalled).toBeLessThan(2_500)
  }, 20_000)
})
