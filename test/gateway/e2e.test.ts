// The real `tollgate-gateway` bin, spawned as separate processes, in front of an upstream that counts what it
// sees. Shared limits across replicas, permits of a SIGKILLed replica, SIGTERM drain, the client-abort
// leak, upstream failures, metrics and readiness.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { eventually, sleep } from '../helpers/contract.js'
import { baseFlags, metric, redisUrl, runGateway, spawnGateway } from '../helpers/gateway.js'
import { onProcessExit } from '../helpers/process-cleanup.js'
import { topology, uniquePrefix } from '../helpers/redis.js'
import { freePort, startRedisServer } from '../helpers/redis-server.js'
import { startUpstream } from '../helpers/upstream.js'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const CRASH_FIXTURE = 'test/fixtures/gateway-crash.ts'

let dir: string
beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'tollgate-gateway-'))
})
afterAll(async () => {
  await rm(dir, { recursive: true, force: true })
})

const standaloneFlags = () => ['--redis', redisUrl(topology().standalone)]
const clusterFlags = () => ['--redis-cluster', topology().cluster.map(redisUrl).join(',')]

async function writeConfig(name: string, text: string): Promise<string> {
  const file = path.join(dir, name)
  await writeFile(file, text)
  return file
}

/** A request on a connection of its own (no pooled keep-alive socket): tells whether one can connect. */
function freshRequest(url: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const request = http.get(url, { agent: false }, (response) => {
      response.resume()
      response.on('end', () => resolve(response.statusCode ?? 0))
    })
    request.on('error', reject)
  })
}

describe.each([
  ['standalone', standaloneFlags],
  ['cluster', clusterFlags],
] as const)('3 gateway processes sharing Redis [%s]', (_kind, redisFlags) => {
  it('G1: the upstream never sees more than permits=5 of 300 concurrent requests', async () => {
    const upstream = await startUpstream()
    const prefix = uniquePrefix().slice(0, -1)
    const flags = [
      ...baseFlags(upstream.url, prefix),
      ...redisFlags(),
      '--permits',
      '5',
      '--max-wait-ms',
      '30000',
      '--max-queue',
      '1000',
      '--log-level',
      'warn',
    ]
    const gateways = await Promise.all([0, 1, 2].map(() => spawnGateway(flags)))
    const responses = await Promise.all(
      Array.from({ length: 300 }, async (_, i) => {
        const response = await fetch(`${gateways[i % 3]!.url}/work?ms=5`)
        return { status: response.status, body: await response.text() }
      }),
    )
    expect(responses.filter((r) => r.status !== 200)).toEqual([])
    expect(upstream.probe.entered).toBe(300)
    expect(upstream.probe.max).toBe(5)
    // Every admission carried its own fencing token.
    expect(new Set(upstream.probe.fences).size).toBe(300)
  }, 40_000)
})

describe('the gateway binary', () => {
  it('G2: gives the permits of a SIGKILLed replica to the others within TTL + tolerance', async () => {
    const upstream = await startUpstream()
    const prefix = uniquePrefix().slice(0, -1)
    const flags = [
      ...baseFlags(upstream.url, prefix),
      ...standaloneFlags(),
      '--permits',
      '2',
      '--ttl-ms',
      '1000',
    ]
    const [doomed, survivor] = await Promise.all([
      spawnGateway([...flags, '--log-level', 'warn']),
      spawnGateway([...flags, '--max-wait-ms', '10000']),
    ])
    const held = [0, 1].map(() => fetch(`${doomed.url}/hold`).catch(() => 'cut'))
    await eventually(() => upstream.probe.holders.length === 2)
    // Both permits are taken: the survivor cannot get one while the doomed replica lives.
    const blocked = await fetch(`${survivor.url}/work?ms=1`, { signal: AbortSignal.timeout(300) }).catch(
      (error: Error) => error.name,
    )
    expect(blocked).toBe('TimeoutError')

    doomed.kill('SIGKILL')
    const killedAt = Date.now()
    const statuses = await Promise.all(
      [0, 1].map(async () => (await fetch(`${survivor.url}/work?ms=1`)).status),
    )
    const elapsed = Date.now() - killedAt
    expect(statuses).toEqual([200, 200])
    expect(elapsed).toBeLessThan(1000 + 1000)
    expect(await Promise.all(held)).toEqual(['cut', 'cut'])
    expect((await doomed.exited).signal).toBe('SIGKILL')
  }, 30_000)

  it('G3 G14: drains on SIGTERM: in-flight requests finish with 200, new connections are refused, exit 0', async () => {
    const upstream = await startUpstream()
    const gateway = await spawnGateway([...baseFlags(upstream.url, 'drain'), '--permits', '5'])
    const inFlight = [
      fetch(`${gateway.url}/work?ms=700`),
      fetch(`${gateway.url}/work?ms=700`),
      fetch(`${gateway.url}/stream?chunks=12&every=50`),
    ].map(async (pending) => {
      const response = await pending
      return { status: response.status, body: await response.text() }
    })
    await eventually(() => upstream.probe.inside === 3)
    gateway.kill('SIGTERM')
    await sleep(150)
    await expect(freshRequest(`${gateway.url}/work?ms=1`)).rejects.toMatchObject({ code: 'ECONNREFUSED' })
    const done = await Promise.all(inFlight)
    expect(done.map((r) => r.status)).toEqual([200, 200, 200])
    expect(done[2]!.body.split('\n').filter(Boolean)).toHaveLength(12)
    expect(await gateway.exited).toEqual({ code: 0, signal: null })
    expect(gateway.logs().some((line) => line.msg === 'shutdown complete')).toBe(true)
  }, 20_000)

  it('G3 G14: closes the upstream socket and gives the permit back when a client aborts mid-response', async () => {
    const upstream = await startUpstream()
    const prefix = uniquePrefix().slice(0, -1)
    const gateway = await spawnGateway([
      ...baseFlags(upstream.url, prefix),
      ...standaloneFlags(),
      '--permits',
      '1',
      '--max-wait-ms',
      '0',
    ])
    const controller = new AbortController()
    const response = await fetch(`${gateway.url}/stream?every=20`, { signal: controller.signal })
    const reader = response.body!.getReader()
    expect(new TextDecoder().decode((await reader.read()).value)).toContain('chunk 0')
    expect(upstream.probe.inside).toBe(1)
    const socketsBefore = upstream.probe.sockets
    controller.abort()
    // The upstream response is abandoned and its connection closed (not left streaming into nowhere).
    await eventually(() => upstream.probe.aborted === 1 && upstream.probe.inside === 0, 3000)
    await eventually(() => upstream.probe.sockets === socketsBefore - 1, 3000)
    // maxWaitMs 0: admitted only if the one permit is already back.
    await eventually(async () => (await fetch(`${gateway.url}/work?ms=1`)).status === 200, 3000, 50)
    const text = await (await fetch(`${gateway.adminUrl}/metrics`)).text()
    expect(metric(text, 'tollgate_requests_in_flight', { route: 'default' })).toBe(0)
    // The log leaves in batches, at most a second late.
    const aborted = () =>
      gateway.logs().find((line) => line.msg === 'request completed' && line.aborted === true)
    await eventually(() => aborted() !== undefined, 3000)
    expect(aborted()).toMatchObject({ route: 'default', res: { statusCode: 200 } })
  }, 20_000)

  it('G3: answers 502 for a refused upstream and 504 for a slow one, and /metrics counts what happened', async () => {
    const upstream = await startUpstream()
    const closedPort = await freePort()
    const config = await writeConfig(
      'routes.yaml',
      `
listen: { port: 0 }
admin: { port: 0 }
routes:
  - name: down
    match: { pathPrefix: /down }
    upstream: http://127.0.0.1:${closedPort}
  - name: slow
    match: { pathPrefix: /slow }
    upstream: ${upstream.url}
    timeouts: { upstreamMs: 300 }
  - name: api
    match: { pathPrefix: / }
    upstream: ${upstream.url}
    concurrency: { permits: 1, maxWaitMs: 0, per: route }
`,
    )
    const gateway = await spawnGateway(['--config', config])
    const get = async (p: string) => {
      const response = await fetch(`${gateway.url}${p}`)
      return { status: response.status, body: await response.text() }
    }
    expect(await get('/down/x')).toEqual({ status: 502, body: 'upstream unavailable\n' })
    expect((await get('/down/y')).status).toBe(502)
    const started = Date.now()
    expect(await get('/slow?ms=3000')).toEqual({ status: 504, body: 'upstream timed out\n' })
    expect(Date.now() - started).toBeLessThan(2000)

    const holder = get('/hold')
    await eventually(() => upstream.probe.holders.length === 1)
    const rejected = await Promise.all([get('/work'), get('/work')])
    expect(rejected.map((r) => r.status)).toEqual([503, 503])
    expect(JSON.parse(rejected[0]!.body)).toMatchObject({ reason: 'busy' })
    upstream.probe.holders.shift()!()
    expect((await holder).status).toBe(200)
    for (let i = 0; i < 3; i++) expect((await get('/work?ms=1')).status).toBe(200)

    const text = await (await fetch(`${gateway.adminUrl}/metrics`)).text()
    const value = (name: string, labels: Record<string, string>) => metric(text, name, labels)
    expect(value('tollgate_admitted_total', { route: 'api' })).toBe(4)
    expect(value('tollgate_rejected_total', { route: 'api', reason: 'busy' })).toBe(2)
    expect(value('tollgate_rejected_total', { route: 'api', reason: 'queue_full' })).toBe(0)
    expect(value('tollgate_wait_seconds_count', { route: 'api' })).toBe(4)
    expect(value('tollgate_requests_in_flight', { route: 'api' })).toBe(0)
    expect(value('tollgate_requests_queued', { route: 'api' })).toBe(0)
    expect(value('tollgate_responses_total', { route: 'api', class: '2xx' })).toBe(4)
    expect(value('tollgate_responses_total', { route: 'api', class: '5xx' })).toBe(2)
    expect(value('tollgate_upstream_errors_total', { route: 'down', kind: 'refused' })).toBe(2)
    expect(value('tollgate_upstream_errors_total', { route: 'slow', kind: 'timeout' })).toBe(1)
    expect(value('tollgate_upstream_errors_total', { route: 'api', kind: 'refused' })).toBe(0)
    expect(value('tollgate_responses_total', { route: 'down', class: '5xx' })).toBe(2)
    expect(value('tollgate_admitted_total', { route: 'down' })).toBe(2)
    expect(value('tollgate_store_errors_total', { route: 'api' })).toBe(0)
    // The permits of failed upstream calls came back too.
    expect(value('tollgate_requests_in_flight', { route: 'down' })).toBe(0)
    expect(value('tollgate_requests_in_flight', { route: 'slow' })).toBe(0)
    // One access log line per request, with route, status, wait and hold time.
    const requests = () => gateway.logs().filter((line) => line.msg === 'request completed')
    await eventually(() => requests().length >= 9) // the log is written asynchronously
    const lines = requests()
    expect(lines).toHaveLength(9)
    expect(lines[0]).toMatchObject({ route: 'down', res: { statusCode: 502 }, upstreamError: 'refused' })
    for (const line of lines) {
      expect(line).toEqual(
        expect.objectContaining({
          waitMs: expect.any(Number),
          holdMs: expect.any(Number),
          res: { statusCode: expect.any(Number) },
        }),
      )
    }
  }, 20_000)

  it('G14: /readyz fails while its Redis is stopped and recovers after', async () => {
    const redis = await startRedisServer()
    try {
      const upstream = await startUpstream()
      const gateway = await spawnGateway([...baseFlags(upstream.url, 'ready'), '--redis', redis.url])
      const readyz = async () => (await fetch(`${gateway.adminUrl}/readyz`)).status
      await eventually(async () => (await readyz()) === 200, 5000, 50) // connected
      expect((await fetch(`${gateway.adminUrl}/healthz`)).status).toBe(200)
      const storeUp = async () =>
        metric(await (await fetch(`${gateway.adminUrl}/metrics`)).text(), 'tollgate_store_up')
      expect(await storeUp()).toBe(1)
      await redis.stop()
      await eventually(async () => (await readyz()) === 503, 5000, 50)
      // tollgate_store_up says so too, before any request found out.
      expect(await storeUp()).toBe(0)
      // Fail closed: the request is refused, quickly, without reaching the upstream.
      const refused = await fetch(`${gateway.url}/work?ms=1`)
      expect(refused.status).toBe(503)
      expect(JSON.parse(await refused.text())).toMatchObject({ reason: 'store_unavailable' })
      expect(upstream.probe.entered).toBe(0)
      await redis.restart()
      await eventually(async () => (await readyz()) === 200, 10_000, 100)
      await eventually(async () => (await storeUp()) === 1, 5000, 50)
      const text = await (await fetch(`${gateway.adminUrl}/metrics`)).text()
      expect(metric(text, 'tollgate_store_errors_total', { route: 'default' })).toBe(1)
      // Shutting down while Redis is gone still ends, and cleanly.
      await redis.stop()
      const stopping = Date.now()
      gateway.kill('SIGTERM')
      expect(await gateway.exited).toEqual({ code: 0, signal: null })
      expect(Date.now() - stopping).toBeLessThan(6000)
    } finally {
      await redis.stop()
    }
  }, 30_000)

  it('G14: started while Redis is down, it says so, answers the first request by the outage policy at once, and becomes ready when Redis answers', async () => {
    const port = await freePort()
    const upstream = await startUpstream()
    // It used to log "tollgate ready" and keep the first request 2 s (the access check, then that
    // request's own command timeout) before its 503.
    const gateway = await spawnGateway([
      ...baseFlags(upstream.url, 'down-at-start'),
      '--redis',
      `redis://127.0.0.1:${port}`,
    ])
    const messages = () => gateway.logs().map((line) => line.msg)
    expect(messages()).toContain(
      'tollgate waiting for Redis: limits without failOpen answer 503 until it answers',
    )
    expect(messages()).not.toContain('tollgate ready')
    expect((await fetch(`${gateway.adminUrl}/readyz`)).status).toBe(503)
    const started = Date.now()
    const first = await fetch(`${gateway.url}/work?ms=1`)
    expect(Date.now() - started).toBeLessThan(500)
    expect(first.status).toBe(503)
    expect(JSON.parse(await first.text())).toMatchObject({ reason: 'store_unavailable' })
    expect(upstream.probe.entered).toBe(0)
    const redis = await startRedisServer({ port })
    try {
      await eventually(() => messages().includes('tollgate ready: Redis answers'), 10_000, 50)
      expect((await fetch(`${gateway.adminUrl}/readyz`)).status).toBe(200)
      expect((await fetch(`${gateway.url}/work?ms=1`)).status).toBe(200)
    } finally {
      await redis.stop()
    }
  }, 30_000)

  it('started while Redis is down with failOpen, it says it is ready and failing open', async () => {
    const port = await freePort()
    const upstream = await startUpstream()
    const gateway = await spawnGateway([
      ...baseFlags(upstream.url, 'fail-open-at-start'),
      '--fail-open',
      '--redis',
      `redis://127.0.0.1:${port}`,
    ])
    expect(gateway.logs().map((line) => line.msg)).toContain(
      'tollgate ready, failing open: Redis does not answer; requests pass unlimited',
    )
    const started = Date.now()
    expect((await fetch(`${gateway.url}/work?ms=1`)).status).toBe(200)
    expect(Date.now() - started).toBeLessThan(500)
  }, 30_000)

  it('exits 2 and names the flag or config path for bad flags and bad config', async () => {
    const badPermits = await writeConfig(
      'bad.yaml',
      `
defaults: { upstream: "http://127.0.0.1:1" }
routes:
  - match: { pathPrefix: /a }
  - match: { pathPrefix: /b }
    concurrency: { permits: 0 }
`,
    )
    const unknownField = await writeConfig('unknown.json', JSON.stringify({ listen: { port: 0, hots: 'x' } }))
    const runs = [
      runGateway(['--config', badPermits]),
      runGateway(['--config', unknownField, '--upstream', 'http://127.0.0.1:1']),
      runGateway(['--upstream', 'http://127.0.0.1:1', '--permits', 'many']),
      runGateway(['--upstream', 'ftp://x', '--bogus']),
    ]
    const exits = await Promise.all(runs.map((run) => run.exited))
    expect(exits).toEqual(runs.map(() => ({ code: 2, signal: null })))
    expect(runs[0]!.stderr()).toContain('routes[1].concurrency.permits: expected a positive integer')
    expect(runs[1]!.stderr()).toContain('listen.hots: unknown field')
    expect(runs[2]!.stderr()).toContain('--permits: expected a positive integer')
    expect(runs[3]!.stderr()).toContain('--bogus: unknown flag')
    for (const run of runs) expect(run.stdout()).toBe('')
  }, 20_000)
})

describe('access log', () => {
  it('reaches stderr when the process crashes before its batch is due', async () => {
    const upstream = await startUpstream()
    const child = spawn(process.execPath, ['--import', 'tsx', CRASH_FIXTURE, upstream.url], {
      cwd: ROOT,
      stdio: ['ignore', 'ignore', 'pipe'],
    })
    const forget = onProcessExit(() => child.kill('SIGKILL'))
    try {
      let stderr = ''
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()))
      const [code] = (await once(child, 'exit')) as [number | null]
      expect(code).not.toBe(0)
      expect(stderr).toContain('crash on purpose')
      const lines = stderr.split('\n').filter((line) => line.startsWith('{'))
      const request = lines
        .map((line) => JSON.parse(line) as Record<string, unknown>)
        .find((l) => l.msg === 'request completed')
      expect(request).toMatchObject({
        req: { url: '/crash-me?x=1' },
        res: { statusCode: 200 },
        route: 'default',
      })
    } finally {
      child.kill('SIGKILL')
      forget()
    }
  }, 20_000)
})
