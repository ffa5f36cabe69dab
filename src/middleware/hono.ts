// Hono 4: `app.use(semaphore(10))`. On @hono/node-server the permit is tied to Node's response (the
// same watcher as Express, Koa and Fastify); on other runtimes, to the Response body (see
// FetchResponseWatch). Only types and the `hono/route` helper (Hono 4.8+) are imported from hono.
import type { IncomingMessage } from 'node:http'
import type { Context, MiddlewareHandler, Next } from 'hono'
import { matchedRoutes } from 'hono/route'
import type { Admission, Rejection, TollgateInfo, AdaptiveControl } from '../admission/admission.js'
import { rwlockAdmission, semaphoreAdmission } from '../admission/buckets.js'
import { normalizeKey } from '../admission/keys.js'
import type { RwlockMiddlewareOptions, SemaphoreMiddlewareOptions } from '../admission/options.js'
import { misplacedError, reportMisplaced } from './misplaced.js'
import {
  admitWatched,
  answerHeaders,
  mergeHeaders,
  type WatchedRequest,
  type WatchedResponse,
  type WithHandler,
} from './lifecycle.js'

// What every adapter's entry point offers besides its own middleware (adapter-exports.ts).
export * from './adapter-exports.js'

declare module 'hono' {
  interface ContextVariableMap {
    /** Set by Tollgate's middleware on admitted (or passed) requests: `c.get('tollgate')`. */
    tollgate: TollgateInfo
  }
}

export type HonoMiddleware = MiddlewareHandler & {
  /** Live counters of this middleware (admitted, rejected by reason, in flight, queued, ...). */
  readonly counters: Admission<Context>['counters']
  /** With the `adaptive` option: its limit's status, and close(). */
  readonly adaptive: AdaptiveControl | undefined
}

/** The `handler` option: returns the rejection's Response itself (or sets `c.res`), or awaits `next()`
 * to let the request through without a permit. If it does neither, the default rejection is sent. */
export type HonoRejectionHandler = (
  c: Context,
  next: Next,
  rejection: Rejection,
) => Response | void | Promise<Response | void>
export type HonoSemaphoreOptions = WithHandler<
  SemaphoreMiddlewareOptions<Context>,
  HonoRejectionHandler,
  Context
>
export type HonoRwlockOptions = WithHandler<RwlockMiddlewareOptions<Context>, HonoRejectionHandler, Context>

/**
 * Cap the requests in flight: `app.use(semaphore(10))`, or per bucket with `key`. A request takes a
 * permit at once or waits up to `maxWaitMs`. On @hono/node-server the permit covers the whole response
 * (streams included) and is released exactly once when Node's response closes (finish, client abort,
 * handler error, timeout). On other runtimes it is released when the response body has been read to
 * its end or cancelled (at once for a response without a body), and a client that leaves while queued
 * is noticed only if the runtime aborts `c.req.raw.signal`.
 */
export function semaphore(options: number | HonoSemaphoreOptions): HonoMiddleware {
  return honoAdapter(semaphoreAdmission(options), 'semaphore')
}

/**
 * Read/write lock per resource: GET, HEAD and OPTIONS share a read lock on the resource (default: the
 * normalised path), every other method takes its write lock, exclusive of readers and other writers.
 * Writers do not starve: once one waits, new readers queue behind it. Same queueing, rejection, release
 * and failure rules as semaphore().
 */
export function rwlock(options: HonoRwlockOptions = {}): HonoMiddleware {
  return honoAdapter(
    rwlockAdmission(options, { method: (c) => c.req.method, path: (c) => c.req.path }),
    'rwlock',
  )
}

/** What a client that left gets (nobody reads it): nginx's "client closed request". */
const CLIENT_CLOSED = 499

/** The adapter shared by semaphore() and rwlock(): admission in ../admission, the response watcher
 * and header helpers in lifecycle.ts (shared with Express, Koa and Fastify). */
function honoAdapter(admission: Admission<Context>, factory: string): HonoMiddleware {
  const { requestPropertyName, standardHeaders } = admission.config
  const handler = admission.config.handler as HonoRejectionHandler | undefined
  const middleware: MiddlewareHandler = async (c, next) => {
    // Mounted in another framework (Express: (req, res, next); Koa: a context without Hono's
    // `finalized`; a Fastify plugin or hook): say which import fits, before anything is taken.
    if (typeof next !== 'function' || typeof c?.finalized !== 'boolean') {
      return reportMisplaced(misplacedError('hono', factory, c, next, undefined), c, next)
    }
    const outgoing = nodeResponse(c)
    const watch = outgoing ? undefined : new FetchResponseWatch(c.req.raw.signal)
    const watched = await admitWatched(
      admission,
      c,
      outgoing ?? (watch as FetchResponseWatch),
      undefined,
      honoRequest,
    )
    if (watched.outcome === 'gone') return new Response(null, { status: CLIENT_CLOSED })
    if (watched.outcome === 'skipped') {
      await next()
      return
    }
    if (watched.outcome === 'rejected') {
      if (handler) {
        const answered = await handler(c, next, watched.rejection)
        if (answered instanceof Response) return answered
      }
      // The onRejected hook or the handler may have answered (by setting c.res, or calling next()).
      if (c.finalized) return
      const answer = watched.answer ?? admission.rejectionResponse(watched.rejection, c)
      return new Response(answer.body, { status: answer.status, headers: answerHeaders(answer) })
    }
    c.set(requestPropertyName as 'tollgate', watched.info)
    try {
      await next()
    } finally {
      // After the handler, so a handler that returns its own Response keeps them, also on the error
      // response Hono makes from a thrown error (the body is sent after this). Inner middlewares have
      // written theirs already: ours go first, as an outer middleware's do on the other adapters.
      if (c.finalized) {
        const existing = (name: string) => c.res.headers.get(name)
        const merged = mergeHeaders(watched.headers, existing, standardHeaders, 'outer')
        for (const [name, value] of Object.entries(merged)) c.header(name, value)
        if (watch) c.res = watch.track(c.res)
      } else {
        watch?.abandon() // nothing to send (a middleware below threw past Hono): nothing to hold
      }
    }
  }
  return Object.assign(middleware, { counters: admission.counters, adaptive: admission.adaptiveControl })
}

/** Who the client is and the request's body: Node's request on @hono/node-server (`c.env.incoming`);
 * on other runtimes neither (one client: the window's share of drops, as the library's leases). */
function honoRequest(c: Context): WatchedRequest {
  const incoming = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming
  if (!incoming || typeof incoming.once !== 'function') return {}
  return { client: incoming.socket?.remoteAddress, incoming }
}

/** Node's ServerResponse when running on @hono/node-server (`c.env.outgoing`). */
function nodeResponse(c: Context): WatchedResponse | undefined {
  const outgoing = (c.env as { outgoing?: Partial<WatchedResponse> } | undefined)?.outgoing
  if (outgoing && typeof outgoing.once === 'function' && typeof outgoing.destroy === 'function') {
    return outgoing as WatchedResponse
  }
  return undefined
}

/**
 * The response watcher on runtimes without Node's response object (Bun, Deno, workers): 'close' when
 * the request's signal aborts (the client left), when the body has been read to its end, fails or is
 * cancelled, or at once for a response without a body. destroy() (a lost lease with onLost 'abort')
 * errors the body stream. Whether an abandoned download is noticed depends on the runtime cancelling
 * the body or aborting the request signal.
 */
class FetchResponseWatch implements WatchedResponse {
  closed = false
  writableFinished = false
  /** The status of the response tracked (an adaptive limit counts some as drops). */
  statusCode: number | undefined = undefined
  private listeners: (() => void)[] = []
  /** 'prefinish' listeners: called when the handler's Response is handed over (track()). */
  private handedOver: (() => void)[] = []
  private controller: ReadableStreamDefaultController<Uint8Array> | undefined

  constructor(signal: AbortSignal | undefined) {
    if (signal?.aborted) this.closed = true
    else signal?.addEventListener('abort', () => this.close(), { once: true })
  }

  once(event: 'close' | 'prefinish', listener: () => void): this {
    if (event === 'prefinish') this.handedOver.push(listener)
    else if (this.closed) queueMicrotask(listener)
    else this.listeners.push(listener)
    return this
  }

  destroy(): void {
    try {
      this.controller?.error(new Error('tollgate: the lease was lost'))
    } catch {
      // already closed or errored
    }
    this.close()
  }

  /** The response is complete without a body to watch. */
  finish(): void {
    this.writableFinished = true
    this.close()
  }

  /** Nothing was sent (a middleware below threw past Hono): the request counts for nothing. */
  abandon(): void {
    this.close()
  }

  /** A copy of `response` whose body closes this watch when it has been read, failed or cancelled.
   * The handler is done here ('prefinish'): a body the client reads slowly is the client's time. */
  track(response: Response): Response {
    this.statusCode = response.status
    if (!this.closed) for (const listener of this.handedOver.splice(0)) listener()
    const source = response.body
    if (!source || this.closed) {
      this.finish()
      return response
    }
    const reader = source.getReader()
    const body = new ReadableStream<Uint8Array>({
      start: (controller) => {
        this.controller = controller
      },
      pull: async (controller) => {
        try {
          const { done, value } = await reader.read()
          if (!done) return controller.enqueue(value)
          controller.close()
          this.finish()
        } catch (error) {
          controller.error(error)
          this.close()
        }
      },
      cancel: async (reason) => {
        this.close()
        await reader.cancel(reason)
      },
    })
    return new Response(body, response)
  }

  private close(): void {
    if (this.closed) return
    this.closed = true
    for (const listener of this.listeners.splice(0)) listener()
  }
}

/** Bucket by the matched route pattern (`GET /docs/:id`, not the raw URL), also when the middleware is
 * mounted with `app.use()`: the pattern of the last route that matched, the handler's. Requests no
 * route matched get the pattern of the last middleware (e.g. `GET /*`), one bucket for all of them. */
export function byRoute(): (c: Context) => string {
  return (c) => `${c.req.method} ${matchedRoutes(c).at(-1)?.path ?? 'unmatched'}`
}

/** Bucket by a request header, e.g. `byHeader('x-tenant-id')`; missing or empty -> the '-' bucket. */
export function byHeader(name: string): (c: Context) => string {
  return (c) => normalizeKey(c.req.header(name))
}

/**
 * Bucket by the address of the peer: on @hono/node-server the socket's remote address (no proxy
 * headers are trusted; behind a proxy, pass your own `key`). On other runtimes pass
 * `key: (c) => getConnInfo(c).remote.address` with your runtime's `getConnInfo`; here every request
 * would share the '-' bucket.
 */
export function byIp(): (c: Context) => string {
  return (c) =>
    normalizeKey(
      (c.env as { incoming?: { socket?: { remoteAddress?: string } } } | undefined)?.incoming?.socket
        ?.remoteAddress,
    )
}
