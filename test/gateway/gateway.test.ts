// createGateway() in-process, on port 0, in front of a counting upstream: headers, routing, buckets,
// WebSocket upgrades.
import { once } from 'node:events'
import http from 'node:http'
import type { Socket } from 'node:net'
import { pino } from 'pino'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { Admission } from '../../src/admission/admission.js'
import {
  createGateway,
  FENCING_HEADER,
  type Gateway,
  resolveConfig,
  validateConfigFile,
} from '../../src/gateway/index.js'
import { eventually } from '../helpers/contract.js'
import { connectStandalone, topology, uniquePrefix } from '../helpers/redis.js'
import { rawConnect } from '../helpers/raw-http.js'
import { startUpstream } from '../helpers/upstream.js'

const gateways: Gateway[] = []
afterEach(async () => {
  await Promise.all(gateways.splice(0).map((gateway) => gateway.close()))
})

async function start(file: unknown): Promise<{ gateway: Gateway; url: string }> {
  const config = resolveConfig(validateConfigFile(file))
  const gateway = createGateway(
    { ...config, port: 0, admin: undefined },
    { logger: pino({ level: 'silent' }), processMetrics: false },
  )
  gateways.push(gateway)
  const { url } = await gateway.listen()
  return { gateway, url }
}

async function get(url: string, headers: Record<string, string> = {}, method = 'GET') {
  const response = await fetch(url, { headers, method })
  return { status: response.status, headers: response.headers, body: await response.text() }
}

describe('createGateway()', () => {
  it('refuses an unknown option or a value of the wrong type, naming it, before it opens anything', () => {
    const config = resolveConfig(validateConfigFile({ defaults: { upstream: 'http://127.0.0.1:9' } }))
    const attempt = (options: unknown) => () => createGateway(config, options as never)
    expect(attempt({ lean: { frontend: false } })).toThrow(
      'Unknown option "frontend": did you mean "frontEnd"?',
    )
    expect(attempt({ lean: { upstream: 0 } })).toThrow(
      'Invalid option "lean.upstream": expected true or false',
    )
    expect(attempt({ lean: 'off' })).toThrow(
      'Invalid option "lean": expected true, false, or { frontEnd?: boolean, upstream?: boolean }',
    )
    expect(attempt({ lean: null })).toThrow('Invalid option "lean"')
    expect(attempt({ processMetrics: 'no' })).toThrow(
      'Invalid option "processMetrics": expected true or false',
    )
    expect(attempt({ leann: true })).toThrow('Unknown option "leann": did you mean "lean"?')
  })

  it('G7 G13: forwards the fencing token of the lease and X-Forwarded-*, never the client-sent ones', async () => {
    const upstream = await startUpstream()
    const { url } = await start({ defaults: { upstream: upstream.url } })
    const response = await get(`${url}/headers`, {
      [FENCING_HEADER]: '999999999999999999',
      'x-forwarded-for': '6.6.6.6',
    })
    expect(response.status).toBe(200)
    const seen = JSON.parse(response.body) as Record<string, string>
    expect(Number(seen[FENCING_HEADER])).toBeGreaterThan(0)
    expect(seen[FENCING_HEADER]).not.toBe('999999999999999999')
    expect(seen['x-forwarded-for']).toBe('127.0.0.1')
    expect(seen['x-forwarded-proto']).toBe('http')
    expect(seen['x-forwarded-host']).toBe(new URL(url).host)
    expect(response.headers.get('ratelimit-policy')).toBe('"global";q=10;qu="concurrent-requests"')
    // Tokens increase with every admission.
    await get(`${url}/work?ms=1`)
    const second = JSON.parse((await get(`${url}/headers`)).body) as Record<string, string>
    expect(Number(second[FENCING_HEADER])).toBeGreaterThan(Number(seen[FENCING_HEADER]))
  })

  it("adds the RateLimit headers where the upstream sent none, also to a 502, and never doubles the upstream's", async () => {
    const upstream = await startUpstream()
    const { url } = await start({ defaults: { upstream: upstream.url } })
    const raw = await new Promise<string[]>((resolve, reject) => {
      http
        .get(`${url}/limited`, (res) => {
          res.resume()
          res.once('end', () => resolve(res.rawHeaders))
        })
        .once('error', reject)
    })
    const named = (name: string) => raw.filter((_, i) => i % 2 === 1 && raw[i - 1]!.toLowerCase() === name)
    expect(named('ratelimit')).toEqual(['"upstream";r=3'])
    expect(named('ratelimit-policy')).toEqual(['"global";q=10;qu="concurrent-requests"'])
    const closed = await startUpstream()
    const gone = closed.url
    await closed.close()
    const down = await start({ defaults: { upstream: gone } })
    const failed = await get(`${down.url}/x`)
    expect(failed.status).toBe(502)
    expect(failed.headers.get('ratelimit-policy')).toBe('"global";q=10;qu="concurrent-requests"')
    expect(failed.headers.get('ratelimit')).toBe('"global";r=9')
  })

  it('G13: chains X-Forwarded-For behind a trusted proxy', async () => {
    const upstream = await startUpstream()
    const { url } = await start({ trustProxy: true, defaults: { upstream: upstream.url } })
    const seen = JSON.parse((await get(`${url}/headers`, { 'x-forwarded-for': '10.1.2.3' })).body)
    expect(seen['x-forwarded-for']).toBe('10.1.2.3, 127.0.0.1')
  })

  it('G13: trusted proxies by hops or by address: --per ip buckets by the client behind two proxies', async () => {
    // Before, trustProxy was all or nothing: one hop, so behind two proxies every client shared the
    // inner proxy's bucket.
    const upstream = await startUpstream()
    const viaTwoProxies = (client: string) => ({ 'x-forwarded-for': `${client}, 10.0.0.2` })
    const concurrency = { permits: 1, per: 'ip', maxWaitMs: 0 }
    for (const trustProxy of [2, ['loopback', '10.0.0.0/8']] as const) {
      const { url } = await start({ trustProxy, defaults: { upstream: upstream.url, concurrency } })
      const held = get(`${url}/work?ms=400`, viaTwoProxies('203.0.113.7'))
      await eventually(() => upstream.probe.inside === 1)
      // Another client behind the same proxies has a bucket of its own; the same client does not.
      expect((await get(`${url}/work?ms=1`, viaTwoProxies('198.51.100.9'))).status).toBe(200)
      expect((await get(`${url}/work?ms=1`, viaTwoProxies('203.0.113.7'))).status).toBe(429)
      // A client that forges entries left of its own address is still bucketed by its address.
      expect((await get(`${url}/work?ms=1`, viaTwoProxies('1.1.1.1, 203.0.113.7'))).status).toBe(429)
      expect((await held).status).toBe(200)
    }
    // One hop (true): the inner proxy's address is the client's, for both clients.
    const { url } = await start({ trustProxy: true, defaults: { upstream: upstream.url, concurrency } })
    const held = get(`${url}/work?ms=400`, viaTwoProxies('203.0.113.7'))
    await eventually(() => upstream.probe.inside === 1)
    expect((await get(`${url}/work?ms=1`, viaTwoProxies('198.51.100.9'))).status).toBe(429)
    expect((await held).status).toBe(200)
  })

  it('G13: a peer outside the trusted ranges cannot set the client address or keep its X-Forwarded-For', async () => {
    const upstream = await startUpstream()
    const { url } = await start({ trustProxy: ['10.0.0.0/8'], defaults: { upstream: upstream.url } })
    const seen = JSON.parse((await get(`${url}/headers`, { 'x-forwarded-for': '10.1.2.3' })).body)
    expect(seen['x-forwarded-for']).toBe('127.0.0.1') // the connection's own, as at the edge
    const refused = await start({ trustProxy: ['10.0.0.0/33'], defaults: { upstream: upstream.url } }).catch(
      (error: Error) => error.message,
    )
    expect(refused).toContain(
      'trustProxy: expected an IP address, a CIDR range, loopback, linklocal or uniquelocal (got "10.0.0.0/33")',
    )
  })

  it('G1: a per-route weight: routes of one global bucket each count their own weight', async () => {
    const upstream = await startUpstream()
    const concurrency = { permits: 3, per: 'global', maxWaitMs: 0 }
    const { url } = await start({
      defaults: { upstream: upstream.url },
      routes: [
        { name: 'export', match: { pathPrefix: '/export' }, concurrency: { ...concurrency, weight: 3 } },
        { name: 'health', match: { pathPrefix: '/health' }, concurrency },
      ],
    })
    const exporting = get(`${url}/export/work?ms=400`)
    await eventually(() => upstream.probe.inside === 1)
    const health = await get(`${url}/health/work?ms=1`)
    expect([health.status, JSON.parse(health.body).reason]).toEqual([503, 'busy']) // all 3 are the export's
    expect((await exporting).status).toBe(200)
    const checks = [get(`${url}/health/work?ms=400`)]
    await eventually(() => upstream.probe.inside === 1)
    expect((await get(`${url}/export/work?ms=1`)).status).toBe(503) // 2 free: not enough for 3
    expect((await get(`${url}/health/work?ms=1`)).headers.get('ratelimit')).toBe('"global";r=1')
    expect((await Promise.all(checks)).map((r) => r.status)).toEqual([200])
    const refused = await start({
      defaults: { upstream: upstream.url },
      routes: [{ name: 'big', match: { pathPrefix: '/' }, concurrency: { permits: 2, weight: 3 } }],
    }).catch((error: Error) => error.message)
    expect(refused).toContain('routes[0].concurrency.weight: expected at most permits (2)')
    const tooHeavy = await start({
      defaults: { upstream: upstream.url },
      routes: [{ name: 'big', match: { pathPrefix: '/' }, concurrency: { permits: 5000, weight: 1001 } }],
    }).catch((error: Error) => error.message)
    expect(tooHeavy).toContain('routes[0].concurrency.weight: expected an integer from 1 to 1000')
  })

  it('G13: routes by path prefix on a segment boundary, method and host; strips the prefix when asked', async () => {
    const [a, b, c] = await Promise.all([startUpstream(), startUpstream(), startUpstream()])
    const { url } = await start({
      routes: [
        { name: 'writes', match: { pathPrefix: '/api', methods: ['put', 'POST'] }, upstream: a!.url },
        { name: 'api', match: { pathPrefix: '/api' }, upstream: b!.url, stripPrefix: true },
        { name: 'admin', match: { pathPrefix: '/', host: 'admin.test' }, upstream: c!.url },
      ],
    })
    expect((await get(`${url}/api/x`, {}, 'PUT')).body).toBe('ok /api/x')
    expect((await get(`${url}/api/x?ms=1`)).body).toBe('ok /x')
    expect((await get(`${url}/api?ms=1`)).body).toBe('ok /')
    expect((await get(`${url}/apix`)).status).toBe(404)
    const other = await new Promise<string>((resolve, reject) => {
      http
        .get(`${url}/anything`, { headers: { host: 'ADMIN.test:8080' } }, (response) => {
          let body = ''
          response.on('data', (chunk: Buffer) => (body += chunk.toString()))
          response.on('end', () => resolve(body))
        })
        .on('error', reject)
    })
    expect(other).toBe('ok /anything')
    expect([a!.probe.entered, b!.probe.entered, c!.probe.entered]).toEqual([1, 2, 1])
  })

  it('G1: isolates tenants, gives an override its own permits and rejects a keyed bucket with 429', async () => {
    const upstream = await startUpstream()
    const { url } = await start({
      redis: { url: `redis://127.0.0.1:${topology().standalone.port}`, prefix: uniquePrefix().slice(0, -1) },
      defaults: {
        upstream: upstream.url,
        concurrency: {
          permits: 1,
          per: 'tenant',
          tenantHeader: 'X-Team',
          maxWaitMs: 0,
          overrides: { big: 2 },
        },
      },
    })
    const held = [get(`${url}/hold`, { 'x-team': 'small' }), get(`${url}/hold`, { 'x-team': 'big' })]
    await eventually(() => upstream.probe.holders.length === 2)
    const small = await get(`${url}/work?ms=1`, { 'x-team': 'small' })
    expect(small.status).toBe(429)
    expect(small.headers.get('retry-after')).toBe('1')
    expect((await get(`${url}/work?ms=1`, { 'x-team': 'big' })).status).toBe(200)
    expect((await get(`${url}/work?ms=1`, { 'x-team': 'other' })).status).toBe(200)
    expect((await get(`${url}/work?ms=1`)).status).toBe(200) // no header: the shared '-' bucket
    for (const release of upstream.probe.holders.splice(0)) release()
    expect((await Promise.all(held)).map((r) => r.status)).toEqual([200, 200])
    // Tenant ids stay out of metrics: only route labels.
    const metrics = await gateways[0]!.metrics.registry.metrics()
    expect(metrics).not.toContain('small')
    expect(metrics).toContain('tollgate_rejected_total{route="default",reason="busy"} 1')
    await connectStandalone().ping() // the Redis store was really used
  })

  it('leaves a route with concurrency: false unlimited', async () => {
    const upstream = await startUpstream()
    const { url } = await start({
      defaults: { upstream: upstream.url, concurrency: { permits: 1, maxWaitMs: 0 } },
      routes: [
        { name: 'free', match: { pathPrefix: '/free' }, stripPrefix: true, concurrency: false },
        { name: 'capped', match: { pathPrefix: '/' } },
      ],
    })
    const responses = await Promise.all(Array.from({ length: 5 }, () => get(`${url}/free/work?ms=50`)))
    expect(responses.map((r) => r.status)).toEqual([200, 200, 200, 200, 200])
    expect(upstream.probe.max).toBe(5)
    expect(JSON.parse((await get(`${url}/free/headers`)).body)[FENCING_HEADER]).toBeUndefined()
  })

  it('G1 G6: with rwlock: reads of a resource share, a write waits for them, other resources are free', async () => {
    const upstream = await startUpstream()
    const { url } = await start({
      defaults: {
        upstream: upstream.url,
        concurrency: false,
        rwlock: { resourcePattern: '^/docs/([^/]+)', maxWaitMs: 0 },
      },
    })
    const reads = [get(`${url}/docs/1/hold`), get(`${url}/docs/1/part/hold`)]
    await eventually(() => upstream.probe.holders.length === 2) // both readers are in
    const write = await get(`${url}/docs/1/work?ms=1`, {}, 'PUT')
    expect(write.status).toBe(429)
    expect(JSON.parse(write.body)).toMatchObject({ reason: 'busy' })
    expect((await get(`${url}/docs/2/work?ms=1`, {}, 'PUT')).status).toBe(200)
    for (const done of upstream.probe.holders.splice(0)) done()
    expect((await Promise.all(reads)).map((r) => r.status)).toEqual([200, 200])
    expect((await get(`${url}/docs/1/work?ms=1`, {}, 'PUT')).status).toBe(200)
    // The lock's fencing tokens reach the upstream and grow.
    expect(upstream.probe.fences).toHaveLength(4)
    expect(upstream.probe.fences.at(-1)).toBeGreaterThan(upstream.probe.fences[0]!)
  })

  it('G3 G14: passes WebSocket upgrades through and holds the permit for the life of the socket', async () => {
    const upstream = await startUpstream()
    const { url, gateway } = await start({
      defaults: { upstream: upstream.url, concurrency: { permits: 1, maxWaitMs: 0 } },
    })
    const socket = await upgradeTo(url)
    socket.write('ping')
    const [echo] = await Promise.all([
      new Promise<string>((resolve) => socket.once('data', (d) => resolve(String(d)))),
    ])
    expect(echo).toBe('ping')
    expect(Number(upstream.probe.lastHeaders[FENCING_HEADER])).toBeGreaterThan(0)
    // The socket holds the only permit: a plain request is rejected meanwhile.
    expect((await get(`${url}/work?ms=1`)).status).toBe(503)
    socket.destroy()
    await eventually(async () => (await gateway.metrics.inFlight.get()).values[0]?.value === 0)
    expect((await get(`${url}/work?ms=1`)).status).toBe(200)
  })

  it('G5 G14: a WebSocket client that leaves while its handshake waits gives its place back at once; bytes sent before the 101 go first', async () => {
    const upstream = await startUpstream()
    const { url, gateway } = await start({
      defaults: { upstream: upstream.url, concurrency: { permits: 1, maxWaitMs: 30_000 } },
    })
    const port = Number(new URL(url).port)
    const queued = () => gateway.metrics.queued.get().then((m) => m.values[0]?.value ?? 0)
    const holder = await upgradeTo(url)
    // One that leaves (FIN) while it waits behind the holder: its place is given back at once, not
    // after maxWaitMs (30 s), and nothing reaches the upstream for it.
    const leaver = await rawConnect(port)
    leaver.write('GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n')
    await eventually(async () => (await queued()) === 1)
    leaver.socket.end()
    await eventually(async () => (await queued()) === 0)
    expect(upstream.probe.entered).toBe(1)
    // One that sends bytes after its handshake while it waits: they reach the upstream first, in order
    // (as they did when the socket was left unread: what reading it must not change).
    const early = await rawConnect(port)
    early.write('GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nhello ')
    await eventually(async () => (await queued()) === 1)
    early.write('early ')
    await new Promise<void>((resolve) => early.socket.write('world', () => resolve()))
    holder.destroy() // its permit goes to the one waiting
    await eventually(() => /\r\n\r\nhello early world$/.test(early.received()))
    expect(early.received()).toMatch(/^HTTP\/1\.1 101 /)
    early.socket.destroy()
  })

  it('a bug thrown while admitting is a 500 for a request and a closed socket for an upgrade, never a crash', async () => {
    const upstream = await startUpstream()
    const { url } = await start({ defaults: { upstream: upstream.url } })
    const uncaught: unknown[] = []
    const onUncaught = (error: unknown) => uncaught.push(error)
    process.on('uncaughtException', onUncaught)
    const bucketOf = vi.spyOn(Admission.prototype, 'bucketOf').mockImplementation(() => {
      throw new Error('a bug in a key function')
    })
    try {
      expect((await get(`${url}/work?ms=1`)).status).toBe(500)
      const connection = await rawConnect(Number(new URL(url).port))
      connection.write('GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n')
      expect(await connection.closed).toBe('')
      await new Promise((resolve) => setImmediate(resolve))
    } finally {
      bucketOf.mockRestore()
      process.off('uncaughtException', onUncaught)
    }
    expect(uncaught).toEqual([])
    expect((await get(`${url}/work?ms=1`)).status).toBe(200)
  })
})

describe('a client that leaves mid-body', () => {
  it('while its body is buffered is no error: nothing logged above info, and the upstream never sees it', async () => {
    const upstream = await startUpstream()
    const lines: { level: number; msg: string }[] = []
    const logger = pino(
      { level: 'info' },
      { write: (line: string) => lines.push(JSON.parse(line) as { level: number; msg: string }) },
    )
    const config = resolveConfig(
      validateConfigFile({
        defaults: { upstream: upstream.url },
        routes: [{ name: 'buf', match: { pathPrefix: '/' }, requestBuffer: { maxBytes: 1000 } }],
      }),
    )
    const gateway = createGateway({ ...config, port: 0, admin: undefined }, { logger, processMetrics: false })
    gateways.push(gateway)
    const { url } = await gateway.listen()
    const connection = await rawConnect(Number(new URL(url).port))
    const arrived = once(gateway.server, 'request')
    connection.write('POST /work HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n' + 'a'.repeat(100))
    await arrived // the gateway is reading the body: 100 of 500 bytes came
    connection.socket.destroy()
    await eventually(() => lines.some((line) => line.msg === 'request completed'))
    expect(lines.filter((line) => line.level > 30)).toEqual([])
    expect(upstream.probe.entered).toBe(0)
    expect((await get(`${url}/work?ms=1`)).status).toBe(200)
  })
})

function upgradeTo(url: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const request = http.request(`${url}/ws`, { headers: { connection: 'Upgrade', upgrade: 'websocket' } })
    request.on('upgrade', (response, socket) => {
      expect(response.statusCode).toBe(101)
      resolve(socket)
    })
    request.on('response', (response) => reject(new Error(`no upgrade: ${response.statusCode}`)))
    request.on('error', reject)
    request.end()
  })
}
