// The lean upstream pool (src/gateway/http/lean/upstream-pool.ts) against undici's Pool, on scripted raw-TCP
// upstreams: the same handler must see the same response, or the same failure, from both; and the
// pool's own rules (reuse, idle times, the connection cap) hold.
import { once } from 'node:events'
import net from 'node:net'
import { Pool } from 'undici'
import type { Dispatcher } from 'undici'
import { afterEach, describe, expect, it } from 'vitest'
import { responseBinding } from '../../src/gateway/http/lean/llhttp.js'
import { LeanPool } from '../../src/gateway/http/lean/upstream-pool.js'
import { requestHead } from '../../src/gateway/http/lean/upstream-request.js'
import { classify, dispatchOptions, type Outgoing } from '../../src/gateway/http/upstream.js'

const closers: (() => Promise<unknown> | void)[] = []
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close()
})

/** A raw upstream: `answer` writes the bytes of each request's response on its socket. */
async function scripted(answer: (socket: net.Socket, request: string, index: number) => void) {
  const state = { connections: 0, open: 0, maxOpen: 0, requests: [] as string[] }
  const sockets = new Set<net.Socket>()
  const server = net.createServer((socket) => {
    state.connections++
    state.open++
    state.maxOpen = Math.max(state.maxOpen, state.open)
    sockets.add(socket)
    socket.on('close', () => {
      state.open--
      sockets.delete(socket)
    })
    socket.on('error', () => {})
    let buffered = ''
    socket.on('data', (chunk) => {
      buffered += chunk.toString('latin1')
      let end = buffered.indexOf('\r\n\r\n')
      while (end >= 0) {
        const request = buffered.slice(0, end + 4)
        buffered = buffered.slice(end + 4)
        state.requests.push(request)
        answer(socket, request, state.requests.length - 1)
        end = buffered.indexOf('\r\n\r\n')
      }
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  closers.push(() => {
    for (const socket of sockets) socket.destroy()
    return new Promise((resolve) => server.close(resolve))
  })
  return { port: (server.address() as net.AddressInfo).port, state }
}

interface Outcome {
  status?: number
  headers?: Record<string, string | string[] | undefined>
  body: string
  error?: string
}

/** A handler as WebForward uses the API: what it saw, once the response ended or failed. */
function collect(options: { pauseOnData?: boolean } = {}) {
  const outcome: Outcome = { body: '' }
  let settle!: (value: Outcome) => void
  const done = new Promise<Outcome>((resolve) => (settle = resolve))
  const handler: Dispatcher.DispatchHandler = {
    onRequestStart() {},
    onResponseStart(_controller, status, headers) {
      outcome.status = status
      outcome.headers = headers
    },
    onResponseData(controller, chunk) {
      outcome.body += chunk.toString('latin1')
      if (options.pauseOnData) {
        controller.pause()
        setTimeout(() => controller.resume(), 20)
      }
    },
    onResponseEnd() {
      settle(outcome)
    },
    onResponseError(_controller, error) {
      outcome.error = classify(error).kind
      settle(outcome)
    },
  }
  return { handler, done }
}

const request = (method = 'GET', path = '/x'): Outgoing => ({
  method,
  path,
  headers: ['host', 'up', 'x-a', '1'],
  body: null,
  contentLength: undefined,
})

function leanPool(port: number, connections = 16) {
  const binding = responseBinding()
  if (!binding) throw new Error('no binding')
  const pool = new LeanPool(
    '127.0.0.1',
    port,
    { connections, keepAliveTimeoutMs: 4000, connectTimeoutMs: 1000 },
    binding,
  )
  closers.push(() => pool.close())
  return pool
}

function undiciPool(port: number) {
  const pool = new Pool(`http://127.0.0.1:${port}`, {
    connections: 16,
    pipelining: 1,
    keepAliveTimeout: 4000,
  })
  closers.push(() => pool.destroy())
  return pool
}

/** The same request through both pools: what each handler saw. */
async function both(
  answer: (socket: net.Socket, request: string, index: number) => void,
  method = 'GET',
  timeoutMs = 1000,
) {
  const upstream = await scripted(answer)
  const lean = collect()
  leanPool(upstream.port).dispatch(request(method), timeoutMs, lean.handler)
  const viaLean = await lean.done
  const undici = collect()
  undiciPool(upstream.port).dispatch(dispatchOptions(request(method), timeoutMs), undici.handler)
  const viaUndici = await undici.done
  return { lean: viaLean, undici: viaUndici, upstream }
}

const CASES: [string, string, string][] = [
  [
    'a Content-Length body',
    'GET',
    'HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-B: 1\r\nx-b: 2\r\nSet-Cookie: a\r\n\r\nhello',
  ],
  [
    'a chunked body',
    'GET',
    'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n',
  ],
  ['a body that ends with the connection', 'GET', 'HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil close'],
  ['HEAD with a length', 'HEAD', 'HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n'],
  ['204', 'GET', 'HTTP/1.1 204 No Content\r\n\r\n'],
  [
    '103 then 200',
    'GET',
    'HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok',
  ],
  ['a 204 with a body (broken)', 'GET', 'HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nhello'],
  ['a body shorter than its length, then close', 'GET', 'HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello'],
  [
    'an unsolicited 100',
    'GET',
    'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok',
  ],
  ['garbage', 'GET', 'HELLO THERE\r\n\r\n'],
  [
    'an upgrade nobody asked for',
    'GET',
    'HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: x\r\n\r\n',
  ],
]

describe('lean upstream pool: what undici makes of the same bytes', () => {
  it('finds the response parser it needs on this Node', () => {
    expect(responseBinding()).not.toBeNull()
  })

  it.each(CASES)('%s', async (_name, method, bytes) => {
    const { lean, undici } = await both((socket) => {
      socket.write(bytes)
      if (!bytes.includes('Content-Length: 5\r\n\r\n') || bytes.includes('204')) socket.end()
    }, method)
    expect(lean).toEqual(undici)
  })

  it("a 304 with the representation's Content-Length is a 304 (RFC 9110 §8.6; undici takes it as broken)", async () => {
    const { lean, undici } = await both((socket) =>
      socket.write('HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n'),
    )
    expect(lean).toEqual({ status: 304, headers: { 'content-length': '99' }, body: '' })
    expect(undici.error).toBe('other')
  })

  it('an upstream silent past the timeout: a timeout (504), before the headers and between body bytes', async () => {
    const silent = await both(() => {}, 'GET', 200)
    expect(silent.lean).toEqual(silent.undici)
    expect(silent.lean.error).toBe('timeout')
    const stalls = await both(
      (socket) => socket.write('HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello'),
      'GET',
      200,
    )
    expect(stalls.lean.error).toBe('timeout')
    expect(stalls.lean).toEqual(stalls.undici)
  })

  it('a refused connection: refused (502)', async () => {
    const upstream = await scripted(() => {})
    const port = upstream.port
    await new Promise<void>((resolve) => void Promise.resolve(closers.pop()?.()).then(() => resolve()))
    const lean = collect()
    leanPool(port).dispatch(request(), 1000, lean.handler)
    expect((await lean.done).error).toBe('refused')
  })

  it('sends what undici sends for a bodiless request', async () => {
    const { upstream } = await both((socket) => socket.write('HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n'))
    const [fromLean, fromUndici] = upstream.state.requests
    expect(fromLean).toBe(fromUndici)
    const post = await both((socket) => socket.write('HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n'), 'POST')
    expect(post.upstream.state.requests[0]).toBe(post.upstream.state.requests[1])
    expect(post.upstream.state.requests[0]).toContain('content-length: 0\r\n')
  })

  it('refuses, as undici does, what would break the request line or a header: an error, nothing sent', async () => {
    const upstream = await scripted(() => {})
    for (const bad of [
      { ...request(), path: '/a b' },
      { ...request(), headers: ['x-a', 'one\r\ntwo'] },
      { ...request(), headers: ['x a', '1'] },
    ]) {
      expect(() => requestHead(bad)).toThrow()
      const lean = collect()
      leanPool(upstream.port).dispatch(bad, 1000, lean.handler)
      const undici = collect()
      undiciPool(upstream.port).dispatch(dispatchOptions(bad, 1000), undici.handler)
      expect(await lean.done).toEqual(await undici.done)
      expect((await lean.done).error).toBe('other')
    }
    expect(upstream.state.connections).toBe(0)
  })
})

describe('lean upstream pool: connections', () => {
  const ok = (socket: net.Socket) => socket.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok')

  it('reuses a keep-alive connection, and never one the upstream said it would close', async () => {
    const upstream = await scripted((socket, _request, i) =>
      i === 1
        ? socket.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok')
        : ok(socket),
    )
    const pool = leanPool(upstream.port)
    for (let i = 0; i < 4; i++) {
      const one = collect()
      pool.dispatch(request(), 1000, one.handler)
      expect(await one.done).toMatchObject({ status: 200, body: 'ok' })
      await new Promise((resolve) => setImmediate(resolve))
    }
    // 1st and 2nd on one connection (the 2nd closes it), 3rd and 4th on a second.
    expect(upstream.state.connections).toBe(2)
  })

  it('a connection the upstream closes right after a keep-alive response is not reused, even by a request sent at once', async () => {
    const upstream = await scripted((socket) => {
      ok(socket)
      socket.end()
    })
    const pool = leanPool(upstream.port)
    const outcomes: Outcome[] = []
    await new Promise<void>((resolve) => {
      const next = (left: number) => {
        const one = collect()
        const { onResponseEnd: end, onResponseError: failed } = one.handler
        // The next request leaves in the same turn as the response's end (or failure), as the
        // gateway's next one may.
        one.handler.onResponseEnd = (controller, trailers) => {
          end?.call(one.handler, controller, trailers)
          if (left > 1) next(left - 1)
        }
        one.handler.onResponseError = (controller, error) => {
          failed?.call(one.handler, controller, error)
          if (left > 1) next(left - 1)
        }
        void one.done.then((outcome) => {
          outcomes.push(outcome)
          if (outcomes.length === 3) resolve()
        })
        pool.dispatch(request(), 1000, one.handler)
      }
      next(3)
    })
    expect(outcomes.map((o) => o.status)).toEqual([200, 200, 200])
    expect(upstream.state.connections).toBe(3)
  })

  it("closes an idle connection 2 s before the upstream's own Keep-Alive timeout", async () => {
    const upstream = await scripted((socket) =>
      socket.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\nKeep-Alive: timeout=2\r\n\r\nok'),
    )
    const pool = leanPool(upstream.port)
    const one = collect()
    pool.dispatch(request(), 1000, one.handler)
    await one.done
    // timeout=2 leaves no time at all: not kept.
    await new Promise((resolve) => setTimeout(resolve, 50))
    expect(pool.connected).toBe(0)
  })

  it('holds at most `connections` sockets; the rest wait in order and all complete', async () => {
    const upstream = await scripted((socket) => setTimeout(() => ok(socket), 20))
    const pool = leanPool(upstream.port, 2)
    const all = Array.from({ length: 7 }, () => collect())
    for (const one of all) pool.dispatch(request(), 1000, one.handler)
    const outcomes = await Promise.all(all.map((one) => one.done))
    expect(outcomes.every((o) => o.status === 200 && o.body === 'ok')).toBe(true)
    expect(upstream.state.maxOpen).toBe(2)
  })

  it('a paused response resumes, and its socket is reused after', async () => {
    const upstream = await scripted((socket) =>
      socket.write(`HTTP/1.1 200 OK\r\nContent-Length: 200000\r\n\r\n${'x'.repeat(200000)}`),
    )
    const pool = leanPool(upstream.port)
    for (let i = 0; i < 2; i++) {
      const one = collect({ pauseOnData: true })
      pool.dispatch(request(), 1000, one.handler)
      expect((await one.done).body.length).toBe(200000)
      await new Promise((resolve) => setImmediate(resolve))
    }
    expect(upstream.state.connections).toBe(1)
  })

  it('an abort destroys the socket and reports the reason to the handler, once', async () => {
    const upstream = await scripted(() => {})
    const pool = leanPool(upstream.port)
    const errors: Error[] = []
    let controller: Dispatcher.DispatchController | undefined
    pool.dispatch(request(), 5000, {
      onRequestStart: (c) => (controller = c),
      onResponseError: (_c, error) => errors.push(error),
    })
    await new Promise((resolve) => setTimeout(resolve, 50))
    controller?.abort(new Error('client left'))
    controller?.abort(new Error('again'))
    await new Promise((resolve) => setTimeout(resolve, 50))
    expect(errors.map((e) => e.message)).toEqual(['client left'])
    expect(upstream.state.open).toBe(0)
    expect(pool.connected).toBe(0)
  })
})

describe('lean upstream pool: a hostile upstream', () => {
  const ok = (socket: net.Socket, body = 'ok') =>
    socket.write(`HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\n\r\n${body}`)

  it.each([
    ['a header named constructor', 'HTTP/1.1 200 OK\r\nConstructor: x\r\nContent-Length: 2\r\n\r\nok'],
    ['a header named __proto__', 'HTTP/1.1 200 OK\r\n__proto__: x\r\nContent-Length: 2\r\n\r\nok'],
    [
      'a Keep-Alive timeout of 400 digits',
      `HTTP/1.1 200 OK\r\nKeep-Alive: timeout=${'9'.repeat(400)}\r\nContent-Length: 2\r\n\r\nok`,
    ],
    [
      '40 header lines',
      `HTTP/1.1 200 OK\r\n${Array.from({ length: 40 }, (_, i) => `X-${i}: ${i}\r\n`).join('')}Content-Length: 2\r\n\r\nok`,
    ],
  ])('%s: what undici makes of it, and the process lives', async (_name, bytes) => {
    const { lean, undici } = await both((socket) => socket.write(bytes))
    expect(lean).toEqual(undici)
  })

  it('a status below 100 is a failure, as undici (which reports its head first, to no effect)', async () => {
    const { lean, undici } = await both((socket) =>
      socket.write('HTTP/1.1 099 Odd\r\nContent-Length: 2\r\n\r\nok'),
    )
    expect(undici.error).toBeDefined()
    expect(lean).toEqual({ body: '', error: undici.error })
  })

  it.each([
    [
      'a second response in the same write',
      (s: net.Socket) =>
        s.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 500 Smuggled\r\nX-Stray: '),
    ],
    [
      'a second response a moment later',
      (s: net.Socket) => {
        ok(s)
        // The start of a head, while the socket is idle: the rest would come after the next request.
        setTimeout(() => s.write('HTTP/1.1 500 Stray\r\nX-Stray: '), 5)
      },
    ],
  ])('%s never answers the next request: that socket is not reused', async (_name, first) => {
    const upstream = await scripted((socket, _request, i) => (i === 0 ? first(socket) : ok(socket, 'mine')))
    const pool = leanPool(upstream.port)
    const one = collect()
    pool.dispatch(request(), 1000, one.handler)
    expect(await one.done).toMatchObject({ status: 200, body: 'ok' })
    await new Promise((resolve) => setTimeout(resolve, 30))
    const two = collect()
    pool.dispatch(request(), 1000, two.handler)
    expect(await two.done).toMatchObject({ status: 200, body: 'mine' })
    expect(upstream.state.connections).toBe(2)
  })

  it('never reuses the socket of a HEAD (a body sent anyway would answer the next request)', async () => {
    const upstream = await scripted((socket, _request, i) => {
      if (i === 0) {
        socket.write('HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 36\r\n\r\n')
        // A "body" after the HEAD's head, itself a response, late enough to meet the next request.
        setTimeout(() => socket.write('HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil'), 30)
      } else setTimeout(() => ok(socket, 'mine'), 60)
    })
    const pool = leanPool(upstream.port)
    const head = collect()
    pool.dispatch(request('HEAD'), 1000, head.handler)
    expect(await head.done).toMatchObject({ status: 200, body: '' })
    await new Promise((resolve) => setTimeout(resolve, 10))
    const next = collect()
    pool.dispatch(request(), 1000, next.handler)
    expect(await next.done).toMatchObject({ status: 200, body: 'mine' })
  })

  it('a head dripped a byte at a time is still bound by the headers timeout (one deadline, as undici)', async () => {
    const text = 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok'
    const upstream = await scripted((socket) => {
      let i = 0
      const timer = setInterval(
        () => (i < text.length ? socket.write(text[i++] as string) : clearInterval(timer)),
        100,
      )
      socket.on('close', () => clearInterval(timer))
    })
    const one = collect()
    const started = Date.now()
    leanPool(upstream.port).dispatch(request(), 500, one.handler)
    expect((await one.done).error).toBe('timeout')
    expect(Date.now() - started).toBeLessThan(1500)
  })

  it('no body timeout while the handler holds the response back (as undici)', async () => {
    const body = 'x'.repeat(100_000)
    const upstream = await scripted((socket) => ok(socket, body))
    const outcome: Outcome = { body: '' }
    const done = new Promise<Outcome>((resolve) => {
      let held = false
      leanPool(upstream.port).dispatch(request(), 200, {
        onResponseStart: (_c, status) => void (outcome.status = status),
        onResponseData(controller, chunk) {
          outcome.body += chunk.toString('latin1')
          if (!held) {
            held = true
            controller.pause()
            setTimeout(() => controller.resume(), 600) // three times the timeout
          }
        },
        onResponseEnd: () => resolve(outcome),
        onResponseError: (_c, error) => resolve({ ...outcome, error: classify(error).kind }),
      })
    })
    const result = await done
    expect(result.error).toBeUndefined()
    expect(result.body.length).toBe(body.length)
  })

  it('close() lets queued requests finish, as undici', async () => {
    const upstream = await scripted((socket) => setTimeout(() => ok(socket), 30))
    const pool = leanPool(upstream.port, 1)
    const all = Array.from({ length: 4 }, () => collect())
    for (const one of all) pool.dispatch(request(), 1000, one.handler)
    const closed = pool.close()
    const outcomes = await Promise.all(all.map((one) => one.done))
    expect(outcomes.map((o) => o.status)).toEqual([200, 200, 200, 200])
    await closed
    expect(pool.connected).toBe(0)
  })
})
