// What the gateway shows of an adaptive limit (docs/adaptive.md): numbers rounded for people
// in GET /limits and /metrics, the latency and gradient gauges kept while the route is idle (a series
// that comes and goes is a gap in every graph of it) with their age and the last window's requests
// beside them, and change log lines that say the lowest and highest limit since the line before.
import { once } from 'node:events'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import { baseFlags, freshAdminGet, metric, redisUrl, spawnGateway } from '../helpers/gateway.js'
import { topology, uniquePrefix } from '../helpers/redis.js'

let upstream: http.Server | undefined
afterEach(() => {
  upstream?.closeAllConnections()
  upstream?.close()
  upstream = undefined
})

/** How many decimals `value` is written with. */
const decimals = (value: number) => (String(value).split('.')[1] ?? '').length

describe('the adaptive status the gateway shows', () => {
  it('rounds /limits and /metrics, keeps the latency gauges while the route is idle, and logs the range of each change', async () => {
    // 20 ms per request, far below its capacity.
    upstream = http.createServer((_req, res) => setTimeout(() => res.end('ok'), 20))
    upstream.listen(0, '127.0.0.1')
    await once(upstream, 'listening')
    const gateway = await spawnGateway([
      ...baseFlags(
        `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`,
        uniquePrefix().slice(0, -1),
      ),
      '--redis',
      redisUrl(topology().standalone),
      '--adaptive-max',
      '64',
      '--adaptive-initial',
      '1',
      '--adaptive-window-ms',
      '100',
      '--max-wait-ms',
      '10000',
      '--log-level',
      'info',
    ])
    // 16 closed loops for 1.5 s: the limit climbs from 1 (slow start), every window has samples.
    const agent = new http.Agent({ keepAlive: true, maxSockets: 16 })
    const until = Date.now() + 1_500
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (Date.now() < until)
          await new Promise<void>((resolve) => {
            http
              .get(`${gateway.url}/`, { agent }, (res) => res.resume().on('end', resolve))
              .on('error', () => resolve())
          })
      }),
    )
    agent.destroy()
    const limits = (await (await freshAdminGet(`${gateway.adminUrl}/limits/default`)).json()) as {
      buckets: { adaptive: Record<string, unknown> }[]
    }
    const status = limits.buckets[0]!.adaptive
    // The limit an integer; estimates and latencies to 2 decimals, the gradient to 3 (before: e.g.
    // 21.509975609756097).
    expect(Number.isInteger(status.limit)).toBe(true)
    expect(typeof status.minRttMs).toBe('number')
    for (const name of ['estimate', 'minRttMs', 'rttMs'] as const) {
      if (status[name] === undefined) continue
      expect(decimals(status[name] as number), `${name} ${String(status[name])}`).toBeLessThanOrEqual(2)
    }
    if (status.gradient !== undefined) expect(decimals(status.gradient as number)).toBeLessThanOrEqual(3)

    expect(status.requests).toBeGreaterThan(0)

    // Idle for 5 windows: every window is empty, and the gauges keep their last values; how old the
    // latency is, and that the last window had no requests, say so (before: nothing did).
    // GET /limits shares an answer for a second: a read made after that (10 idle windows) is fresh.
    const idle = (await (await freshAdminGet(`${gateway.adminUrl}/limits/default`)).json()) as typeof limits
    expect(idle.buckets[0]!.adaptive).toMatchObject({ reason: 'empty', requests: 0 })
    expect(idle.buckets[0]!.adaptive.rttAgeMs).toBeGreaterThanOrEqual(200)
    const scraped = await (await fetch(`${gateway.adminUrl}/metrics`)).text()
    const route = { route: 'default' }
    expect(metric(scraped, 'tollgate_adaptive_window_requests', route)).toBe(0)
    expect(metric(scraped, 'tollgate_adaptive_rtt_age_seconds', route)).toBeGreaterThanOrEqual(0.2)
    for (const name of [
      'tollgate_adaptive_limit',
      'tollgate_adaptive_min_rtt_seconds',
      'tollgate_adaptive_rtt_seconds',
      'tollgate_adaptive_gradient',
    ]) {
      const value = metric(scraped, name, route)
      expect(value, name).toBeDefined()
      expect(decimals(value as number), `${name} ${value}`).toBeLessThanOrEqual(5)
    }

    // The change lines (one per 10 s at most) say where the limit went since the line before.
    const changes = gateway.logs().filter((line) => line.msg === 'tollgate: adaptive limit changed')
    expect(changes.length).toBeGreaterThan(0)
    for (const line of changes) {
      const { from, to, lowest, highest } = line as Record<string, number>
      expect(lowest, JSON.stringify(line)).toBeLessThanOrEqual(Math.min(from!, to!))
      expect(highest, JSON.stringify(line)).toBeGreaterThanOrEqual(Math.max(from!, to!))
    }
  }, 30_000)
})
