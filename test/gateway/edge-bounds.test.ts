// The hostile edge, round two (G3, G13, G14): every response the gateway writes itself is bounded
// like a proxied one, a connection carries one request at a time, a read-ahead is bounded in buffers
// as in bytes, one resource has one lock name, and every method llhttp knows is forwarded as itself.
// Each case runs on both paths: the lean front end and upstream pool (lean: true), and Node's
// http.Server with undici (lean: false). Raw sockets on the client side; a recording upstream judges.
import http from 'node:http'
import { afterEach, describe, expect, it } from 'vitest'
import { readAheadHeld } from '../../src/gateway/http/lean/front-end.js'
import type { Gateway } from '../../src/gateway/index.js'
import { eventually, sleep } from '../helpers/contract.js'
import { type RawConnection, rawConnect, rawExchange, statuses } from '../helpers/raw-http.js'
import { counterTotal, startInProcess } from '../helpers/in-process-gateway.js'
import { startRecorder } from '../helpers/recorder.js'

import { freePort } from '../helpers/redis-server.js'

const gateways: Gateway[] = []
afterEach(async () => {
  await Promise.all(gateways.splice(0).map((g) => g.close()))
})

function start(lean: boolean, file: Record<string, unknown>): Promise<{ port: number; gateway: Gateway }> {
  return startInProcess(gateways, file, [], lean)
}

const get = (path: string, headers = '') => `GET ${path} HTTP/1.1\r\nHost: gw\r\n${headers}\r\n`

/** Resolves once `count` has not moved for 200 ms (the gateway stopped making progress). */
async function stalled(count: () => Promise<number>): Promise<void> {
  let last = -1
  for (;;) {
    const now = await count()
    if (now === last && now > 0) return
    last = now
    await sleep(200)
  }
}

/** Whether the gateway has cut a connection whose client stopped reading: the client reads again
 * (a paused socket sees no end), takes what is buffered, and finds the end within 2 s (a connection
 * that was not cut goes on answering instead). */
async function cut(client: RawConnection): Promise<boolean> {
  client.socket.resume()
  return Promise.race([client.closed.then(() => true), sleep(2000).then(() => false)])
}
const SEND_MS = 400
/** Makes a request ~330 bytes: fewer than http.Server's cut-off of waiting requests fit in one read
 * (64 KB), so a never-reading client meets the send bound, not that cut-off. */
const PAD = `X-Pad: ${'p'.repeat(290)}\r\n`
/** Bytes of pipelined requests per flooding connection (the review measured +666 MB of gateway memory for one such flood on http.Server). */
const FLOOD = 8 * 1024 * 1024

for (const lean of [true, false]) {
  describe(`gateway edge, round two [${lean ? 'lean' : 'node'}]`, () => {
    it('G14: nginx send_timeout covers its own 502: a never-reading client of a failing upstream gives its permit back', async () => {
      const upstream = await startRecorder()
      const { port, gateway } = await start(lean, {
        defaults: { upstream: upstream.url, timeouts: { sendMs: SEND_MS } },
        routes: [
          {
            name: 'fail',
            match: { pathPrefix: '/fail' },
            upstream: `http://127.0.0.1:${await freePort()}`,
            concurrency: { per: 'route', permits: 1, maxWaitMs: 5000 },
          },
          { name: 'rest', match: { pathPrefix: '/' } },
        ],
      })
      // Pipelined until the socket buffers are full: one of the gateway's own 502s can no longer be
      // flushed, with the route's only permit held by its request.
      const reader = await rawConnect(port, { pauseReading: true })
      reader.write(get('/fail/x', PAD).repeat(30_000))
      // Until the gateway stops answering it: a 502 it cannot flush holds the permit.
      await stalled(() => counterTotal(gateway.metrics.upstreamErrors))
      const started = performance.now()
      const other = await rawExchange(port, get('/fail/other', 'Connection: close\r\n'))
      expect(statuses(other)).toEqual([502]) // admitted (the permit came back), then refused upstream
      expect(performance.now() - started).toBeLessThan(3 * SEND_MS + 1000)
      expect(await cut(reader)).toBe(true) // the stuck connection was cut
    }, 30_000)

    it('G14: a never-reading client of the gateway’s own 404s is cut after the send timeout', async () => {
      const upstream = await startRecorder()
      const { port, gateway } = await start(lean, {
        defaults: { upstream: upstream.url, timeouts: { sendMs: SEND_MS } },
        routes: [{ name: 'api', match: { pathPrefix: '/api' } }],
      })
      const reader = await rawConnect(port, { pauseReading: true })
      reader.write(get('/nope', PAD).repeat(30_000))
      // Until the gateway stops answering it (a 404 it cannot flush), however long a loaded machine
      // takes to get there; the send timeout runs from then.
      await stalled(() => counterTotal(gateway.metrics.refused))
      await sleep(SEND_MS)
      expect(await cut(reader)).toBe(true)
      // Nothing of that connection is left in flight: a drain (SIGTERM) does not wait its grace
      // period (10 s) for requests that were waiting behind the cut response.
      const draining = performance.now()
      await gateway.close()
      expect(performance.now() - draining).toBeLessThan(2000)
    }, 30_000)

    it('G14: nginx, Envoy: one request at a time per connection: 8 MB of pipelined requests cost bounded memory', async () => {
      const upstream = await startRecorder()
      const { port } = await start(lean, {
        defaults: { upstream: upstream.url },
        routes: [{ name: 'hold', match: { pathPrefix: '/' }, concurrency: { per: 'route', permits: 1000 } }],
      })
      const before = process.memoryUsage().rss
      const flood = async (first: string) => {
        const client = await rawConnect(port)
        // A first request (with a body: on the lean path, it hands the connection to http.Server), a
        // request that gets no answer, and 8 MB of requests behind it, as one Buffer.
        client.write(first + get('/hold/1'))
        client.write(Buffer.alloc(FLOOD - (FLOOD % 29), get('/x'), 'latin1'))
        return client
      }
      const clients = [
        await flood('POST /in HTTP/1.1\r\nHost: gw\r\nContent-Length: 1\r\n\r\nx'),
        await flood(get('/in')),
      ]
      await sleep(2000) // whatever the gateway reads of the floods, it has read by now
      const grown = (process.memoryUsage().rss - before) / 1024 / 1024
      // Behind a request in flight the gateway reads nothing more, and a read of more requests than
      // any client pipelines cuts the connection: a few MB, not hundreds.
      expect(grown).toBeLessThan(64)
      expect(upstream.requests.filter((r) => r.url === '/x')).toEqual([])
      upstream.release()
      for (const client of clients) client.socket.destroy()
    }, 60_000)

    it('G14: one request at a time also when each body ends in the write that begins the next head', async () => {
      // A hostile review's flood: every request behind the first is chunked, one byte per chunk, and
      // its last chunk comes with the next request's head, so some request always has bytes to come.
      // Reading on for any of them held 20 MB of requests as one Buffer per chunk: 1.3 GB.
      const upstream = await startRecorder()
      const { port } = await start(lean, {
        defaults: { upstream: upstream.url },
        routes: [{ name: 'hold', match: { pathPrefix: '/' }, concurrency: { per: 'route', permits: 1000 } }],
      })
      const before = process.memoryUsage().rss
      const client = await rawConnect(port)
      const body = '1\r\nx\r\n'.repeat(14_000)
      let flood = 'POST /hold/1 HTTP/1.1\r\nHost: gw\r\nContent-Length: 1\r\n\r\nx'
      for (let i = 0; i < 60; i++)
        flood += `${i > 0 ? '0\r\n\r\n' : ''}POST /p HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n${body}`
      client.write(flood)
      await sleep(2000) // whatever the gateway reads of it, it has read by now
      const grown = (process.memoryUsage().rss - before) / 1024 / 1024
      expect(grown).toBeLessThan(64)
      upstream.release()
      client.socket.destroy()
    }, 60_000)

    it('G13 G1: Express and Spring route /docs/42/ as /docs/42: a read through any spelling waits for the write lock', async () => {
      const upstream = await startRecorder()
      const { port } = await start(lean, {
        defaults: { upstream: upstream.url },
        routes: [{ name: 'docs', match: { pathPrefix: '/docs' }, rwlock: { maxWaitMs: 5000 } }],
      })
      // The write of /docs/42 is held by the upstream (?hold: the query is not part of the resource).
      const writer = await rawConnect(port)
      writer.write('PUT /docs/42?hold HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n')
      await eventually(() => upstream.requests.some((r) => r.method === 'PUT'))
      const spellings = ['/docs/42/', '/docs/42/.', '/docs/42//', '/docs/42/x/..', '/docs/4%32/', '/docs//42']
      const reads = await Promise.all(spellings.map(() => rawConnect(port)))
      reads.forEach((read, i) => read.write(get(`${spellings[i] as string}?hold`)))
      await sleep(500)
      // Not one read reached the upstream while the write is in flight; all of them once it is done,
      // together (they share the read lock of one resource).
      expect(upstream.requests.filter((r) => r.method === 'GET').map((r) => r.url)).toEqual([])
      upstream.release()
      await eventually(() => upstream.inFlight.get('/docs') === spellings.length)
      upstream.release()
      await Promise.all(reads.map((read) => read.waitFor(/HTTP\/1\.1 200/)))
      // Reserved characters that Express decodes into the id (a hostile review: a read of
      // /docs/bob%40x.org ran during a write of /docs/bob@x.org).
      const second = await rawConnect(port)
      second.write('PUT /docs/bob@x.org:1?hold HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n')
      await eventually(() => upstream.requests.filter((r) => r.method === 'PUT').length === 2)
      const escaped = ['/docs/bob%40x.org:1', '/docs/bob@x.org%3A1/', '/docs/bob%40x.org%3a1']
      const more = await Promise.all(escaped.map(() => rawConnect(port)))
      more.forEach((read, i) => read.write(get(`${escaped[i] as string}?hold`)))
      await sleep(500)
      expect(upstream.requests.filter((r) => r.method === 'GET').length).toBe(spellings.length)
      upstream.release()
      await eventually(
        () => upstream.requests.filter((r) => r.method === 'GET').length === spellings.length + 3,
      )
      upstream.release()
      await Promise.all(more.map((read) => read.waitFor(/HTTP\/1\.1 200/)))
    })

    it('G14: a read-ahead that trickles in one byte per packet is bounded in buffers, not only in bytes', async () => {
      const upstream = await startRecorder()
      const { port } = await start(lean, {
        defaults: { upstream: upstream.url },
        routes: [{ name: 'all', match: { pathPrefix: '/' } }],
      })
      const client = await rawConnect(port)
      client.socket.setNoDelay(true)
      client.write(get('/hold/1'))
      await eventually(() => upstream.requests.length === 1)
      // 4,000 single bytes of the next request, each its own packet, while the first is in flight.
      const next = get(`/x?${'a'.repeat(4000)}`)
      for (let i = 0; i < 4000; i++) {
        await new Promise<void>((resolve) => client.socket.write(next[i] as string, () => resolve()))
        // A turn for the gateway (same process) to read that byte on its own.
        await new Promise((resolve) => setImmediate(resolve))
      }
      await sleep(200)
      const held = readAheadHeld()
      // On the lean path, the first read as it came and the others copied into blocks, each as large
      // as what is held (256, 258, 516, 1,032 and 2,064 bytes): 6 buffers, where reads kept as they
      // came would be 4,000 Buffers of ~350 bytes each.
      expect(held.buffers).toBeLessThanOrEqual(6)
      expect(held.bytes).toBeLessThanOrEqual(64 * 1024)
      upstream.release()
      client.write(next.slice(4000))
      await client.waitFor(/HTTP\/1\.1 200[\s\S]*HTTP\/1\.1 200/)
    }, 30_000)

    it('G13: undici’s rule: a HEAD goes upstream with connection: close on every path', async () => {
      const upstream = await startRecorder()
      const { port } = await start(lean, {
        defaults: { upstream: upstream.url },
        routes: [{ name: 'all', match: { pathPrefix: '/' } }],
      })
      const answer = await rawExchange(port, 'HEAD /h HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n')
      expect(statuses(answer)).toEqual([200])
      const head = upstream.requests.find((r) => r.method === 'HEAD')
      expect(head?.headers.connection).toBe('close')
    })
  })
}

describe('every method llhttp knows, on both paths', () => {
  it('G13: each is forwarded as itself, with the same answer on the lean path and on http.Server (QUERY included)', async () => {
    const upstream = await startRecorder()
    const file = {
      defaults: { upstream: upstream.url },
      routes: [{ name: 'all', match: { pathPrefix: '/' } }],
    }
    const paths = { lean: (await start(true, file)).port, node: (await start(false, file)).port }
    const answers: Record<string, string> = {}
    for (const method of http.METHODS) {
      const seen: string[] = []
      for (const [path, port] of Object.entries(paths)) {
        const before = upstream.requests.length
        const answer = await rawExchange(
          port,
          `${method} /m HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n`,
          100,
        )
        seen.push(
          `${path}: ${statuses(answer).join(',') || 'closed'} upstream ${
            upstream.requests
              .slice(before)
              .map((r) => r.method)
              .join(',') || '-'
          }`,
        )
      }
      answers[method] = seen.join(' | ')
      expect(seen[0]?.replace('lean: ', ''), method).toBe(seen[1]?.replace('node: ', ''))
      if (method !== 'CONNECT' && method !== 'PRI') expect(seen[0], method).toContain(`upstream ${method}`)
    }
    expect(answers.QUERY).toBe('lean: 200 upstream QUERY | node: 200 upstream QUERY')
  }, 60_000)
})
