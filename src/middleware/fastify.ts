// Fastify 5: a plugin in fastify-plugin style (its hook applies to the instance it is registered on, not
// only inside an encapsulated child), built without a runtime dependency on fastify-plugin: it sets
// the same three symbols fastify-plugin sets. Only types are imported from fastify.
import type {
  FastifyInstance,
  FastifyPluginCallback,
  FastifyReply,
  FastifyRequest,
  HookHandlerDoneFunction,
} from 'fastify'
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

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by Tollgate's plugin on admitted (or passed) requests; null on routes it does not cover. */
    tollgate: TollgateInfo | null
  }
}

/** Who the client is (request.ip: Fastify's trustProxy setting applies) and the request's body. */
const fastifyRequest = (request: FastifyRequest): WatchedRequest => ({
  client: request.ip,
  incoming: request.raw,
})

/** The onRequest hook of a Tollgate plugin (callback style: it never mixes `done` and a promise). */
export type TollgateOnRequest = (
  request: FastifyRequest,
  reply: FastifyReply,
  done: HookHandlerDoneFunction,
) => void

export type FastifyTollgatePlugin = FastifyPluginCallback & {
  /** Live counters of this plugin (admitted, rejected by reason, in flight, queued, ...). */
  readonly counters: Admission<FastifyRequest>['counters']
  /** With the `adaptive` option: its limit's status, and close(). */
  readonly adaptive: AdaptiveControl | undefined
  /** The hook itself, to limit one route without registering the plugin:
   * `app.get('/export', { onRequest: limiter.onRequest }, handler)`. */
  readonly onRequest: TollgateOnRequest
}

/** The `handler` option: sends the rejection itself (`reply.code(...).send(...)`), or calls `done()`
 * to let the request through without a permit. A throw or a rejected promise goes to `done(error)`. */
export type FastifyRejectionHandler = (
  request: FastifyRequest,
  reply: FastifyReply,
  done: HookHandlerDoneFunction,
  rejection: Rejection,
) => unknown
export type FastifySemaphoreOptions = WithHandler<
  SemaphoreMiddlewareOptions<FastifyRequest>,
  FastifyRejectionHandler,
  FastifyRequest,
  FastifyReply
>
export type FastifyRwlockOptions = WithHandler<
  RwlockMiddlewareOptions<FastifyRequest>,
  FastifyRejectionHandler,
  FastifyRequest,
  FastifyReply
>

/**
 * Cap the requests in flight: `await app.register(semaphore(10))`, or per bucket with `key`. A request
 * takes a permit in `onRequest` at once or waits up to `maxWaitMs`; the permit covers the whole
 * response (streams included) and is released exactly once when the raw response closes (finish,
 * client abort, handler error, timeout). Registered inside an encapsulated plugin, it covers that
 * plugin's routes only.
 */
export function semaphore(options: number | FastifySemaphoreOptions): FastifyTollgatePlugin {
  return fastifyAdapter(semaphoreAdmission(options), 'semaphore')
}

/**
 * Read/write lock per resource: GET, HEAD and OPTIONS share a read lock on the resource (default: the
 * normalised path), every other method takes its write lock, exclusive of readers and other writers.
 * Writers do not starve: once one waits, new readers queue behind it. Same queueing, rejection, release
 * and failure rules as semaphore().
 */
export function rwlock(options: FastifyRwlockOptions = {}): FastifyTollgatePlugin {
  return fastifyAdapter(
    rwlockAdmission(options, {
      method: (request) => request.method,
      path: (request) => request.url.split('?')[0] ?? '/',
    }),
    'rwlock',
  )
}

/** The adapter shared by semaphore() and rwlock(): admission in ../admission, the response watcher
 * and header helpers in lifecycle.ts (shared with Express, Koa and Hono). */
function fastifyAdapter(admission: Admission<FastifyRequest>, factory: string): FastifyTollgatePlugin {
  const { requestPropertyName, standardHeaders } = admission.config
  const handler = admission.config.handler as FastifyRejectionHandler | undefined
  const onRequest: TollgateOnRequest = (request, reply, done) => {
    // Used as another framework's middleware (Express, Koa, Hono): say which import fits.
    if (typeof done !== 'function' || typeof reply?.raw !== 'object') {
      return reportMisplaced(misplacedError('fastify', factory, request, reply, done), request, reply, done)
    }
    whenWatched(
      () => admitWatched(admission, request, reply.raw, reply, fastifyRequest),
      (watched) => {
        // The client left: `done` is never called, so Fastify runs neither the body parser nor the
        // handler for it (its onResponse hooks still run when the raw response closes).
        if (watched.outcome === 'gone') return
        if (watched.outcome === 'skipped') return done()
        const existing = (name: string) => reply.getHeader(name)
        if (watched.outcome === 'rejected') {
          if (handler) {
            try {
              const result = handler(request, reply, done, watched.rejection)
              // (Promise.resolve: a handler may return the reply, a thenable whose then() needs both
              // callbacks.)
              if (isThenable(result)) Promise.resolve(result).catch((error: Error) => done(error))
            } catch (error) {
              done(error as Error)
            }
            return
          }
          // The onRejected hook may have answered itself.
          if (reply.sent || reply.raw.headersSent || !watched.answer) return
          const { status, body } = watched.answer
          const headers = mergeHeaders(answerHeaders(watched.answer), existing, standardHeaders)
          void reply.code(status).headers(headers).send(body)
          return
        }
        try {
          ;(request as unknown as Record<string, unknown>)[requestPropertyName] = watched.info
        } catch (error) {
          done(error as Error) // e.g. a property with only a getter: an error answer, never a crash
          return
        }
        reply.headers(mergeHeaders(watched.headers, existing, standardHeaders))
        done()
      },
      (error) => done(error as Error), // a bug (user callbacks are guarded): Fastify answers 500
    )
  }
  const plugin = (instance: FastifyInstance, options: unknown, done: (error?: Error) => void): void => {
    // Mounted as another framework's middleware, or as a Fastify hook: say how to mount it.
    if (typeof instance?.addHook !== 'function') {
      return reportMisplaced(
        misplacedError('fastify', factory, instance, options, done),
        instance,
        options,
        done,
      )
    }
    if (!instance.hasRequestDecorator(requestPropertyName))
      instance.decorateRequest(requestPropertyName, null)
    instance.addHook('onRequest', onRequest)
    done()
  }
  // What fastify-plugin sets: do not encapsulate (the hook and decorator apply to the instance the
  // plugin is registered on), a display name, and the Fastify major this was written for.
  Object.assign(plugin, {
    [Symbol.for('skip-override')]: true,
    [Symbol.for('fastify.display-name')]: 'tollgate',
    [Symbol.for('plugin-meta')]: { name: 'tollgate', fastify: '5.x' },
  })
  return Object.assign(plugin as FastifyPluginCallback, {
    counters: admission.counters,
    adaptive: admission.adaptiveControl,
    onRequest,
  })
}

/** Bucket by the matched route pattern (`GET /docs/:id`, not the raw URL). Requests without a matched
 * route (404s) share the bucket 'unmatched'. */
export function byRoute(): (request: FastifyRequest) => string {
  return (request) => {
    const pattern = request.routeOptions.url
    return typeof pattern === 'string' ? `${request.method} ${pattern}` : 'unmatched'
  }
}

/** Bucket by a request header, e.g. `byHeader('x-tenant-id')`; missing or empty -> the '-' bucket. */
export function byHeader(name: string): (request: FastifyRequest) => string {
  const header = name.toLowerCase()
  return (request) => normalizeKey(request.headers[header])
}

/** Bucket by client IP; honours Fastify's `trustProxy` setting through `request.ip`. */
export function byIp(): (request: FastifyRequest) => string {
  return (request) => {
    warnUntrustedForwarded(
      'fastify',
      request.headers,
      request.ip,
      request.raw?.socket?.remoteAddress,
      "Fastify's trustProxy",
    )
    return normalizeKey(request.ip)
  }
}
