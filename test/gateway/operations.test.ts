// Running the real `tollgate-gateway` bin as operators do: settings from TOLLGATE_* variables, SIGHUP and
// --watch-config reloads, the admin /limits API (fleet-wide through Redis, token-guarded beyond
// loopback), the pino-http style access log with request ids, trace headers passed through, and the
// operational metrics.
import { readFileSync } from 'node:fs'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { eventually } from '../helpers/contract.js'
import {
  baseFlags,
  type GatewayProcess,
  metric,
  redisUrl,
  runGateway,
  spawnGateway,
} from '../helpers/gateway.js'
import { startRecorder } from '../helpers/recorder.js'
import { topology, uniquePrefix } from '../helpers/redis.js'

let dir: string
beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'tollgate-ops-'))
})
afterAll(async () => {
  await rm(dir, { recursive: true, force: true })
})

const prefix = () => uniquePrefix().slice(0, -1)
const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const TOKEN = 'test-admin-token-0123456789'

async function writeFileIn(name: string, text: string): Promise<string> {
  const file = path.join(dir, name)
  await writeFile(file, text)
  return file
}

/** A config with one route `api` (per: route) of `permits`, never waiting (maxWaitMs 0). */
const apiConfig = (upstream: string, permits: number | string) => `
defaults:
  upstream: ${upstream}
  concurrency: { per: route, maxWaitMs: 0 }
routes:
  - name: api
    match: { pathPrefix: / }
    concurrency: { permits: ${permits} }
`

async function limits(gateway: GatewayProcess, route = '', init: RequestInit = {}) {
  const response = await fetch(`${gateway.adminUrl}/limits${route}`, init)
  return { status: response.status, body: (await response.json()) as Record<string, unknown> }
}

const put = (permits: unknown, headers: Record<string, string> = {}): RequestInit => ({
  method: 'PUT',
  headers: { 'content-type': 'application/json', ...headers },
  body: JSON.stringify({ permits }),
})

async function metricsOf(gateway: GatewayProcess): Promise<string> {
  return (await fetch(`${gateway.adminUrl}/metrics`)).text()
}

/** Start `n` requests to /hold/<i> and wait until the upstream has them all in flight. */
async function holdRequests(url: string, recorder: Awaited<ReturnType<typeof startRecorder>>, n: number) {
  const before = recorder.inFlight.get('/hold') ?? 0
  const responses = Array.from({ length: n }, (_, i) => fetch(`${url}/hold/${i}`))
  await eventually(() => (recorder.inFlight.get('/hold') ?? 0) === before + n, 5000, 10)
  return responses
}

describe('environment variables', () => {
  it('every setting reads TOLLGATE_*; flags win over the environment, the environment over the file', async () => {
    const recorder = await startRecorder()
    const config = await writeFileIn('env.yaml', apiConfig('http://127.0.0.1:1', 5))
    const common = ['--port', '0', '--admin-port', '0', '--config', config]
    // No --upstream flag: TOLLGATE_UPSTREAM wins over the file's defaults.upstream (a dead port).
    const env = { TOLLGATE_UPSTREAM: recorder.url, TOLLGATE_PREFIX: prefix() }
    const fromEnv = await spawnGateway(common, { env })
    expect((await fetch(`${fromEnv.url}/x`)).status).toBe(200)
    expect(recorder.requests.at(-1)?.url).toBe('/x')
    fromEnv.kill()
    // ...and the flag wins over the variable.
    const flagged = await spawnGateway([...common, '--upstream', 'http://127.0.0.1:1'], { env })
    expect((await fetch(`${flagged.url}/y`)).status).toBe(502)
    flagged.kill()

    // A bad value names the variable and exits 2.
    const bad = runGateway(common, { env: { ...env, TOLLGATE_MAX_QUEUE: '1e3' } })
    expect(await bad.exited).toEqual({ code: 2, signal: null })
    expect(bad.stderr()).toContain('TOLLGATE_MAX_QUEUE: expected a positive integer (got "1e3")')
  })

  it('TOLLGATE_PERMITS sets the default every route inherits, and a flag beats it', async () => {
    const recorder = await startRecorder()
    const flags = [...baseFlags(recorder.url, prefix()), '--max-wait-ms', '0']
    const fromEnv = await spawnGateway(flags, { env: { TOLLGATE_PERMITS: '2' } })
    expect((await limits(fromEnv, '/default')).body).toMatchObject({ permits: 2 })
    fromEnv.kill()
    const fromFlag = await spawnGateway([...flags, '--permits', '4'], { env: { TOLLGATE_PERMITS: '2' } })
    expect((await limits(fromFlag, '/default')).body).toMatchObject({ permits: 4 })
  })

  it('--help lists the variable of every flag', async () => {
    const help = runGateway(['--help'])
    expect(await help.exited).toEqual({ code: 0, signal: null })
    const text = help.stdout()
    const flags = [...text.matchAll(/^ {2}(?:-h, )?--([a-z-]+)/gm)].map((m) => m[1] as string)
    expect(flags.length).toBeGreaterThan(30)
    for (const flag of flags.filter((f) => !['help', 'version', 'example-config'].includes(f))) {
      const name =
        flag === 'redis' ? 'TOLLGATE_REDIS_URL' : `TOLLGATE_${flag.toUpperCase().replace(/-/g, '_')}`
      expect(text, flag).toContain(name)
    }
  })
})

describe('the first hour', () => {
  it('--example-config prints the shipped example, which starts as it is (the docs run it from an installed package)', async () => {
    const printed = runGateway(['--example-config'])
    expect(await printed.exited).toEqual({ code: 0, signal: null })
    const example = readFileSync(path.join(ROOT, 'examples/gateway.yaml'), 'utf8')
    expect(printed.stdout()).toBe(example.trimEnd() + '\n')
    const file = await writeFileIn('tollgate.yaml', printed.stdout())
    // As printed (only the ports moved, and the upstream: the file's is 127.0.0.1:3000), it runs on
    // the in-memory store, and `curl localhost:8080/export` reaches the export route, whatever Host.
    const upstream = await startRecorder()
    const gateway = await spawnGateway([
      '--config',
      file,
      '--port',
      '0',
      '--admin-port',
      '0',
      '--upstream',
      upstream.url,
    ])
    expect(gateway.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/)
    expect(gateway.logs().find((line) => line.msg === 'tollgate ready')).toMatchObject({ store: 'memory' })
    const response = await fetch(`${gateway.url}/export`)
    expect(response.status).toBe(200)
    expect(response.headers.get('ratelimit-policy')).toContain('"export"')
    expect(upstream.requests.map((request) => request.url)).toContain('/export')
  })

  it('--log-format pretty writes readable lines (pino-pretty); json stays the default', async () => {
    const recorder = await startRecorder()
    const pretty = runGateway([...baseFlags(recorder.url, prefix()), '--log-format', 'pretty'])
    await eventually(() => /INFO.*tollgate ready/.test(pretty.stderr()), 15_000)
    expect(pretty.stderr()).not.toMatch(/^\{/m)
    const json = await spawnGateway(baseFlags(recorder.url, prefix()))
    expect(json.logs().map((line) => line.msg)).toContain('tollgate ready')
    const bad = runGateway([...baseFlags(recorder.url, prefix()), '--log-format', 'xml'])
    expect(await bad.exited).toEqual({ code: 2, signal: null })
    expect(bad.stderr()).toContain('--log-format: expected json or pretty (got "xml")')
  })

  it('--lean off and `lean: false` turn the lean paths off (said in the ready line)', async () => {
    const recorder = await startRecorder()
    const file = await writeFileIn('not-lean.yaml', `lean: false\ndefaults: { upstream: ${recorder.url} }\n`)
    for (const args of [
      [...baseFlags(recorder.url, prefix()), '--lean', 'off'],
      ['--config', file, '--port', '0', '--admin-port', '0', '--prefix', prefix()],
    ]) {
      const gateway = await spawnGateway(args)
      expect((await fetch(`${gateway.url}/x`)).status).toBe(200)
      expect(gateway.logs().find((line) => line.msg === 'tollgate ready')).toMatchObject({ lean: false })
    }
    const lean = await spawnGateway(baseFlags(recorder.url, prefix()))
    expect(lean.logs().find((line) => line.msg === 'tollgate ready')).toMatchObject({ lean: true })
    const bad = runGateway([...baseFlags(recorder.url, prefix()), '--lean', 'no'])
    expect(await bad.exited).toEqual({ code: 2, signal: null })
    expect(bad.stderr()).toContain('--lean: expected on or off (got "no")')
  })
})

describe('reload', () => {
  it('SIGHUP swaps limits for new requests; in-flight ones keep their permits; an invalid file is logged and the running config stays', async () => {
    const recorder = await startRecorder()
    const file = await writeFileIn('reload.yaml', apiConfig(recorder.url, 1))
    const gateway = await spawnGateway([
      '--config',
      file,
      '--port',
      '0',
      '--admin-port',
      '0',
      '--prefix',
      prefix(),
    ])
    const first = await holdRequests(gateway.url, recorder, 1)
    expect((await fetch(`${gateway.url}/full`)).status).toBe(503) // permits 1, held

    await writeFile(file, apiConfig(recorder.url, 2))
    gateway.kill('SIGHUP')
    await eventually(
      async () =>
        metric(await metricsOf(gateway), 'tollgate_config_reloads_total', { result: 'success' }) === 1,
    )
    // The held request kept its permit across the swap: one more fits under 2, not two more.
    const second = await holdRequests(gateway.url, recorder, 1)
    expect((await fetch(`${gateway.url}/full`)).status).toBe(503)
    expect(recorder.max.get('/hold')).toBe(2)

    // Invalid: logged with the field's path, counted, nothing changes, the process lives on.
    await writeFile(file, apiConfig(recorder.url, 'many'))
    gateway.kill('SIGHUP')
    await eventually(
      async () =>
        metric(await metricsOf(gateway), 'tollgate_config_reloads_total', { result: 'failure' }) === 1,
    )
    const text = await metricsOf(gateway)
    expect(metric(text, 'tollgate_config_last_reload_successful')).toBe(0)
    const error = gateway.logs().find((line) => String(line.msg).startsWith('config reload failed'))
    expect(error?.issues).toEqual([
      { path: 'routes[0].concurrency.permits', message: 'expected a positive integer' },
    ])
    expect((await limits(gateway, '/api')).body).toMatchObject({ permits: 2 })

    recorder.release()
    for (const response of [...first, ...second]) expect((await response).status).toBe(200)
    // Every lease went back exactly once: the store's holders are 0 again.
    await eventually(
      async () => ((await limits(gateway, '/api')).body.buckets as { holders: number }[])[0]?.holders === 0,
    )
    expect(gateway.stderr()).not.toContain('shutting down')
  }, 30_000)

  it('--watch-config reloads when the file changes, with no signal', async () => {
    const recorder = await startRecorder()
    const file = await writeFileIn('watch.yaml', apiConfig(recorder.url, 1))
    const gateway = await spawnGateway([
      '--config',
      file,
      '--watch-config',
      '--port',
      '0',
      '--admin-port',
      '0',
      '--prefix',
      prefix(),
    ])
    await writeFile(file, apiConfig(recorder.url, 7))
    await eventually(async () => (await limits(gateway, '/api')).body.permits === 7, 10_000, 100)
    expect(metric(await metricsOf(gateway), 'tollgate_limit_permits', { route: 'api' })).toBe(7)
  }, 20_000)
})

describe('admin /limits API', () => {
  it('a limit set on one replica binds every replica sharing Redis; PUT is idempotent, DELETE restores the config', async () => {
    const recorder = await startRecorder()
    const shared = prefix()
    const flags = [
      ...baseFlags(recorder.url, shared),
      '--redis',
      redisUrl(topology().standalone),
      '--permits',
      '5',
      '--per',
      'route',
      '--max-wait-ms',
      '0',
    ]
    const a = await spawnGateway(flags)
    const b = await spawnGateway(flags)
    for (let i = 0; i < 2; i++) {
      const set = await limits(a, '/default', put(1))
      expect(set).toEqual({
        status: 200,
        body: { bucket: null, configured: 5, override: 1, effective: 1, holders: 0, queued: 0 },
      })
    }
    const held = await holdRequests(b.url, recorder, 1)
    expect((await fetch(`${b.url}/other`)).status).toBe(503) // b obeys what a set
    expect((await fetch(`${a.url}/other`)).status).toBe(503)
    expect((await limits(b, '/default')).body).toMatchObject({
      route: 'default',
      per: 'route',
      permits: 5,
      buckets: [{ bucket: null, configured: 5, override: 1, effective: 1, holders: 1, queued: 0 }],
    })
    expect(metric(await metricsOf(b), 'tollgate_limit_permits', { route: 'default' })).toBe(1)

    const reset = await limits(b, '/default', { method: 'DELETE' })
    expect(reset.body).toMatchObject({ override: null, effective: 5 })
    expect((await fetch(`${a.url}/other`)).status).toBe(200)
    recorder.release()
    expect((await held[0])?.status).toBe(200)
  }, 30_000)

  it('validates: unknown route 404, bad bodies 400 naming the field, per-tenant buckets by name', async () => {
    const recorder = await startRecorder()
    const gateway = await spawnGateway([
      ...baseFlags(recorder.url, prefix()),
      '--per',
      'tenant',
      '--permits',
      '2',
    ])
    expect((await limits(gateway, '/nope')).status).toBe(404)
    expect(await limits(gateway, '/default/buckets/acme', put(0))).toMatchObject({
      status: 400,
      body: { error: 'permits: expected an integer from 1 to 1000000' },
    })
    expect(await limits(gateway, '/default/buckets/acme', put(2.5))).toMatchObject({ status: 400 })
    const extra = await limits(gateway, '/default/buckets/acme', {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: '{"permits":3,"burst":9}',
    })
    expect(extra).toMatchObject({ status: 400, body: { error: 'burst: unknown field' } })
    const notJson = await limits(gateway, '/default/buckets/acme', { method: 'PUT', body: 'permits=3' })
    expect(notJson.status).toBe(415)
    // per: tenant has no single bucket: the route-level PUT says where to go instead.
    expect((await limits(gateway, '/default', put(3))).status).toBe(409)
    expect(await limits(gateway, '/default/buckets/acme', put(3))).toMatchObject({
      status: 200,
      body: { bucket: 'acme', configured: 2, override: 3, effective: 3 },
    })
    const listed = (await limits(gateway)).body.routes as { buckets: { bucket: string }[] }[]
    expect(listed[0]?.buckets.map((b) => b.bucket)).toEqual(['acme'])
    // The tenant really gets 3: three held, the fourth rejected.
    const held = Array.from({ length: 3 }, (_, i) =>
      fetch(`${gateway.url}/hold/${i}`, { headers: { 'x-tenant-id': 'acme' } }),
    )
    await eventually(() => recorder.inFlight.get('/hold') === 3, 5000, 10)
    const fourth = await fetch(`${gateway.url}/x`, {
      headers: { 'x-tenant-id': 'acme' },
      signal: AbortSignal.timeout(3000),
    })
    expect(fourth.status).toBe(429)
    recorder.release()
    await Promise.all(held)
  }, 30_000)

  it('without a token, /limits answers only local requests: a foreign Host (DNS rebinding) or another page’s Origin gets 403; the dashboard’s own origin passes', async () => {
    const recorder = await startRecorder()
    const gateway = await spawnGateway(baseFlags(recorder.url, prefix()))
    const port = new URL(gateway.adminUrl ?? '').port
    const raw = (headers: string) =>
      new Promise<string>((resolve, reject) => {
        const socket = net.connect(Number(port), '127.0.0.1', () => {
          socket.end(
            `PUT /limits/default HTTP/1.1\r\n${headers}content-type: application/json\r\ncontent-length: 14\r\nconnection: close\r\n\r\n{"permits": 1}`,
          )
        })
        let text = ''
        socket.on('data', (chunk) => (text += chunk.toString()))
        socket.on('end', () => resolve(text))
        socket.on('error', reject)
      })
    expect(await raw(`host: attacker.example:${port}\r\n`)).toMatch(/^HTTP\/1\.1 403/)
    expect(await raw(`host: 127.0.0.1:${port}\r\norigin: http://attacker.example\r\n`)).toMatch(
      /^HTTP\/1\.1 403/,
    )
    // Another local origin (a page of some other service on this machine), an opaque origin, and a
    // page whose origin names this port under another host are other pages; only the dashboard's
    // own origin (http://<this Host>) is this listener's.
    for (const origin of [`http://127.0.0.1:${Number(port) + 1}`, 'null', `https://127.0.0.1:${port}`])
      expect(await raw(`host: 127.0.0.1:${port}\r\norigin: ${origin}\r\n`)).toMatch(/^HTTP\/1\.1 403/)
    expect(
      await raw(`host: attacker.example:${port}\r\norigin: http://attacker.example:${port}\r\n`),
    ).toMatch(/^HTTP\/1\.1 403/)
    expect(await raw(`host: 127.0.0.1:${port}\r\norigin: http://127.0.0.1:${port}\r\n`)).toMatch(
      /^HTTP\/1\.1 200/,
    )
    expect(await raw(`host: localhost:${port}\r\n`)).toMatch(/^HTTP\/1\.1 200/)
    expect((await limits(gateway, '/default')).body).toMatchObject({ buckets: [{ override: 1 }] })
  })

  it('beyond loopback: /limits needs the bearer token (403 without one configured, 401 without the header)', async () => {
    const recorder = await startRecorder()
    const flags = [...baseFlags(recorder.url, prefix()), '--admin-host', '0.0.0.0']
    const open = await spawnGateway(flags)
    const adminPort = new URL(open.adminUrl ?? '').port
    const local = `http://127.0.0.1:${adminPort}`
    expect((await fetch(`${local}/limits`)).status).toBe(403)
    const metrics = await fetch(`${local}/metrics`)
    await metrics.arrayBuffer() // read whole: see admin-listener.test.ts on nodejs/undici#5360
    expect(metrics.status).toBe(200) // probes and metrics stay open
    open.kill()

    const tokenFile = await writeFileIn('token', `${TOKEN}\n`)
    for (const run of [
      () => spawnGateway([...flags, '--admin-token-file', tokenFile]),
      () => spawnGateway(flags, { env: { TOLLGATE_ADMIN_TOKEN: TOKEN } }),
    ]) {
      const guarded = await run()
      const url = `http://127.0.0.1:${new URL(guarded.adminUrl ?? '').port}/limits`
      const none = await fetch(url)
      expect(none.status).toBe(401)
      expect(none.headers.get('www-authenticate')).toMatch(/^Bearer/)
      expect((await fetch(url, { headers: { authorization: 'Bearer wrong-token-0123456789' } })).status).toBe(
        401,
      )
      expect((await fetch(url, { headers: { authorization: `Bearer ${TOKEN}` } })).status).toBe(200)
      expect(guarded.stdout() + guarded.stderr()).not.toContain(TOKEN)
      guarded.kill()
    }
    // A token too short to guard anything is a config error.
    const weak = runGateway([...flags, '--admin-token-file', await writeFileIn('weak', 'abc\n')])
    expect(await weak.exited).toEqual({ code: 2, signal: null })
    expect(weak.stderr()).toContain('--admin-token-file: expected a token of 16 to 4096')
  }, 30_000)
})

interface AccessRecord {
  req: { id: string; method?: string; url?: string; remoteAddress?: string }
  res: { statusCode: number }
  responseTime: number
  upstreamMs?: number
  [field: string]: unknown
}

describe('access log and request ids', () => {
  const accessLines = (gateway: GatewayProcess) =>
    gateway.logs().filter((line) => line.msg === 'request completed') as AccessRecord[]

  it('propagates X-Request-Id (or makes one), upstream and back, and logs pino-http fields', async () => {
    const recorder = await startRecorder()
    const config = await writeFileIn(
      'log.yaml',
      `
defaults:
  upstream: ${recorder.url}
  concurrency: { permits: 1, maxWaitMs: 0 }
routes:
  - name: svc
    match: { pathPrefix: /svc }
    stripPrefix: true
`,
    )
    const gateway = await spawnGateway([
      '--config',
      config,
      '--port',
      '0',
      '--admin-port',
      '0',
      '--prefix',
      prefix(),
    ])
    const given = await fetch(`${gateway.url}/svc/a?q=1`, {
      method: 'POST',
      body: 'hello',
      headers: {
        'x-request-id': 'req-abc.123',
        traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
        tracestate: 'rojo=00f067aa0ba902b7,congo=t61rcWkgMzE',
      },
    })
    expect(given.status).toBe(200)
    expect(given.headers.get('x-request-id')).toBe('req-abc.123')
    const seen = recorder.requests.at(-1)!
    expect(seen.url).toBe('/a?q=1')
    expect(seen.headers['x-request-id']).toBe('req-abc.123')
    // Trace context passes through untouched, as sent.
    expect(seen.headers.traceparent).toBe('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01')
    expect(seen.headers.tracestate).toBe('rojo=00f067aa0ba902b7,congo=t61rcWkgMzE')

    const made = await fetch(`${gateway.url}/svc/b`)
    const id = made.headers.get('x-request-id')
    expect(id).toMatch(/^[0-9a-f]{32}$/)
    expect(recorder.requests.at(-1)?.headers['x-request-id']).toBe(id)
    // One header, one token: anything else is replaced, never forwarded.
    const hostile = await fetch(`${gateway.url}/svc/c`, {
      headers: { 'x-request-id': 'a b\tc', x_request_id: 'forged' },
    })
    expect(hostile.headers.get('x-request-id')).toMatch(/^[0-9a-f]{32}$/)
    expect(
      recorder.requests.at(-1)?.rawHeaders.filter((h) => h.toLowerCase() === 'x-request-id'),
    ).toHaveLength(1)

    // A rejection is logged with its reason.
    const held = await holdRequests(`${gateway.url}/svc`, recorder, 1)
    const rejected = await fetch(`${gateway.url}/svc/d`)
    expect(rejected.status).toBe(503)
    expect(rejected.headers.get('x-request-id')).toMatch(/^[0-9a-f]{32}$/)
    recorder.release()
    await held[0]

    await eventually(() => accessLines(gateway).length >= 5, 5000, 50)
    const [first, second, , , fifth] = accessLines(gateway)
    expect(first).toMatchObject({
      req: { id: 'req-abc.123', method: 'POST', url: '/svc/a?q=1', remoteAddress: '127.0.0.1' },
      res: { statusCode: 200 },
      route: 'svc',
      upstreamStatus: 200,
      bytesIn: 5,
    })
    expect(first?.bytesOut).toBeGreaterThan(50)
    expect(first?.upstreamMs).toBeGreaterThanOrEqual(0)
    expect(first?.responseTime).toBeGreaterThanOrEqual(first?.upstreamMs ?? Infinity)
    expect(second?.req.id).toBe(id)
    const rejection = accessLines(gateway).find((line) => line.res.statusCode === 503)
    expect(rejection).toMatchObject({ rejected: 'busy', route: 'svc' })
    expect(rejection?.upstreamStatus).toBeUndefined()
    expect(fifth).toBeDefined()
  }, 30_000)

  it('--access-log-sample 0 drops successes but keeps errors', async () => {
    const recorder = await startRecorder()
    const gateway = await spawnGateway([...baseFlags(recorder.url, prefix()), '--access-log-sample', '0'])
    for (let i = 0; i < 5; i++) expect((await fetch(`${gateway.url}/ok`)).status).toBe(200)
    expect((await fetch(`${gateway.url}/bad%2Fpath`)).status).toBe(400)
    await eventually(() => accessLines(gateway).length >= 1, 5000, 50)
    await new Promise((resolve) => setTimeout(resolve, 1200)) // the log's 1 s flush: nothing more comes
    expect(accessLines(gateway).map((line) => line.res.statusCode)).toEqual([400])
  }, 20_000)
})

describe('metrics', () => {
  it('serves request, upstream and Redis call durations, the limit, store health and reloads', async () => {
    const recorder = await startRecorder()
    const gateway = await spawnGateway([
      ...baseFlags(recorder.url, prefix()),
      '--redis',
      redisUrl(topology().standalone),
      '--permits',
      '3',
    ])
    for (let i = 0; i < 4; i++) expect((await fetch(`${gateway.url}/m`)).status).toBe(200)
    const text = await metricsOf(gateway)
    expect(metric(text, 'tollgate_request_duration_seconds_count', { route: 'default' })).toBe(4)
    expect(metric(text, 'tollgate_upstream_duration_seconds_count', { route: 'default' })).toBe(4)
    expect(
      metric(text, 'tollgate_redis_call_duration_seconds_count', { call: 'permits.acquire' }),
    ).toBeGreaterThanOrEqual(4)
    expect(metric(text, 'tollgate_limit_permits', { route: 'default' })).toBe(3)
    expect(metric(text, 'tollgate_store_up')).toBe(1)
    expect(metric(text, 'tollgate_config_reloads_total', { result: 'failure' })).toBe(0)
    expect(metric(text, 'tollgate_config_last_reload_successful')).toBe(1)
  })
})
