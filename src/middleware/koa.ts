// Koa 2 and 3: `app.use(semaphore(10))`, `rwlock()`, with the permit tied to Node's response.
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Admission, Rejection, AdaptiveControl } from '../admission/admission.js'
import { rwlockAdmission, semaphoreAdmission } from '../admission/buckets.js'
import { normalizeKey, warnUntrustedForwarded } from '../admission/keys.js'
import type { RwlockMiddlewareOptions, SemaphoreMiddlewareOptions } from '../admission/options.js'
import { misplacedError, reportMisplaced } from './misplaced.js'
import {
  admitWatched,
  answerHeaders,
  mergeHeaders,
  type WatchedRequest,
  type WithHandler,
} from './lifecycle.js'

// What every adapter's entry point offers besides its own middleware (adapter-exports.ts).
export * from './adapter-exports.js'

/** The parts of a Koa context Tollgate uses (Koa 2 and 3 both fit). */
export interface KoaLikeContext {
  req: IncomingMessage
  res: ServerResponse
  method: string
  path: string
  ip: string
  headers: IncomingMessage['headers']
  state: Record<string, unknown>
  status: number
  body: unknown
  set(field: Record<string, string>): void
  /** Set by @koa/router: the matched route pattern. */
  _matchedRoute?: string | RegExp
}
/** Who the client is (ctx.ip: Koa's app.proxy setting applies) and the request's body. */
const koaRequest = (ctx: KoaLikeContext): WatchedRequest => ({ client: ctx.ip, incoming: ctx.req })

export type KoaMiddleware = ((ctx: KoaLikeContext, next: () => Promise<unknown>) => Promise<void>) & {
  /** Live counters of this middleware (admitted, rejected by reason, in flight, queued, ...). */
  readonly counters: Admission<KoaLikeContext>['counters']
  /** With the `adaptive` option: its limit's status, and close(). */
  readonly adaptive: AdaptiveControl | undefined
}

/** The `handler` option: answers the rejection itself (sets `ctx.status` and `ctx.body`), or calls
 * `next()` to let the request through without a permit. A throw is Koa's error. */
export type KoaRejectionHandler = (
  ctx: KoaLikeContext,
  next: () => Promise<unknown>,
  rejection: Rejection,
) => unknown
export type KoaSemaphoreOptions = WithHandler<
  SemaphoreMiddlewareOptions<KoaLikeContext>,
  KoaRejectionHandler,
  KoaLikeContext
>
export type KoaRwlockOptions = WithHandler<
  RwlockMiddlewareOptions<KoaLikeContext>,
  KoaRejectionHandler,
  KoaLikeContext
>

/**
 * Cap the requests in flight: `app.use(semaphore(10))`, or per bucket with `key`. The permit covers
 * the whole response, streamed bodies included: it is released when the response closes, not when the
 * middleware chain returns.
 */
export function semaphore(options: number | KoaSemaphoreOptions): KoaMiddleware {
  return koaAdapter(semaphoreAdmission(options), 'semaphore')
}

/**
 * Read/write lock per resource: GET, HEAD and OPTIONS share a read lock on the resource (default: the
 * normalised path), every other method takes its write lock, exclusive of readers and other writers.
 * Writers do not starve: once one waits, new readers queue behind it. Same queueing, rejection, release
 * and failure rules as semaphore().
 */
export function rwlock(options: KoaRwlockOptions = {}): KoaMiddleware {
  return koaAdapter(
    rwlockAdmission(options, { method: (ctx) => ctx.method, path: (ctx) => ctx.path }),
    'rwlock',
  )
}

/** The adapter shared by semaphore() and rwlock(): admission in ../admission, the response watcher
 * and header helpers in lifecycle.ts (shared with Express, Fastify and Hono). */
function koaAdapter(admission: Admission<KoaLikeContext>, factory: string): KoaMiddleware {
  const { requestPropertyName, standardHeaders } = admission.config
  const handler = admission.config.handler as KoaRejectionHandler | undefined
  const middleware = async (ctx: KoaLikeContext, next: () => Promise<unknown>): Promise<void> => {
    // Mounted in another framework (Express: (req, res, next); Hono: a context without Node's
    // response; a Fastify plugin or hook): say which import fits, before anything is taken.
    if (typeof next !== 'function' || typeof ctx?.res?.once !== 'function') {
      return reportMisplaced(misplacedError('koa', factory, ctx, next, undefined), ctx, next)
    }
    // What the response was before the onRejected hook could set it (a Koa hook answers through ctx).
    const status = ctx.status
    const body = ctx.body
    const watched = await admitWatched(admission, ctx, ctx.res, undefined, koaRequest)
    if (watched.outcome === 'gone') return
    if (watched.outcome === 'skipped') {
      await next()
      return
    }
    const existing = (name: string) => ctx.res.getHeader(name)
    if (watched.outcome === 'rejected') {
      if (handler) {
        await handler(ctx, next, watched.rejection)
        return
      }
      // The onRejected hook may have answered itself: on the socket, or by setting ctx.
      if (ctx.res.headersSent || ctx.res.writableEnded || !watched.answer) return
      if (ctx.status !== status || ctx.body !== body) return
      ctx.status = watched.answer.status
      ctx.set(mergeHeaders(answerHeaders(watched.answer), existing, standardHeaders))
      ctx.body = watched.answer.body
      return
    }
    ctx.state[requestPropertyName] = watched.info
    const headers = mergeHeaders(watched.headers, existing, standardHeaders)
    ctx.set(headers)
    try {
      await next()
    } catch (error) {
      // Koa's default error response drops every header set so far and sets `error.headers`: keep the
      // policy headers on it, as Express, Fastify and Hono do.
      keepHeadersOnError(error, headers)
      throw error
    }
  }
  return Object.assign(middleware, { counters: admission.counters, adaptive: admission.adaptiveControl })
}

function keepHeadersOnError(error: unknown, headers: Record<string, string>): void {
  if (typeof error !== 'object' || error === null || Object.keys(headers).length === 0) return
  try {
    const carrier = error as { headers?: Record<string, string> }
    carrier.headers = { ...headers, ...carrier.headers }
  } catch {
    // A frozen error, or one whose headers cannot be replaced: Koa answers without ours.
  }
}

/** Bucket by the matched route pattern set by @koa/router (mount the middleware after the router
 * matched, e.g. per route: `router.get('/docs/:id', semaphore({ permits: 5, key: byRoute() }), h)`).
 * Requests without a matched route share the bucket 'unmatched'. */
export function byRoute(): (ctx: KoaLikeContext) => string {
  return (ctx) => {
    const pattern = ctx._matchedRoute
    return pattern === undefined ? 'unmatched' : `${ctx.method} ${String(pattern)}`
  }
}

/** Bucket by a request header, e.g. `byHeader('x-tenant-id')`; missing or empty -> the '-' bucket. */
export function byHeader(name: string): (ctx: KoaLikeContext) => string {
  const header = name.toLowerCase()
  return (ctx) => normalizeKey(ctx.headers[header])
}

/** Bucket by client IP; honours Koa's `app.proxy` setting through `ctx.ip`. */
export function byIp(): (ctx: KoaLikeContext) => string {
  return (ctx) => {
    const socket = (ctx as { req?: { socket?: { remoteAddress?: string } } }).req?.socket
    warnUntrustedForwarded('koa', ctx.headers, ctx.ip, socket?.remoteAddress, "Koa's app.proxy")
    return normalizeKey(ctx.ip)
  }
}
