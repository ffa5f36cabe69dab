import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Admission } from '../admission/admission.js'
import { rwlockAdmission, semaphoreAdmission } from '../admission/gates.js'
import { normalizeKey } from '../admission/keys.js'
import type { RwlockMiddlewareOptions, SemaphoreMiddlewareOptions } from '../admission/options.js'
import { admitWatched } from './watch.js'

export type {
  AdmissionCounters,
  OnLost,
  Rejection,
  RejectReason,
  TollgateInfo,
} from '../admission/admission.js'
export type {
  CommonOptions,
  Logger,
  RwlockMiddlewareOptions,
  SemaphoreMiddlewareOptions,
} from '../admission/options.js'
export { DEFAULT_BUCKET, normalizeKey } from '../admission/keys.js'

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
export type KoaMiddleware = ((ctx: KoaLikeContext, next: () => Promise<unknown>) => Promise<void>) & {
  /** Live counters of this middleware (admitted, rejected by reason, in flight, queued, ...). */
  readonly counters: Admission<KoaLikeContext>['counters']
}

/**
 * Cap the requests in flight: `app.use(semaphore(10))`, or per bucket with `key`. The permit covers
 * the whole response, streamed bodies included: it is released when the response closes, not when the
 * middleware chain returns.
 */
export function semaphore(options: number | SemaphoreMiddlewareOptions<KoaLikeContext>): KoaMiddleware {
  return koaAdapter(semaphoreAdmission(options))
}

/**
 * Read/write lock per resource: GET, HEAD and OPTIONS share a read lock on the resource (default: the
 * normalised path), every other method takes its write lock, exclusive of readers and other writers.
 * Writers do not starve: once one waits, new readers queue behind it. Same queueing, rejection, release
 * and failure rules as semaphore().
 */
export function rwlock(options: RwlockMiddlewareOptions<KoaLikeContext> = {}): KoaMiddleware {
  return koaAdapter(rwlockAdmission(options, { method: (ctx) => ctx.method, path: (ctx) => ctx.path }))
}

/** The adapter shared by semaphore() and rwlock(): admission in ../admission, the response watcher
 * in watch.ts (shared with Express). */
export function koaAdapter(admission: Admission<KoaLikeContext>): KoaMiddleware {
  const middleware = async (ctx: KoaLikeContext, next: () => Promise<unknown>): Promise<void> => {
    const watched = await admitWatched(admission, ctx, ctx.res)
    if (watched.outcome === 'gone') return
    if (watched.outcome === 'rejected') {
      // The onRejected hook may have answered itself.
      if (ctx.res.headersSent || ctx.res.writableEnded) return
      ctx.status = watched.answer.status
      ctx.set(watched.answer.headers)
      ctx.body = watched.answer.body
      return
    }
    ctx.state.tollgate = watched.info
    ctx.set(watched.headers)
    await next()
  }
  return Object.assign(middleware, { counters: admission.counters })
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
  return (ctx) => normalizeKey(ctx.ip)
}
