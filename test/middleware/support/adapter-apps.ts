// One app per adapter (Express 5 and 4, Koa 3 and 2, Fastify 5, Hono 4 on @hono/node-server), each a
// real HTTP server on 127.0.0.1:0 with Tollgate in front of the same probe routes. The probe counts the
// handlers' own concurrency: the independent observer of the cap.
import { once } from 'node:events'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { PassThrough } from 'node:stream'
import { createAdaptorServer } from '@hono/node-server'
import Router from '@koa/router'
import express5 from 'express'
import express4 from 'express4'
import Fastify from 'fastify'
import { Hono } from 'hono'
import Koa3 from 'koa'
import Koa2 from 'koa2'
import { afterEach } from 'vitest'
import type { AdmissionCounters, Rejection, TollgateInfo } from '../../../src/middleware/express.js'
import * as tgExpress from '../../../src/middleware/express.js'
import * as tgFastify from '../../../src/middleware/fastify.js'
import * as tgHono from '../../../src/middleware/hono.js'
import * as tgKoa from '../../../src/middleware/koa.js'

export type Adapter = 'express' | 'express4' | 'koa' | 'koa2' | 'fastify' | 'hono'
export const ADAPTERS: readonly Adapter[] = ['express', 'express4', 'koa', 'koa2', 'fastify', 'hono']

export interface Probe {
  /** Handlers running now, the most at once, and how many started. */
  inside: number
  max: number
  entered: number
  /** Ids (the `id` query parameter) in the order their handlers started. */
  order: string[]
  fences: number[]
  /** One per handler of /hold or /stream-hold waiting for the test: call it to let the handler end. */
  holders: (() => void)[]
  /** Server-side sockets closed so far (to know the server saw a client leave). */
  socketsClosed: number
}

export interface AdapterApp {
  adapter: Adapter
  url: string
  port: number
  probe: Probe
  counters: AdmissionCounters
  /** onRejected hook calls (the app's own hook, wrapping any the test passed), and the reasons it saw. */
  rejectedHook: number
  hookReasons: string[]
}

export interface AppSetup {
  /** Tollgate options, with stand-ins for the framework-specific ones: `key: 'tenant'` is the
   * adapter's own byHeader('x-tenant'), `skip: 'x-skip'` skips requests with that header, and
   * `handler: 'teapot'` answers rejections 418 `custom:<reason>` in the framework's own way;
   * `onRejected: 'answer'` answers them 420 `hook:<reason>` from the hook, the framework's way. */
  options: Record<string, unknown> & {
    key?: 'tenant'
    skip?: 'x-skip'
    handler?: 'teapot'
    onRejected?: 'answer' | ((...args: never[]) => void)
    weight?: 'x-weight'
  }
  /** Mount a second, outer semaphore with these options before the one under test. */
  outer?: Record<string, unknown>
}

const servers = new Set<http.Server>()
const closers = new Set<() => Promise<void>>()
afterEach(async () => {
  await Promise.all(
    [...servers].map(async (server) => {
      servers.delete(server)
      server.closeAllConnections()
      server.close()
      await once(server, 'close').catch(() => {})
    }),
  )
  await Promise.all([...closers].map((close) => close()))
  closers.clear()
})

const wait = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** What every route does, whatever the framework: count itself in the probe. */
class Routes {
  constructor(readonly probe: Probe) {}

  enter(query: URLSearchParams, info: TollgateInfo | null | undefined): void {
    const { probe } = this
    probe.inside++
    probe.entered++
    probe.max = Math.max(probe.max, probe.inside)
    const id = query.get('id')
    if (id !== null) probe.order.push(id)
    if (typeof info?.fencingToken === 'number') probe.fences.push(info.fencingToken)
  }

  leave(): void {
    this.probe.inside--
  }

  /** GET /fast?ms=N: waits N ms (default 5). */
  async fast(query: URLSearchParams, info: TollgateInfo | null | undefined): Promise<string> {
    this.enter(query, info)
    await wait(Number(query.get('ms') ?? 5))
    this.leave()
    return 'ok'
  }

  /** GET /hold: until the test releases it. */
  async hold(query: URLSearchParams, info: TollgateInfo | null | undefined): Promise<string> {
    this.enter(query, info)
    await new Promise<void>((resolve) => this.probe.holders.push(resolve))
    this.leave()
    return 'held'
  }

  /** GET /stream?chunks=N&every=M: N chunks M ms apart; the handler counts until the last byte. */
  stream(
    query: URLSearchParams,
    info: TollgateInfo | null | undefined,
    write: (chunk: string) => void,
    end: () => void,
  ): void {
    this.enter(query, info)
    const chunks = Number(query.get('chunks') ?? 4)
    const every = Number(query.get('every') ?? 20)
    let sent = 0
    const timer = setInterval(() => {
      write(`chunk ${sent}\n`)
      if (++sent >= chunks) {
        clearInterval(timer)
        this.leave()
        end()
      }
    }, every)
  }

  /** GET /stream-hold: headers and a first chunk at once, the rest when the test releases it. */
  streamHold(
    query: URLSearchParams,
    info: TollgateInfo | null | undefined,
    write: (chunk: string) => void,
    end: () => void,
  ): void {
    this.enter(query, info)
    write('start\n')
    this.probe.holders.push(() => {
      this.leave()
      write('end\n')
      end()
    })
  }
}

/** The framework-specific options, the same behaviour in each framework's terms. */
const skipper = {
  express: (req: http.IncomingMessage) => req.headers['x-skip'] !== undefined,
  koa: (ctx: Koa3.Context) => ctx.headers['x-skip'] !== undefined,
  fastify: (request: { headers: http.IncomingHttpHeaders }) => request.headers['x-skip'] !== undefined,
  hono: (c: { req: { header(name: string): string | undefined } }) => c.req.header('x-skip') !== undefined,
} as const
const teapot = {
  express: (_req: unknown, res: http.ServerResponse, _next: unknown, rejection: Rejection) => {
    res.writeHead(418, { 'Content-Type': 'text/plain' })
    res.end(`custom:${rejection.reason}`)
  },
  koa: (ctx: Koa3.Context, _next: unknown, rejection: Rejection) => {
    ctx.status = 418
    ctx.body = `custom:${rejection.reason}`
  },
  fastify: (
    _request: unknown,
    reply: { code(n: number): { send(b: string): unknown } },
    _done: unknown,
    rejection: Rejection,
  ) => reply.code(418).send(`custom:${rejection.reason}`),
  hono: (c: { text(t: string, s: 418): Response }, _next: unknown, rejection: Rejection) =>
    c.text(`custom:${rejection.reason}`, 418),
} as const

/** An onRejected hook that answers, as a user of each framework would write it. */
const answering = {
  express: (_req: unknown, rejection: Rejection, res: http.ServerResponse) => {
    res.writeHead(420, { 'Content-Type': 'text/plain' })
    res.end(`hook:${rejection.reason}`)
  },
  koa: (ctx: Koa3.Context, rejection: Rejection) => {
    ctx.status = 420
    ctx.body = `hook:${rejection.reason}`
  },
  fastify: (
    _request: unknown,
    rejection: Rejection,
    reply: { code(n: number): { send(b: string): unknown } },
  ) => void reply.code(420).send(`hook:${rejection.reason}`),
  hono: (c: { res: Response; text(t: string, s: 420): Response }, rejection: Rejection) => {
    c.res = c.text(`hook:${rejection.reason}`, 420)
  },
} as const

/** The `weight` option from the x-weight header (1 without it), in each framework's terms. */
const weigher = {
  express: (req: http.IncomingMessage) => Number(req.headers['x-weight'] ?? 1),
  koa: (ctx: Koa3.Context) => Number(ctx.headers['x-weight'] ?? 1),
  fastify: (request: { headers: http.IncomingHttpHeaders }) => Number(request.headers['x-weight'] ?? 1),
  hono: (c: { req: { header(name: string): string | undefined } }) => Number(c.req.header('x-weight') ?? 1),
} as const

const tenantKey = {
  express: () => tgExpress.byHeader('x-tenant'),
  koa: () => tgKoa.byHeader('x-tenant'),
  fastify: () => tgFastify.byHeader('x-tenant'),
  hono: () => tgHono.byHeader('x-tenant'),
} as const

function family(adapter: Adapter): keyof typeof tenantKey {
  return adapter === 'express4' ? 'express' : adapter === 'koa2' ? 'koa' : adapter
}

/**
 * An app with Tollgate's semaphore() in front of: GET /fast, /hold, /boom (throws), /stream,
 * /stream-hold. Any request with `?pre=N` first goes through another middleware that waits N ms (to
 * let a client leave before Tollgate runs).
 */
export async function startAdapterApp(adapter: Adapter, setup: AppSetup): Promise<AdapterApp> {
  const probe: Probe = { inside: 0, max: 0, entered: 0, order: [], fences: [], holders: [], socketsClosed: 0 }
  const routes = new Routes(probe)
  const app = { rejectedHook: 0, hookReasons: [] as string[] } as AdapterApp
  const userHook = (
    setup.options.onRejected === 'answer' ? answering[family(adapter)] : setup.options.onRejected
  ) as ((...args: unknown[]) => void) | undefined
  const options = {
    ...setup.options,
    key: setup.options.key === 'tenant' ? tenantKey[family(adapter)]() : undefined,
    skip: setup.options.skip === 'x-skip' ? skipper[family(adapter)] : undefined,
    handler: setup.options.handler === 'teapot' ? teapot[family(adapter)] : undefined,
    weight: setup.options.weight === 'x-weight' ? weigher[family(adapter)] : undefined,
    onRejected: (...args: unknown[]) => {
      app.rejectedHook++
      app.hookReasons.push((args[1] as Rejection).reason)
      userHook?.(...args)
    },
  }
  const prop = (setup.options.requestPropertyName as string | undefined) ?? 'tollgate'
  const pre = (query: URLSearchParams) => wait(Number(query.get('pre') ?? 0))
  let server: http.Server
  let counters: AdmissionCounters
  let fastify: ReturnType<typeof Fastify> | undefined
  switch (family(adapter)) {
    case 'express': {
      const express = (adapter === 'express' ? express5 : express4) as typeof express5
      const x = express()
      const q = (req: express5.Request) => new URL(req.url, 'http://x').searchParams
      const info = (req: express5.Request) => (req as unknown as Record<string, TollgateInfo>)[prop]
      x.use((req, _res, next) => {
        if (q(req).has('pre')) void pre(q(req)).then(() => next())
        else next()
      })
      if (setup.outer) x.use(tgExpress.semaphore(setup.outer as never) as unknown as express5.RequestHandler)
      const mw = tgExpress.semaphore(options as never)
      counters = mw.counters
      x.use(mw as unknown as express5.RequestHandler)
      x.get('/fast', async (req, res) => void res.send(await routes.fast(q(req), info(req))))
      x.get('/hold', async (req, res) => void res.send(await routes.hold(q(req), info(req))))
      x.get('/boom', () => {
        throw new Error('handler failed')
      })
      const streaming =
        (which: 'stream' | 'streamHold') => (req: express5.Request, res: express5.Response) => {
          res.setHeader('Content-Type', 'text/plain')
          routes[which](
            q(req),
            info(req),
            (chunk) => res.write(chunk),
            () => res.end(),
          )
        }
      x.get('/stream', streaming('stream'))
      x.get('/stream-hold', streaming('streamHold'))
      x.use(
        (_error: unknown, _req: express5.Request, res: express5.Response, _next: express5.NextFunction) => {
          res.status(500).send('boom')
        },
      )
      server = http.createServer(x)
      break
    }
    case 'koa': {
      const Koa = (adapter === 'koa' ? Koa3 : Koa2) as typeof Koa3
      const k = new Koa()
      k.silent = true
      const q = (ctx: Koa3.Context) => new URL(ctx.url, 'http://x').searchParams
      k.use(async (ctx, next) => {
        await pre(q(ctx))
        await next()
      })
      if (setup.outer) k.use(tgKoa.semaphore(setup.outer as never) as unknown as Koa3.Middleware)
      const mw = tgKoa.semaphore(options as never)
      counters = mw.counters
      k.use(mw as unknown as Koa3.Middleware)
      const info = (ctx: Koa3.Context) => ctx.state[prop] as TollgateInfo | undefined
      const router = new Router()
      router.get('/fast', async (ctx) => {
        ctx.body = await routes.fast(q(ctx), info(ctx))
      })
      router.get('/hold', async (ctx) => {
        ctx.body = await routes.hold(q(ctx), info(ctx))
      })
      router.get('/boom', () => {
        throw new Error('handler failed')
      })
      const streaming = (which: 'stream' | 'streamHold') => (ctx: Koa3.Context) => {
        const body = new PassThrough()
        ctx.type = 'text/plain'
        ctx.body = body
        routes[which](
          q(ctx),
          info(ctx),
          (chunk) => body.write(chunk),
          () => body.end(),
        )
      }
      router.get('/stream', streaming('stream'))
      router.get('/stream-hold', streaming('streamHold'))
      k.use(router.routes() as unknown as Koa3.Middleware)
      server = http.createServer(k.callback())
      break
    }
    case 'fastify': {
      const f = Fastify({ logger: false })
      const q = (request: { url: string }) => new URL(request.url, 'http://x').searchParams
      const info = (request: object) => (request as Record<string, TollgateInfo>)[prop]
      f.addHook('onRequest', async (request) => {
        await pre(q(request))
      })
      if (setup.outer) await f.register(tgFastify.semaphore(setup.outer as never))
      const plugin = tgFastify.semaphore(options as never)
      counters = plugin.counters
      await f.register(plugin)
      f.get('/fast', async (request) => routes.fast(q(request), info(request)))
      f.get('/hold', async (request) => routes.hold(q(request), info(request)))
      f.get('/boom', async () => {
        throw new Error('handler failed')
      })
      const streaming =
        (which: 'stream' | 'streamHold') =>
        async (
          request: { url: string },
          reply: { type(t: string): unknown; send(body: unknown): unknown },
        ) => {
          const body = new PassThrough()
          routes[which](
            q(request),
            info(request),
            (chunk) => body.write(chunk),
            () => body.end(),
          )
          reply.type('text/plain')
          return reply.send(body)
        }
      f.get('/stream', streaming('stream'))
      f.get('/stream-hold', streaming('streamHold'))
      fastify = f
      server = f.server
      break
    }
    case 'hono': {
      const h = new Hono()
      const q = (url: string) => new URL(url).searchParams
      const info = (c: { get(key: string): unknown }) => c.get(prop) as TollgateInfo
      h.onError((_error, c) => c.text('boom', 500))
      h.use(async (c, next) => {
        await pre(q(c.req.url))
        await next()
      })
      if (setup.outer) h.use(tgHono.semaphore(setup.outer as never))
      const mw = tgHono.semaphore(options as never)
      counters = mw.counters
      h.use(mw)
      h.get('/fast', async (c) => c.text(await routes.fast(q(c.req.url), info(c as never))))
      h.get('/hold', async (c) => c.text(await routes.hold(q(c.req.url), info(c as never))))
      h.get('/boom', () => {
        throw new Error('handler failed')
      })
      const streaming =
        (which: 'stream' | 'streamHold') => (c: { req: { url: string }; get(key: string): unknown }) => {
          const encoder = new TextEncoder()
          const body = new ReadableStream<Uint8Array>({
            start(controller) {
              routes[which](
                q(c.req.url),
                info(c),
                (chunk) => {
                  try {
                    controller.enqueue(encoder.encode(chunk))
                  } catch {
                    // the client left: the stream was cancelled
                  }
                },
                () => {
                  try {
                    controller.close()
                  } catch {
                    // the client left: the stream was cancelled
                  }
                },
              )
            },
          })
          return new Response(body, { headers: { 'Content-Type': 'text/plain' } })
        }
      h.get('/stream', streaming('stream'))
      h.get('/stream-hold', streaming('streamHold'))
      server = createAdaptorServer({ fetch: h.fetch }) as http.Server
      break
    }
  }
  server.on('connection', (socket) => socket.once('close', () => probe.socketsClosed++))
  if (fastify) {
    closers.add(async () => {
      fastify.server.closeAllConnections()
      await fastify.close()
    })
    await fastify.listen({ port: 0, host: '127.0.0.1' })
  } else {
    servers.add(server)
    server.listen(0, '127.0.0.1')
    await once(server, 'listening')
  }
  const { port } = server.address() as AddressInfo
  return Object.assign(app, { adapter, port, url: `http://127.0.0.1:${port}`, probe, counters })
}
