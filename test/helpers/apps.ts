// Real Express and Koa apps on port 0 with the Tollgate middleware in front of probe handlers that
// count their own concurrency (the independent observer of the cap).
import { once } from 'node:events'
import type { AddressInfo } from 'node:net'
import http from 'node:http'
import { PassThrough } from 'node:stream'
import Router from '@koa/router'
import express5 from 'express'
import express4 from 'express4'
import Koa3 from 'koa'
import Koa2 from 'koa2'
import { afterEach } from 'vitest'
import * as tgExpress from '../../src/middleware/express.js'
import * as tgKoa from '../../src/middleware/koa.js'

export type Framework = 'express' | 'koa' | 'express4' | 'koa2'
export const CURRENT: readonly Framework[] = ['express', 'koa']

export interface Probe {
  inside: number
  max: number
  entered: number
  fences: number[]
  /** Writers (non-GET /work and /docs handlers) inside now, and moments a writer was not alone. */
  writers: number
  writerOverlaps: number
  /** Set while a handler of /hold waits to be released by the test. */
  holders: (() => void)[]
}

export interface App {
  url: string
  probe: Probe
  server: http.Server
  counters: tgExpress.AdmissionCounters
}

const servers = new Set<http.Server>()
afterEach(async () => {
  await Promise.all(
    [...servers].map(async (server) => {
      servers.delete(server)
      server.closeAllConnections()
      server.close()
      await once(server, 'close').catch(() => {})
    }),
  )
})

type MiddlewareKind = 'semaphore' | 'rwlock'

/**
 * Routes: GET|PUT /work?ms=N (counts itself, waits N ms), GET /stream?chunks=N&every=M (counts until
 * the last byte), GET /boom (throws), GET /hold (waits until the test calls probe.holders.shift()()),
 * GET /docs/:id and PUT /docs/:id (for rwlock).
 */
export async function startApp(
  framework: Framework,
  options: unknown,
  kind: MiddlewareKind = 'semaphore',
): Promise<App> {
  const probe: Probe = {
    inside: 0,
    max: 0,
    entered: 0,
    fences: [],
    holders: [],
    writers: 0,
    writerOverlaps: 0,
  }
  const enter = (fence: unknown, method = 'GET') => {
    probe.inside++
    if (method !== 'GET') probe.writers++
    if (probe.writers > 0 && probe.inside > 1) probe.writerOverlaps++
    probe.entered++
    probe.max = Math.max(probe.max, probe.inside)
    if (typeof fence === 'number') probe.fences.push(fence)
  }
  const leave = (method = 'GET') => {
    probe.inside--
    if (method !== 'GET') probe.writers--
  }
  const wait = (ms: number) => new Promise((r) => setTimeout(r, ms))
  let server: http.Server
  let counters: tgExpress.AdmissionCounters
  if (framework === 'express' || framework === 'express4') {
    const express = (framework === 'express' ? express5 : express4) as typeof express5
    const app = express()
    app.set('trust proxy', true)
    const mw = (tgExpress as unknown as Record<MiddlewareKind, (o: unknown) => tgExpress.ExpressMiddleware>)[
      kind
    ](options)
    counters = mw.counters
    app.use(mw as unknown as express5.RequestHandler)
    const work = async (req: express5.Request, res: express5.Response) => {
      enter(req.tollgate?.fencingToken, req.method)
      await wait(Number(req.query.ms ?? 20))
      leave(req.method)
      res.send('ok')
    }
    app.get('/work', work)
    app.put('/work', work)
    app.get('/docs/:id', work)
    app.put('/docs/:id', work)
    app.get('/stream', (req, res) => {
      enter(req.tollgate?.fencingToken)
      streamBody(
        req.query,
        (chunk) => res.write(chunk),
        () => {
          leave()
          res.end()
        },
      )
    })
    app.get('/boom', () => {
      throw new Error('handler failed')
    })
    app.get('/hold', async (req, res) => {
      enter(req.tollgate?.fencingToken)
      await new Promise<void>((resolve) => probe.holders.push(resolve))
      leave()
      res.send('held')
    })
    app.use(
      (_error: unknown, _req: express5.Request, res: express5.Response, _next: express5.NextFunction) => {
        res.status(500).send('boom')
      },
    )
    server = http.createServer(app)
  } else {
    const Koa = (framework === 'koa' ? Koa3 : Koa2) as typeof Koa3
    const app = new Koa()
    app.proxy = true
    app.silent = true
    const mw = (tgKoa as unknown as Record<MiddlewareKind, (o: unknown) => tgKoa.KoaMiddleware>)[kind](
      options,
    )
    counters = mw.counters
    app.use(mw as unknown as Koa3.Middleware)
    const router = new Router()
    const work = async (ctx: Koa3.Context) => {
      enter((ctx.state.tollgate as tgKoa.TollgateInfo | undefined)?.fencingToken, ctx.method)
      await wait(Number(ctx.query.ms ?? 20))
      leave(ctx.method)
      ctx.body = 'ok'
    }
    router.get('/work', work)
    router.put('/work', work)
    router.get('/docs/:id', work)
    router.put('/docs/:id', work)
    router.get('/stream', (ctx) => {
      enter((ctx.state.tollgate as tgKoa.TollgateInfo | undefined)?.fencingToken)
      const body = new PassThrough()
      ctx.body = body
      streamBody(
        ctx.query,
        (chunk) => body.write(chunk),
        () => {
          leave()
          body.end()
        },
      )
    })
    router.get('/boom', () => {
      throw new Error('handler failed')
    })
    router.get('/hold', async (ctx) => {
      enter((ctx.state.tollgate as tgKoa.TollgateInfo | undefined)?.fencingToken)
      await new Promise<void>((resolve) => probe.holders.push(resolve))
      leave()
      ctx.body = 'held'
    })
    app.use(router.routes() as unknown as Koa3.Middleware)
    server = http.createServer(app.callback())
  }
  servers.add(server)
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as AddressInfo
  return { url: `http://127.0.0.1:${port}`, probe, server, counters }
}

function streamBody(query: Record<string, unknown>, write: (chunk: string) => void, end: () => void): void {
  const chunks = Number(query.chunks ?? 5)
  const every = Number(query.every ?? 20)
  let sent = 0
  const timer = setInterval(() => {
    write(`chunk ${sent}\n`)
    if (++sent >= chunks) {
      clearInterval(timer)
      end()
    }
  }, every)
}

/** A GET that resolves with status, headers and body (never rejects on HTTP errors). */
export async function get(
  url: string,
  headers: Record<string, string> = {},
  method = 'GET',
): Promise<{ status: number; headers: Headers; body: string }> {
  const response = await fetch(url, { headers, method })
  return { status: response.status, headers: response.headers, body: await response.text() }
}
