// The lean front end (src/gateway/http/lean/front-end.ts) against Node's http.Server, on raw sockets: the same
// handler behind a plain http.Server and behind the lean path must put the same bytes on the wire
// (Date aside), and everything the lean path does not serve must reach Node exactly as before.
import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import { once } from 'node:events'
import http from 'node:http'
import { afterEach, describe, expect, it } from 'vitest'
import type { ClientRequest, ClientResponse } from '../../src/gateway/http/client.js'
import { leanFrontEnd, readAheadHeld } from '../../src/gateway/http/lean/front-end.js'
import { liveParsers, nodeBinding } from '../../src/gateway/http/lean/llhttp.js'
import { LeanRequest } from '../../src/gateway/http/lean/request.js'
import { rawConnect, rawExchange, statuses } from '../helpers/raw-http.js'

const servers: http.Server[] = []
afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  }
})

/** Responses of GET /held, answered by release(). */
const held: ClientResponse[] = []
function release(): void {
  for (const res of held.splice(0)) {
    res.writeHead(200, { 'content-length': 4 })
    res.end('held')
  }
}

/** What the handler saw of each request: lean or Node's, method and url. */
interface Seen {
  lean: boolean
  method: string | undefined
  url: string | undefined
  headers: http.IncomingHttpHeaders
}

/** Responses written the ways the gateway writes them (plain-request.ts, exchange.ts, proxy.ts). */
function handler(seen: Seen[]) {
  return (req: ClientRequest, res: ClientResponse): void => {
    seen.push({ lean: req instanceof LeanRequest, method: req.method, url: req.url, headers: req.headers })
    const path = req.url ?? '/'
    if (path === '/plain') {
      res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8', 'content-length': 3, 'x-a': 'b' })
      res.end('ok\n')
    } else if (path === '/list') {
      // No length: chunked, as the proxy relays an upstream that sent none.
      res.writeHead(200, ['x-one', '1', 'set-cookie', ['a=1', 'b=2'], 'content-type', 'text/plain'])
      res.write(Buffer.from('hello'))
      res.write('')
      res.end(' world')
    } else if (path === '/streamed') {
      res.writeHead(201, ['content-length', '10'])
      res.write(Buffer.from('01234'))
      setTimeout(() => {
        res.write(Buffer.from('56789'))
        res.end()
      }, 5)
    } else if (path === '/no-content') {
      res.writeHead(204, { 'x-request-id': 'r1' })
      res.end()
    } else if (path === '/not-modified') {
      res.writeHead(304, ['etag', '"x"'])
      res.end()
    } else if (path === '/close') {
      res.writeHead(503, { 'content-length': 5, connection: 'close' })
      res.end('busy\n')
    } else if (path === '/draining') {
      res.setHeader('connection', 'close')
      res.writeHead(200, ['content-length', '2', 'x-b', 'c'])
      res.end('ok')
    } else if (path === '/own-keep-alive') {
      res.writeHead(200, { 'content-length': 0, 'keep-alive': 'timeout=9' })
      res.end()
    } else if (path === '/end-only') {
      res.end('abc')
    } else if (path === '/odd-status') {
      res.writeHead(799, { 'content-length': 0 })
      res.end()
    } else if (path === '/slow') {
      setTimeout(() => {
        res.writeHead(200, { 'content-length': 4 })
        res.end('slow')
      }, 300)
    } else if (path === '/held') {
      held.push(res)
    } else if (path === '/hang') {
      // never answers
    } else {
      res.writeHead(404, { 'content-length': 0 })
      res.end()
    }
  }
}

async function serve(
  lean: boolean,
  seen: Seen[] = [],
): Promise<{ port: number; server: http.Server; seen: Seen[] }> {
  const handle = handler(seen)
  // Node checks its header and request timeouts this often (30 s by default).
  const server = http.createServer({ connectionsCheckingInterval: 50 }, (req, res) => handle(req, res))
  if (lean) expect(leanFrontEnd(server, handle)).toBeDefined()
  servers.push(server)
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  return { port: (server.address() as { port: number }).port, server, seen }
}

const undated = (text: string) => text.replace(/\r\nDate: [^\r]+/g, '\r\nDate: -')

/**
 * The responses in `text` with each chunked body re-framed as one chunk: chunk boundaries carry no
 * meaning (RFC 9112, 7.1), and Node 26's http.Server merges the chunks written in one tick where
 * Node 20 to 25 did not (scripts/test-node-majors.mjs found it). Everything else stays byte for byte;
 * a body that is not valid chunking is left as it is.
 */
function rechunked(text: string): string {
  let out = ''
  let at = 0
  while (at < text.length) {
    const headEnd = text.indexOf('\r\n\r\n', at)
    if (headEnd < 0) return out + text.slice(at)
    const head = text.slice(at, headEnd + 4)
    out += head
    at = headEnd + 4
    if (!/\r\nTransfer-Encoding: chunked\r\n/i.test(head)) {
      const length = /\r\nContent-Length: (\d+)\r\n/i.exec(head)
      if (!length) continue
      out += text.slice(at, at + Number(length[1]))
      at += Number(length[1])
      continue
    }
    let body = ''
    let pos = at
    for (;;) {
      const lineEnd = text.indexOf('\r\n', pos)
      const size = lineEnd < 0 ? Number.NaN : Number.parseInt(text.slice(pos, lineEnd), 16)
      if (!Number.isFinite(size)) return out + text.slice(at)
      pos = lineEnd + 2
      if (size === 0) {
        pos += 2 // the CRLF after the last chunk (no trailers here)
        break
      }
      body += text.slice(pos, pos + size)
      pos += size + 2
    }
    out +=
      (body.length > 0 ? `${Buffer.byteLength(body, 'latin1').toString(16)}\r\n${body}\r\n` : '') +
      '0\r\n\r\n'
    at = pos
  }
  return out
}

/** The same bytes to Node and to the lean path: the same bytes back, and who served what. */
async function both(text: string, quietMs = 150) {
  const node = await serve(false)
  const lean = await serve(true)
  const [fromNode, fromLean] = await Promise.all([
    rawExchange(node.port, text, quietMs),
    rawExchange(lean.port, text, quietMs),
  ])
  return { node: rechunked(undated(fromNode)), lean: rechunked(undated(fromLean)), seen: lean.seen }
}

const get = (path: string, extra = '') => `GET ${path} HTTP/1.1\r\nHost: x\r\n${extra}\r\n`

describe('lean front end: the bytes Node would write', () => {
  it('finds the binding it needs on this Node', () => {
    expect(nodeBinding()).not.toBeNull()
  })

  it.each([
    '/plain',
    '/list',
    '/streamed',
    '/no-content',
    '/not-modified',
    '/close',
    '/draining',
    '/end-only',
    '/own-keep-alive',
    '/odd-status',
    '/missing',
  ])('GET %s: same response as http.Server, served by the lean path', async (path) => {
    const { node, lean, seen } = await both(get(path))
    expect(lean).toBe(node)
    expect(statuses(lean).length).toBe(1)
    expect(seen.map((s) => s.lean)).toEqual([true])
  })

  it('HEAD: the head only, as http.Server', async () => {
    for (const path of ['/plain', '/list', '/end-only']) {
      const { node, lean, seen } = await both(`HEAD ${path} HTTP/1.1\r\nHost: x\r\n\r\n`)
      expect(lean).toBe(node)
      expect(seen[0]?.lean).toBe(true)
    }
  })

  it('a client Connection: close gets Connection: close and the connection closed after', async () => {
    const { node, lean } = await both(get('/plain', 'Connection: close\r\n') + get('/plain'))
    expect(lean).toBe(node)
    expect(statuses(lean)).toEqual([200])
  })

  it("headers as IncomingMessage reads them: duplicates joined, dropped or listed by Node's rules", async () => {
    const { seen } = await both(
      get(
        '/plain',
        'X-A: 1\r\nx-a: 2\r\nCookie: a=1\r\ncookie: b=2\r\nUser-Agent: one\r\nuser-agent: two\r\n',
      ),
    )
    expect(seen[0]?.lean).toBe(true)
    const node = await serve(false)
    await rawExchange(
      node.port,
      get(
        '/plain',
        'X-A: 1\r\nx-a: 2\r\nCookie: a=1\r\ncookie: b=2\r\nUser-Agent: one\r\nuser-agent: two\r\n',
      ),
      150,
    )
    expect(seen[0]?.headers).toEqual(node.seen[0]?.headers)
    expect(seen[0]?.headers).toMatchObject({ 'x-a': '1, 2', cookie: 'a=1; b=2', 'user-agent': 'one' })
  })

  it('pipelined requests are answered in order, one response each, the slow one first', async () => {
    const text = get('/slow') + get('/plain') + get('/list') + get('/no-content')
    const { node, lean, seen } = await both(text, 500)
    expect(lean).toBe(node)
    expect(statuses(lean)).toEqual([200, 200, 200, 204])
    expect(seen.map((s) => s.url)).toEqual(['/slow', '/plain', '/list', '/no-content'])
    expect(seen.every((s) => s.lean)).toBe(true)
  })

  it('a read-ahead past 64 KB, in small reads, goes back to the socket: the same answers as http.Server, in order', async () => {
    // 70 requests of ~1 KB behind a held one, then one with a body (Node's), then a lean one again.
    const behind =
      get('/plain', `X-Pad: ${'p'.repeat(1000)}\r\n`).repeat(70) +
      'POST /plain HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc' +
      get('/list')
    const run = async (lean: boolean) => {
      const { port, seen } = await serve(lean)
      const client = await rawConnect(port)
      client.socket.setNoDelay(true)
      client.write(get('/held'))
      while (held.length === 0) await new Promise((resolve) => setTimeout(resolve, 5))
      let most = 0
      for (let at = 0; at < behind.length; at += 100) {
        await new Promise((resolve) => client.socket.write(behind.slice(at, at + 100), resolve))
        await new Promise((resolve) => setTimeout(resolve, 1)) // each piece its own read
        most = Math.max(most, readAheadHeld().bytes)
      }
      const kept = readAheadHeld().bytes
      release()
      return { text: rechunked(undated(await client.waitFor(/world\r\n0\r\n\r\n$/))), seen, most, kept }
    }
    const node = await run(false)
    const lean = await run(true)
    // Read ahead up to 64 KB (copied into blocks), then handed back: the socket holds it, not the
    // lean path, and reads nothing more until the held response is done.
    expect(lean.most).toBeGreaterThan(60 * 1024)
    expect(lean.most).toBeLessThanOrEqual(64 * 1024 + 100)
    expect(lean.kept).toBe(0)
    expect(lean.text).toBe(node.text)
    expect(statuses(lean.text)).toEqual(Array.from({ length: 73 }, () => 200))
    expect(lean.seen.map((s) => `${s.method} ${s.url}`)).toEqual(node.seen.map((s) => `${s.method} ${s.url}`))
    // Lean while whole heads are at hand (the first 64 KB: 60 requests and more), Node's from the body on
    // (from a head cut where the read-ahead ended, when the rest is still in the kernel).
    expect(lean.seen.slice(0, 60).every((s) => s.lean)).toBe(true)
    expect(lean.seen.slice(71).some((s) => s.lean)).toBe(false)
  })
})

describe("lean front end: what is not lean is Node's, from the first byte of that request", () => {
  it.each([
    ['a body', 'POST /plain HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc'],
    [
      'a chunked body',
      'POST /plain HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n',
    ],
    [
      'Expect: 100-continue',
      'POST /plain HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nExpect: 100-continue\r\n\r\nx',
    ],
    ['Expect: 100-continue without a body', get('/plain', 'Expect: 100-continue\r\n')],
    ['an Expect Node does not know (417)', get('/plain', 'Expect: teapot\r\n')],
    ['HTTP/1.0', 'GET /plain HTTP/1.0\r\n\r\n'],
    ['no Host', 'GET /plain HTTP/1.1\r\n\r\n'],
    ['an upgrade', 'GET /plain HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n'],
    ['a malformed head', 'GET /plain HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n'],
    ['obs-fold', 'GET /plain HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n 2\r\n\r\n'],
    ['a bare LF', 'GET /plain HTTP/1.1\nHost: x\n\n'],
    [
      'Content-Length with Transfer-Encoding',
      'GET /plain HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n',
    ],
    [
      'two Content-Lengths',
      'GET /plain HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n',
    ],
    ['40 header lines', get('/plain', Array.from({ length: 40 }, (_, i) => `X-${i}: ${i}\r\n`).join(''))],
    ['a head over maxHeaderSize', get('/plain', `X-Big: ${'a'.repeat(http.maxHeaderSize)}\r\n`)],
    ['CONNECT', 'CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n'],
  ])('%s: same answer as http.Server (after a lean request on the same connection)', async (_name, text) => {
    const node = await serve(false)
    const lean = await serve(true)
    // The second request is sent once the first is answered: Node answers a bad head with 400 only
    // when no response is in flight, so both servers are asked the same way.
    const [fromNode, fromLean] = await Promise.all([afterOne(node.port, text), afterOne(lean.port, text)])
    expect(undated(fromLean)).toBe(undated(fromNode))
    expect(lean.seen[0]?.lean).toBe(true)
    expect(lean.seen.slice(1).every((s) => !s.lean)).toBe(true)
    expect(lean.seen.length).toBe(node.seen.length)
  })

  it('a head that arrives in pieces (a slow client) is left to Node, and its timeouts', async () => {
    const { port, server, seen } = await serve(true)
    server.headersTimeout = 300
    server.requestTimeout = 300
    const connection = await rawConnect(port)
    connection.write(get('/plain'))
    await connection.waitFor(/ok\n$/)
    connection.write('GET /plain HTTP/1.1\r\nHo')
    await new Promise((resolve) => setTimeout(resolve, 50))
    connection.write('st: x\r\n\r\n')
    await connection.waitFor(/ok\n[^]*ok\n$/)
    expect(seen.map((s) => s.lean)).toEqual([true, false])
    // Node's own header timeout then cuts a head that never completes (408 and close).
    const slow = await rawConnect(port)
    slow.write('GET /plain HTTP/1.1\r\nHost: x\r\n')
    const text = await slow.closed
    expect(statuses(text)).toEqual([408])
  })
})

/** GET /plain, its answer, then `text` on the same connection: everything received. */
async function afterOne(port: number, text: string): Promise<string> {
  const connection = await rawConnect(port)
  connection.write(get('/plain'))
  await connection.waitFor(/ok\n$/)
  connection.write(text)
  await Promise.race([connection.closed, new Promise((resolve) => setTimeout(resolve, 300))])
  connection.socket.destroy()
  return connection.received()
}

describe('lean front end: connections', () => {
  it('closes an idle connection when http.Server does (Keep-Alive time + 1 s), not a busy one', async () => {
    const idleFor = async (lean: boolean) => {
      const { port, server } = await serve(lean)
      server.keepAliveTimeout = 200
      const idle = await rawConnect(port)
      idle.write(get('/plain'))
      await idle.waitFor(/ok\n$/)
      const started = Date.now()
      await idle.closed
      return Date.now() - started
    }
    const [node, lean] = await Promise.all([idleFor(false), idleFor(true)])
    expect(node).toBeGreaterThanOrEqual(1100)
    expect(Math.abs(lean - node)).toBeLessThan(300)
    // A request slower than the idle timeout is answered.
    const { port, server } = await serve(true)
    server.keepAliveTimeout = 100
    const busy = await rawConnect(port)
    busy.write(get('/slow'))
    expect(statuses(await busy.waitFor(/slow$/))).toEqual([200])
  })

  it("a connection that never sends a head: kept past the Keep-Alive time, then http.Server's 408 at headersTimeout", async () => {
    const silentFor = async (lean: boolean) => {
      const { port, server } = await serve(lean)
      server.keepAliveTimeout = 100
      server.headersTimeout = 600
      const silent = await rawConnect(port)
      const started = Date.now()
      const text = await silent.closed
      return { ms: Date.now() - started, text }
    }
    const [node, lean] = await Promise.all([silentFor(false), silentFor(true)])
    expect(lean.text).toBe(node.text)
    expect(statuses(lean.text)).toEqual([408])
    expect(lean.ms).toBeGreaterThanOrEqual(500)
    expect(Math.abs(lean.ms - node.ms)).toBeLessThan(300)
  })

  it('draining: a new connection that has not sent its first request yet is kept or cut, as http.Server on this Node', async () => {
    const drained = async (lean: boolean) => {
      const { port, server } = await serve(lean)
      const fresh = await rawConnect(port)
      await new Promise((resolve) => setTimeout(resolve, 50))
      server.closeIdleConnections()
      fresh.write(get('/plain'))
      return fresh.waitFor(/ok\n$/).then(statuses, () => 'cut')
    }
    // Node 20 to 25 keep such a connection; Node 26's http.Server counts it idle and cuts it. The lean
    // front end does what http.Server does on the Node it runs on.
    const expected = Number(process.versions.node.split('.')[0]) >= 26 ? 'cut' : [200]
    expect(await drained(false)).toEqual(expected)
    expect(await drained(true)).toEqual(expected)
  })

  it("draining: a connection whose response ends is idle in that response's close (closed there, as http.Server)", async () => {
    const closedAfter = async (lean: boolean) => {
      const handle = handler([])
      const server = http.createServer((req, res) => handle(req, res))
      const front = (req: ClientRequest, res: ClientResponse) => {
        // What the gateway does while draining: close idle connections when a response closes.
        res.once('close', () => server.closeIdleConnections())
        handle(req, res)
      }
      server.removeAllListeners('request')
      server.on('request', front)
      if (lean) leanFrontEnd(server, front)
      servers.push(server)
      server.listen(0, '127.0.0.1')
      await once(server, 'listening')
      const connection = await rawConnect((server.address() as { port: number }).port)
      connection.write(get('/slow'))
      await connection.waitFor(/slow$/)
      const answered = Date.now()
      const text = await connection.closed
      return { statuses: statuses(text), closedAfterMs: Date.now() - answered }
    }
    const [node, lean] = await Promise.all([closedAfter(false), closedAfter(true)])
    expect(lean.statuses).toEqual(node.statuses)
    // At once, not after the Keep-Alive time (5 s).
    expect(node.closedAfterMs).toBeLessThan(1000)
    expect(lean.closedAfterMs).toBeLessThan(1000)
  })

  it("a diagnostics_channel subscriber (APM) sees every request: its connections are http.Server's", async () => {
    const started: unknown[] = []
    const listener = (message: unknown) => started.push(message)
    subscribe('http.server.request.start', listener)
    try {
      const { port, seen } = await serve(true)
      expect(statuses(await rawExchange(port, get('/plain') + get('/plain'), 150))).toEqual([200, 200])
      expect(seen.map((s) => s.lean)).toEqual([false, false])
      expect(started.length).toBe(2)
    } finally {
      unsubscribe('http.server.request.start', listener)
    }
  })

  it('closes the native parser of every connection it served or handed over', async () => {
    const { port } = await serve(true)
    const before = liveParsers()
    for (let i = 0; i < 20; i++) {
      const connection = await rawConnect(port)
      connection.write(
        i % 2 === 0 ? get('/plain') : 'POST /plain HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx',
      )
      await connection.waitFor(/ok\n$/)
      connection.socket.destroy()
      await connection.closed
    }
    await new Promise((resolve) => setTimeout(resolve, 100))
    expect(liveParsers()).toBe(before)
  })

  it('a client that closes its side mid-request ends the response (close without finish), once', async () => {
    const seen: Seen[] = []
    const closes: boolean[] = []
    const handle = handler(seen)
    const server = http.createServer()
    leanFrontEnd(server, (req, res) => {
      res.once('close', () => closes.push(res.writableFinished))
      handle(req, res)
    })
    servers.push(server)
    server.listen(0, '127.0.0.1')
    await once(server, 'listening')
    const connection = await rawConnect((server.address() as { port: number }).port)
    connection.write(get('/hang'))
    await new Promise((resolve) => setTimeout(resolve, 50))
    connection.socket.end()
    await connection.closed
    await new Promise((resolve) => setTimeout(resolve, 50))
    expect(seen.map((s) => s.lean)).toEqual([true])
    expect(closes).toEqual([false])
  })

  it('closeIdleConnections() and closeAllConnections() reach lean connections too', async () => {
    const { port, server } = await serve(true)
    const idle = await rawConnect(port)
    idle.write(get('/plain'))
    await idle.waitFor(/ok\n$/)
    const busy = await rawConnect(port)
    busy.write(get('/hang'))
    await new Promise((resolve) => setTimeout(resolve, 50))
    server.closeIdleConnections()
    await idle.closed
    expect(busy.socket.destroyed).toBe(false)
    server.closeAllConnections()
    await busy.closed
  })
})
