// The hostile edge (G13, G14), on raw sockets, against the gateway in-process on the in-memory store
// and on Redis. Every test names the RFC section or the nginx/Envoy behaviour it follows; a recording
// upstream (helpers/recorder.ts) is the judge of what got through.
import { afterEach, describe, expect, it } from 'vitest'
import type { Gateway } from '../../src/gateway/index.js'
import { sleep } from '../helpers/contract.js'
import { rawConnect, rawExchange, statuses } from '../helpers/raw-http.js'
import { redisUrl } from '../helpers/gateway.js'
import { counterTotal, startInProcess } from '../helpers/in-process-gateway.js'
import { type Recorder, startRecorder } from '../helpers/recorder.js'
import { topology } from '../helpers/redis.js'

const gateways: Gateway[] = []
afterEach(async () => {
  await Promise.all(gateways.splice(0).map((g) => g.close()))
})

type Kind = 'memory' | 'redis'

function start(
  kind: Kind,
  file: Record<string, unknown>,
  flags: string[] = [],
): Promise<{ port: number; gateway: Gateway }> {
  const redis = topology().standalone
  const storeFlags = kind === 'redis' ? ['--redis', redisUrl(redis)] : []
  return startInProcess(gateways, file, [...storeFlags, ...flags])
}

const get = (path: string, headers = '') => `GET ${path} HTTP/1.1\r\nHost: gw\r\n${headers}\r\n`
const chunked = (text: string) => `${Buffer.byteLength(text, 'latin1').toString(16)}\r\n${text}\r\n0\r\n\r\n`
const smuggled =
  'GET /export/secret HTTP/1.1\r\nHost: x\r\nX-Tollgate-Fencing-Token: 999\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n'

function onePermit(upstream: Recorder, extra: Record<string, unknown> = {}) {
  return {
    defaults: { upstream: upstream.url },
    routes: [
      {
        name: 'export',
        match: { pathPrefix: '/export' },
        concurrency: { per: 'route', permits: 1, maxWaitMs: 10_000 },
        ...extra,
      },
      { name: 'rest', match: { pathPrefix: '/' }, concurrency: { per: 'route', permits: 100 } },
    ],
  }
}

for (const kind of ['memory', 'redis'] as Kind[]) {
  describe(`gateway edge [${kind}]`, () => {
    it('G13: RFC 9112 §6.1-6.3: a request body never reaches the upstream as a request (smuggling corpus)', async () => {
      const upstream = await startRecorder()
      const { port } = await start(kind, onePermit(upstream))
      const methods = ['DELETE', 'OPTIONS', 'GET', 'POST', 'PUT', 'PATCH']
      for (const method of methods) {
        const answer = await rawExchange(
          port,
          `${method} /x HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n${chunked(smuggled)}`,
        )
        expect(statuses(answer), `${method} chunked`).toEqual([200])
        // CL and TE together (RFC 9112 §6.3): refused before anything is forwarded.
        const both = await rawExchange(
          port,
          `${method} /x HTTP/1.1\r\nHost: gw\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${smuggled}`,
        )
        expect(statuses(both)[0], `${method} CL+TE`).toBe(400)
        // A coding other than chunked would reach the upstream unlabelled: 501, as nginx answers.
        const gzipped = await rawExchange(
          port,
          `${method} /x HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: gzip, chunked\r\n\r\n${chunked(smuggled)}`,
        )
        expect(statuses(gzipped)[0], `${method} gzip, chunked`).toBe(501)
        const twoLengths = await rawExchange(
          port,
          `${method} /x HTTP/1.1\r\nHost: gw\r\nContent-Length: 3\r\nContent-Length: 40\r\n\r\nabc`,
        )
        expect(statuses(twoLengths)[0], `${method} CL, CL`).toBe(400)
      }
      await sleep(100)
      expect(upstream.requests.filter((r) => r.url.includes('secret'))).toEqual([])
      const chunkedOnes = upstream.requests.filter((r) => r.url === '/x')
      expect(chunkedOnes).toHaveLength(methods.length)
      for (const request of chunkedOnes) {
        expect(request.body).toBe(smuggled) // the body arrived whole, as a body
        expect(request.headers['x-tollgate-fencing-token']).not.toBe('999')
      }
    })

    it('G13: RFC 9112 §9.3.2: pipelined requests are answered in order, each with its own response', async () => {
      const upstream = await startRecorder()
      const { port } = await start(kind, onePermit(upstream))
      const answer = await rawExchange(port, get('/p1?ms=30') + get('/export/p2') + get('/p3'))
      expect(statuses(answer)).toEqual([200, 200, 200])
      const bodies = [...answer.matchAll(/ok GET (\S+)/g)].map((m) => m[1])
      expect(bodies).toEqual(['/p1?ms=30', '/export/p2', '/p3'])
    })

    it('G13: Envoy normalize_path / merge_slashes: every spelling of /export/a counts against /export (RFC 3986 §5.2.4, §6.2.2)', async () => {
      const upstream = await startRecorder()
      const { port } = await start(kind, onePermit(upstream))
      const spellings = [
        '/export/a',
        '/health/../export/a',
        '/health/%2e%2e/export/a',
        '/x/.%2E/export/a',
        '//export//a',
        '/export/./a',
        '/%65xport/%61',
        '/export;jsessionid=1/a',
      ]
      const answers = await Promise.all(
        spellings.map((path) => rawExchange(port, get(`${path}?ms=150`, 'Connection: close\r\n'), 500)),
      )
      for (const [i, answer] of answers.entries()) expect(statuses(answer), spellings[i]).toEqual([200])
      const absolute = await rawExchange(port, `GET http://gw/export/a?ms=10 HTTP/1.1\r\nHost: gw\r\n\r\n`)
      expect(statuses(absolute)).toEqual([200])
      expect(upstream.max.get('/export')).toBe(1)
      // What the upstream saw is the canonical path the gateway matched (`;` parameters kept).
      expect(new Set(upstream.requests.map((r) => r.url.split('?')[0]))).toEqual(
        new Set(['/export/a', '/export;jsessionid=1/a']),
      )
      // Spellings with no single meaning are refused: raw backslash, fragment, encoded slash, bad escape.
      for (const path of [
        '/health\\..\\export/a',
        '/export#x',
        '/export%2Fa',
        '/export/%zz',
        '/export%5Ca',
      ]) {
        expect(statuses(await rawExchange(port, get(path))), path).toEqual([400])
      }
      expect(upstream.requests.every((r) => !r.url.includes('%2F') && !r.url.includes('\\'))).toBe(true)
    })

    it('G13: PUT /docs/42 and PUT /docs/x/../42 are one write lock', async () => {
      const upstream = await startRecorder()
      const { port } = await start(kind, {
        defaults: { upstream: upstream.url, concurrency: false },
        routes: [{ name: 'docs', match: { pathPrefix: '/docs' }, rwlock: { maxWaitMs: 5000 } }],
      })
      const put = (path: string) =>
        rawExchange(
          port,
          `PUT ${path}?ms=150 HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`,
          400,
        )
      const answers = await Promise.all([
        put('/docs/42'),
        put('/docs/x/../42'),
        put('/docs//42'),
        put('/docs/4%32'),
      ])
      expect(answers.map((a) => statuses(a)[0])).toEqual([200, 200, 200, 200])
      expect(upstream.max.get('/docs')).toBe(1)
    })

    it('G14: nginx send_timeout: a client that stops reading gives its permit back', async () => {
      const upstream = await startRecorder()
      const { port } = await start(kind, onePermit(upstream, { timeouts: { sendMs: 400 } }))
      const reader = await rawConnect(port, { pauseReading: true })
      reader.write(get('/export/big?bytes=64000000'))
      await sleep(200)
      const started = Date.now()
      const next = await rawExchange(port, get('/export/next', 'Connection: close\r\n'))
      expect(statuses(next)).toEqual([200])
      expect(Date.now() - started).toBeLessThan(2 * 400 + 300)
    })

    it('G14: nginx client_body_timeout and a total request bound: a trickling upload gives its permit back (408)', async () => {
      const upstream = await startRecorder()
      const { port } = await start(
        kind,
        onePermit(upstream, { timeouts: { requestMs: 700, clientBodyMs: 5000 } }),
      )
      const slow = await rawConnect(port)
      slow.write('POST /export/upload HTTP/1.1\r\nHost: gw\r\nContent-Length: 100\r\n\r\n')
      const trickle = setInterval(() => slow.write('x'), 100)
      try {
        await sleep(100)
        const started = Date.now()
        const next = await rawExchange(port, get('/export/next', 'Connection: close\r\n'))
        expect(statuses(next)).toEqual([200])
        expect(Date.now() - started).toBeLessThan(2 * 700)
        expect(statuses(await slow.waitFor(/HTTP\/1\.1 \d{3}/, 2000))).toEqual([408])
      } finally {
        clearInterval(trickle)
      }
      // A body that stops altogether: the idle bound.
      const { port: idlePort } = await start(kind, onePermit(upstream, { timeouts: { clientBodyMs: 300 } }))
      const stalled = await rawConnect(idlePort)
      const at = Date.now()
      stalled.write('POST /export/upload HTTP/1.1\r\nHost: gw\r\nContent-Length: 100\r\n\r\nabc')
      expect(statuses(await stalled.waitFor(/HTTP\/1\.1 \d{3}/, 2000))).toEqual([408])
      expect(Date.now() - at).toBeLessThan(2 * 300 + 200)
    })

    it('G14: nginx proxy_request_buffering: a buffered upload holds no permit while it arrives; larger bodies get 413', async () => {
      const upstream = await startRecorder()
      const { port } = await start(kind, onePermit(upstream, { requestBuffer: { maxBytes: 1024 } }))
      const slow = await rawConnect(port)
      slow.write('POST /export/upload HTTP/1.1\r\nHost: gw\r\nContent-Length: 6\r\n\r\nabc')
      await sleep(100)
      // The slow upload is not admitted yet, so the permit is free for others.
      expect(statuses(await rawExchange(port, get('/export/fast?ms=0', 'Connection: close\r\n')))).toEqual([
        200,
      ])
      slow.write('def')
      expect(await slow.waitFor(/ok POST \/export\/upload 6/)).toContain('200 OK')
      const big = await rawExchange(
        port,
        `POST /export/big HTTP/1.1\r\nHost: gw\r\nContent-Length: 2048\r\n\r\n`,
      )
      expect(statuses(big)).toEqual([413])
      const bigChunked = await rawExchange(
        port,
        `POST /export/big HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n${chunked('y'.repeat(2000))}`,
      )
      expect(statuses(bigChunked)).toEqual([413])
      expect(upstream.requests.filter((r) => r.url === '/export/big')).toEqual([])
    })

    it('G14: WebSocket: a silent upstream handshake answers 504 and a half-open or idle tunnel is closed', async () => {
      const upstream = await startRecorder()
      // upstreamMs: undici's timers tick every ~0.5 s, so the bound is enforced within +1 s.
      const { port } = await start(
        kind,
        onePermit(upstream, { timeouts: { upstreamMs: 1500, websocketIdleMs: 400 } }),
      )
      const upgrade = (path: string) =>
        `GET ${path} HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`
      let at = Date.now()
      const silent = await rawConnect(port)
      silent.write(upgrade('/export/ws/silent'))
      expect(statuses(await silent.waitFor(/HTTP\/1\.1 \d{3}/, 4000))).toEqual([504])
      expect(Date.now() - at).toBeLessThan(2 * 1500)
      // The upstream closes its side; the client stays silent: the tunnel is cut within the grace.
      at = Date.now()
      const halfOpen = await rawConnect(port)
      halfOpen.write(upgrade('/export/ws/close'))
      await halfOpen.waitFor(/101/)
      await halfOpen.closed
      expect(Date.now() - at).toBeLessThan(1000 + 500)
      // Nothing either way for websocketIdleMs: closed.
      const idle = await rawConnect(port)
      idle.write(upgrade('/export/ws/echo'))
      await idle.waitFor(/101/)
      idle.write('ping')
      await idle.waitFor(/ping/)
      at = Date.now()
      await idle.closed
      expect(Date.now() - at).toBeLessThan(2 * 400 + 300)
      // Every permit is back: the next request of the capped route gets in at once.
      expect(statuses(await rawExchange(port, get('/export/after', 'Connection: close\r\n')))).toEqual([200])
    })

    it('G14: maxQueue counts only requests waiting for a permit, not those whose store call is in flight', async () => {
      const upstream = await startRecorder()
      const { port } = await start(kind, {
        defaults: { upstream: upstream.url, concurrency: { permits: 1000, maxQueue: 5 } },
      })
      const answers = await Promise.all(
        Array.from({ length: 100 }, (_, i) =>
          fetch(`http://127.0.0.1:${port}/q${i}?ms=20`).then((r) => r.status),
        ),
      )
      expect(answers.filter((status) => status !== 200)).toEqual([])
    })

    it('G13: RFC 9110 §7.6.1: hop-by-hop headers, the ones Connection names, and spoofable forwarding headers never cross', async () => {
      const upstream = await startRecorder()
      const { port } = await start(kind, onePermit(upstream))
      const hostile = [
        'Connection: keep-alive, X-Secret',
        'X-Secret: leak',
        'Keep-Alive: timeout=5',
        'TE: trailers',
        'Trailer: X-After',
        'Proxy-Connection: keep-alive',
        'Proxy-Authorization: Basic c2VjcmV0',
        'Forwarded: for=6.6.6.6',
        'X-Forwarded-For: 6.6.6.6',
        'X-Forwarded-Host: evil',
        'X-Forwarded-Port: 1',
        'X-Forwarded-Proto: https',
        'X-Real-IP: 6.6.6.6',
        'True-Client-IP: 6.6.6.6',
        'X-Client-IP: 6.6.6.6',
        'X-Original-URL: /admin',
        'X-Forwarded-Prefix: /admin',
        'X-Tollgate-Fencing-Token: 999',
        'X_Tollgate_Fencing_Token: 998',
        'x-tollgate_fencing-token: 997',
        'X_Real_IP: 6.6.6.6',
        'X_Original_URL: /admin',
        'X_Forwarded_Prefix: /admin',
        'X-Forwarded-Ssl: on',
        'X-Forwarded-Scheme: https',
        'Front-End-Https: on',
        'X-Fine: kept',
      ]
      const answer = await rawExchange(
        port,
        `GET /export/headers HTTP/1.1\r\nHost: gw:1234\r\n${hostile.join('\r\n')}\r\n\r\n`,
      )
      expect(statuses(answer)).toEqual([200])
      const seen = upstream.requests.at(-1)!
      const names = seen.rawHeaders.filter((_, i) => i % 2 === 0).map((n) => n.toLowerCase())
      for (const name of [
        'x-secret',
        'keep-alive',
        'te',
        'trailer',
        'proxy-connection',
        'proxy-authorization',
        'forwarded',
        'x-real-ip',
        'true-client-ip',
        'x-client-ip',
        'x-original-url',
        'x-forwarded-prefix',
        'x_tollgate_fencing_token',
        'x-tollgate_fencing-token',
        'x_real_ip',
        'x_original_url',
        'x_forwarded_prefix',
        'x-forwarded-ssl',
        'x-forwarded-scheme',
        'front-end-https',
      ]) {
        expect(names, name).not.toContain(name)
      }
      expect(seen.headers['x-fine']).toBe('kept')
      expect(seen.headers['x-forwarded-for']).toBe('127.0.0.1')
      expect(seen.headers['x-forwarded-host']).toBe('gw:1234')
      expect(seen.headers['x-forwarded-proto']).toBe('http')
      // The port the client reached the gateway on, never the one it wrote in Host.
      expect(seen.headers['x-forwarded-port']).toBe(String(port))
      expect(names.filter((n) => n === 'x-tollgate-fencing-token')).toHaveLength(1)
      expect(seen.headers['x-tollgate-fencing-token']).not.toMatch(/^99\d$/)
      // The response direction: what the upstream's Connection names, Keep-Alive, Proxy-Authenticate.
      const head = answer.split('\r\n\r\n')[0]!.toLowerCase()
      expect(head).not.toContain('x-up-secret')
      expect(head).not.toContain('proxy-authenticate')
      expect(head).not.toContain('timeout=77')
      expect(head).toContain('x-up-public: ok')
    })

    it('G13: RFC 9110 §10.1.1: 100 Continue only after admission; a rejected client never sends its body; an upstream timeout is 504', async () => {
      const upstream = await startRecorder()
      const { port } = await start(kind, {
        defaults: { upstream: upstream.url },
        routes: [
          {
            name: 'export',
            match: { pathPrefix: '/export' },
            concurrency: { per: 'route', permits: 1, maxWaitMs: 0 },
            timeouts: { upstreamMs: 500 },
          },
        ],
      })
      const holder = await rawConnect(port)
      holder.write(get('/export/hold'))
      await sleep(100)
      const rejected = await rawConnect(port)
      rejected.write(
        'POST /export/x HTTP/1.1\r\nHost: gw\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n',
      )
      const answer = await rejected.waitFor(/HTTP\/1\.1 [2-5]\d\d/)
      expect(answer).not.toContain('100 Continue')
      expect(statuses(answer)).toEqual([503])
      await rejected.closed // the body was never asked for: the connection is not kept
      upstream.release()
      await holder.waitFor(/held/)
      const admitted = await rawConnect(port)
      admitted.write(
        'POST /export/x HTTP/1.1\r\nHost: gw\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n',
      )
      await admitted.waitFor(/100 Continue/)
      admitted.write('hello')
      expect(await admitted.waitFor(/ok POST \/export\/x 5/)).toContain('200 OK')
      const slow = await rawExchange(
        port,
        'POST /export/never HTTP/1.1\r\nHost: gw\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n',
        2000,
      )
      expect(statuses(slow).filter((s) => s !== 100)).toEqual([504])
    })

    it('G3 G13: nginx: pipelined requests are served one at a time; a closed connection leaves no permit behind', async () => {
      const upstream = await startRecorder()
      const { port } = await start(
        kind,
        onePermit(upstream, { concurrency: { per: 'route', permits: 1, maxWaitMs: 0 } }),
      )
      const pipelined = await rawConnect(port)
      pipelined.write(get('/drip?chunks=20') + get('/export/queued'))
      await pipelined.waitFor(/drip/)
      // The queued request took no permit while the response ahead of it streams.
      expect(statuses(await rawExchange(port, get('/export/other', 'Connection: close\r\n')))).toEqual([200])
      pipelined.socket.destroy()
      await sleep(200)
      expect(statuses(await rawExchange(port, get('/export/after', 'Connection: close\r\n')))).toEqual([200])
      expect(upstream.requests.map((r) => r.url)).not.toContain('/export/queued')
    })

    it('G13: Tomcat reads /public/..;/export and /;x/export as /export: so does the gateway', async () => {
      const upstream = await startRecorder()
      const { port } = await start(
        kind,
        onePermit(upstream, { concurrency: { per: 'route', permits: 1, maxWaitMs: 0 } }),
      )
      const holder = await rawConnect(port)
      holder.write(get('/export/hold'))
      await sleep(100)
      for (const path of ['/public/..;/export/a', '/.;/export/a', '/;x/export/a', '/%2e%2e;/export/a']) {
        expect(statuses(await rawExchange(port, get(path, 'Connection: close\r\n'))), path).toEqual([503])
      }
      upstream.release()
    })

    it('G14: WebSocket: an upgrade the upstream refuses with a large body is bounded by the send timeout', async () => {
      const upstream = await startRecorder()
      const { port } = await start(kind, onePermit(upstream, { timeouts: { sendMs: 400 } }))
      const reader = await rawConnect(port, { pauseReading: true })
      reader.write(
        'GET /export/ws/refuse-big HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n',
      )
      await sleep(300)
      const at = Date.now()
      expect(statuses(await rawExchange(port, get('/export/next', 'Connection: close\r\n')))).toEqual([200])
      expect(Date.now() - at).toBeLessThan(2 * 400 + 300)
    })

    it('G13: an upstream 204 with a body is a broken response: 502, never a silent cut', async () => {
      const upstream = await startRecorder()
      const { port } = await start(kind, onePermit(upstream))
      expect(statuses(await rawExchange(port, get('/bad204')))).toEqual([502])
    })

    it('G13: RFC 9110 §10.1.1: Expect is read as Node reads it, and an HTTP/1.0 client never gets a 100', async () => {
      const upstream = await startRecorder()
      const { port } = await start(kind, onePermit(upstream))
      const admitted = await rawConnect(port)
      admitted.write(
        'POST /export/x HTTP/1.1\r\nHost: gw\r\nExpect: 100-Continue, x\r\nContent-Length: 2\r\n\r\n',
      )
      await admitted.waitFor(/100 Continue/)
      admitted.write('hi')
      expect(await admitted.waitFor(/ok POST \/export\/x 2/)).toContain('200 OK')
      const old = await rawConnect(port)
      old.write('POST /export/y HTTP/1.0\r\nHost: gw\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n')
      await sleep(200)
      expect(old.received()).not.toContain('100 Continue')
      old.write('hi')
      expect(await old.waitFor(/ok POST \/export\/y 2/)).toContain(' 200 OK')
    })

    it('G4: a response that outlives several lease terms keeps its lease (renewed, never lost)', async () => {
      const upstream = await startRecorder()
      const { port, gateway } = await start(kind, { ...onePermit(upstream), ttlMs: 600 })
      const answer = await rawExchange(port, get('/export/drip?chunks=12', 'Connection: close\r\n'), 1000)
      expect(answer.match(/drip/g)).toHaveLength(12)
      expect(await counterTotal(gateway.metrics.leaseLost)).toBe(0)
    })

    it('G13: a repeated tenant header counts as its first value (one bucket, as documented)', async () => {
      const upstream = await startRecorder()
      const { port } = await start(kind, {
        defaults: { upstream: upstream.url, concurrency: { per: 'tenant', permits: 1, maxWaitMs: 0 } },
      })
      const holder = await rawConnect(port)
      holder.write(get('/hold', 'X-Tenant-Id: T\r\n'))
      await sleep(100)
      expect(statuses(await rawExchange(port, get('/x', 'X-Tenant-Id: T, T\r\n')))).toEqual([429])
      expect(statuses(await rawExchange(port, get('/x', 'X-Tenant-Id: T\r\nX-Tenant-Id: T\r\n')))).toEqual([
        429,
      ])
      expect(statuses(await rawExchange(port, get('/x', 'X-Tenant-Id: U\r\n')))).toEqual([200])
      upstream.release()
    })

    it('G13: host routes ignore case, port and a trailing dot; HEAD follows GET; OPTIONS *, CONNECT, duplicate Host and a 101 to a plain request', async () => {
      const special = await startRecorder()
      const upstream = await startRecorder()
      const { port } = await start(kind, {
        defaults: { upstream: upstream.url },
        routes: [
          { name: 'api', match: { pathPrefix: '/', host: 'api.example.com' }, upstream: special.url },
          { name: 'get', match: { pathPrefix: '/only-get', methods: ['GET'] }, upstream: special.url },
          { name: 'rest', match: { pathPrefix: '/' } },
        ],
      })
      expect(
        statuses(await rawExchange(port, 'GET /h HTTP/1.1\r\nHost: API.Example.com.:80\r\n\r\n')),
      ).toEqual([200])
      expect(statuses(await rawExchange(port, 'HEAD /only-get HTTP/1.1\r\nHost: gw\r\n\r\n'))).toEqual([200])
      expect(special.requests.map((r) => `${r.method} ${r.url}`)).toEqual(['GET /h', 'HEAD /only-get'])
      // RFC 9110 §9.3.7: OPTIONS * is about the server; answered here, not forwarded as "/*".
      const options = await rawExchange(port, 'OPTIONS * HTTP/1.1\r\nHost: gw\r\n\r\n')
      expect(statuses(options)).toEqual([200])
      expect(options.toLowerCase()).toContain('allow: get')
      // CONNECT is for forward proxies (RFC 9110 §9.3.6): 405, not a silently closed connection.
      expect(
        statuses(await rawExchange(port, 'CONNECT evil:443 HTTP/1.1\r\nHost: evil:443\r\n\r\n')),
      ).toEqual([405])
      // RFC 9112 §3.2: more than one Host line is answered 400.
      expect(statuses(await rawExchange(port, 'GET /x HTTP/1.1\r\nHost: gw\r\nHost: other\r\n\r\n'))).toEqual(
        [400],
      )
      // An upstream that answers a plain request with 101 is broken: 502, never relayed.
      const switched = await rawExchange(port, get('/switch'))
      expect(statuses(switched)).toEqual([502])
      expect(switched).not.toContain('surprise')
      expect(upstream.requests.map((r) => r.url)).not.toContain('/*')
      expect(upstream.requests.map((r) => r.method)).not.toContain('CONNECT')
    })
  })
}
