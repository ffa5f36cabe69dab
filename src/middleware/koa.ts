import type { IncomingMessage, ServerResponse } from 'node:http'
import {
  type Admission,
  normalizeKey,
  type RwlockMiddlewareOptions,
  rwlockAdmission,
  type SemaphoreMiddlewareOptions,
  semaphoreAdmission,
  type TollgateInfo,
} from './shared.js'
import { whenLost } from '../core/lease.js'

export type {
  AdmissionCounters,
  CommonOptions,
  Logger,
  OnLost,
  Rejection,
  RejectReason,
  RwlockMiddlewareOptions,
  SemaphoreMiddlewareOptions,
  TollgateInfo,
} from './shared.js'
export { DEFAULT_BUCKET, normalizeKey } from './shared.js'

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

/** The adapter shared by semaphore() and rwlock(): all admission logic lives in shared.ts. */
export function koaAdapter(admission: Admission<KoaLikeContext>): KoaMiddleware {
  const middleware = async (ctx: KoaLikeContext, next: () => Promise<unknown>): Promise<void> => {
    // Attached before any await (see the Express adapter).
    const gone = new AbortController()
    let held: TollgateInfo | undefined
    ctx.res.once('close', () => {
      gone.abort(new Error('response closed'))
      if (held) admission.release(held)
      held = undefined
    })
    let result
    try {
      result = await admission.admit(ctx, gone.signal)
    } catch (error) {
      if (gone.signal.aborted) return // the client left while waiting: nothing to answer
      throw error // a bug (e.g. a throwing key()): Koa answers 500
    }
    if (result.outcome === 'rejected') {
      admission.notifyRejected(ctx, result.rejection)
      const { status, headers, body } = admission.rejectionResponse(result.rejection)
      ctx.status = status
      ctx.set(headers)
      ctx.body = body
      return
    }
    const { info, left } = result
    if (gone.signal.aborted) {
      admission.release(info)
      return
    }
    held = info
    const lease = info.lease
    if (lease) {
      whenLost(lease, (error) => {
        if (admission.lost(info, error) && !ctx.res.writableFinished) ctx.req.destroy()
      })
    }
    ctx.state.tollgate = info
    ctx.set(admission.policyHeaders(info.name, info.permits, left))
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
