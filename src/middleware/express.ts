// Express 4 and 5: `app.use(semaphore(10))`, `rwlock()`, with the permit tied to Node's response.
import type { IncomingMessage, ServerResponse } from 'node:http'
import {
  type Admission,
  type Rejection,
  type TollgateInfo,
  type AdaptiveControl,
} from '../admission/admission.js'
import { rwlockAdmission, semaphoreAdmission } from '../admission/buckets.js'
import { isThenable } from '../core/thenable.js'
import { normalizeKey, warnUntrustedForwarded } from '../admission/keys.js'
import type { RwlockMiddlewareOptions, SemaphoreMiddlewareOptions } from '../admission/options.js'
import { misplacedError, reportMisplaced } from './misplaced.js'
import {
  admitWatched,
  answerHeaders,
  mergeHeaders,
  type WatchedRequest,
  type WithHandler,
  whenWatched,
} from './lifecycle.js'

// What every adapter's entry point offers besides its own middleware (adapter-exports.ts).
export * from './adapter-exports.js'

/** The parts of an Express request Tollgate reads (Express 4 and 5 both fit). */
export interface ExpressLikeRequest extends IncomingMessage {
  ip?: string | undefined
  path?: string
  baseUrl?: string
  route?: { path?: unknown } | undefined
  get?(name: string): string | undefined
  tollgate?: TollgateInfo
}
type Next = (error?: unknown) => void

/** Who the client is (Express's req.ip: its trust proxy setting applies) and the request's body. */
const expressRequest = (req: ExpressLikeRequest): WatchedRequest => ({
  client: req.ip ?? req.socket?.remoteAddress,
  incoming: req,
})
export type ExpressMiddleware = ((req: ExpressLikeRequest, res: ServerResponse, next: Next) => void) & {
  /** Live counters of this middleware (admitted, rejected by reason, in flight, queued, ...). */
  readonly counters: Admission<ExpressLikeRequest>['counters']
  /** With the `adaptive` option: its limit's status, and close(). */
  readonly adaptive: AdaptiveControl | undefined
}

/** The `handler` option: sends the rejection itself (express-rate-limit's `handler`), or calls
 * `next()` to let the request through without a permit. A throw goes to `next(error)`. */
export type ExpressRejectionHandler = (
  req: ExpressLikeRequest,
  res: ServerResponse,
  next: Next,
  rejection: Rejection,
) => void
export type ExpressSemaphoreOptions = WithHandler<
  SemaphoreMiddlewareOptions<ExpressLikeRequest>,
  ExpressRejectionHandler,
  ExpressLikeRequest,
  ServerResponse
>
export type ExpressRwlockOptions = WithHandler<
  RwlockMiddlewareOptions<ExpressLikeRequest>,
  ExpressRejectionHandler,
  ExpressLikeRequest,
  ServerResponse
>

declare module 'node:http' {
  interface IncomingMessage {
    /** Set by Tollgate's middleware on admitted (or passed) requests. */
    tollgate?: TollgateInfo
  }
}

/**
 * Cap the requests in flight: `app.use(semaphore(10))`, or per bucket with `key`. A request takes a
 * permit at once or waits up to `maxWaitMs`; the permit covers the whole response and is released
 * exactly once when the response closes (finish, client abort, error, timeout).
 */
export function semaphore(options: number | ExpressSemaphoreOptions): ExpressMiddleware {
  return expressAdapter(semaphoreAdmission(options), 'semaphore')
}

/**
 * Read/write lock per resource: GET, HEAD and OPTIONS share a read lock on the resource (default: the
 * normalised path), every other method takes its write lock, exclusive of readers and other writers.
 * Writers do not starve: once one waits, new readers queue behind it. Same queueing, rejection, release
 * and failure rules as semaphore().
 */
export function rwlock(options: ExpressRwlockOptions = {}): ExpressMiddleware {
  return expressAdapter(
    rwlockAdmission(options, {
      method: (req) => req.method ?? 'GET',
      // The full path, also when mounted under a prefix (app.use('/docs', rwlock())).
      path: (req) =>
        req.path === undefined ? ((req.url ?? '/').split('?')[0] ?? '/') : `${req.baseUrl ?? ''}${req.path}`,
    }),
    'rwlock',
  )
}

/** The adapter shared by semaphore() and rwlock(): admission in ../admission, the response watcher
 * and header helpers in lifecycle.ts (shared with Koa, Fastify and Hono). */
function expressAdapter(admission: Admission<ExpressLikeRequest>, factory: string): ExpressMiddleware {
  const { requestPropertyName, standardHeaders } = admission.config
  const handler = admission.config.handler as ExpressRejectionHandler | undefined
  const middleware = (req: ExpressLikeRequest, res: ServerResponse, next: Next): void => {
    // Mounted in another framework (Koa or Hono: (ctx, next); a Fastify plugin or hook): say which
    // import fits, through that framework's error path, before anything is taken.
    if (typeof next !== 'function' || typeof res?.once !== 'function') {
      return reportMisplaced(misplacedError('express', factory, req, res, next), req, res, next)
    }
    whenWatched(
      () => admitWatched(admission, req, res, res, expressRequest),
      (watched) => {
        if (watched.outcome === 'gone') return
        if (watched.outcome === 'skipped') return next()
        const existing = (name: string) => res.getHeader(name)
        if (watched.outcome === 'rejected') {
          if (handler) {
            try {
              const result: unknown = handler(req, res, next, watched.rejection)
              if (isThenable(result)) result.then(undefined, next) // an async handler's failure: a 500
            } catch (error) {
              next(error)
            }
            return
          }
          // The onRejected hook may have answered itself.
          if (res.headersSent || res.writableEnded || !watched.answer) return
          const headers = mergeHeaders(answerHeaders(watched.answer), existing, standardHeaders)
          res.writeHead(watched.answer.status, headers)
          res.end(watched.answer.body)
          return
        }
        try {
          ;(req as unknown as Record<string, unknown>)[requestPropertyName] = watched.info
        } catch (error) {
          next(error) // e.g. a property with only a getter: an error answer, never a crash
          return
        }
        if (!res.headersSent) {
          for (const [name, value] of Object.entries(
            mergeHeaders(watched.headers, existing, standardHeaders),
          )) {
            res.setHeader(name, value)
          }
        }
        next()
      },
      (error: unknown) => next(error), // a bug (user callbacks are guarded): Express answers 500
    )
  }
  return Object.assign(middleware, { counters: admission.counters, adaptive: admission.adaptiveControl })
}

/** Bucket by the matched route pattern (`/docs/:id`, not the raw URL): mount the middleware on the
 * route (`app.get('/docs/:id', semaphore({ permits: 5, key: byRoute() }), handler)`). Requests without
 * a matched route share the bucket 'unmatched'. */
export function byRoute(): (req: ExpressLikeRequest) => string {
  return (req) => {
    const pattern = req.route?.path
    return typeof pattern === 'string' ? `${req.method} ${req.baseUrl ?? ''}${pattern}` : 'unmatched'
  }
}

/** Bucket by a request header, e.g. `byHeader('x-tenant-id')`; missing or empty -> the '-' bucket. */
export function byHeader(name: string): (req: ExpressLikeRequest) => string {
  const header = name.toLowerCase()
  return (req) => normalizeKey(req.headers[header])
}

/** Bucket by client IP; honours Express's `trust proxy` setting through `req.ip`. */
export function byIp(): (req: ExpressLikeRequest) => string {
  return (req) => {
    const address = req.ip ?? req.socket.remoteAddress
    warnUntrustedForwarded(
      'express',
      req.headers,
      address,
      req.socket.remoteAddress,
      "Express's 'trust proxy'",
    )
    return normalizeKey(address)
  }
}
