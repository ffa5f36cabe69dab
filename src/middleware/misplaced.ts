// An adapter mounted in another framework (tollgate/express's middleware in a Koa app, ...) fails with
// an error that names the right import, through the host framework's own error path, instead of
// crashing the process or answering a bare 500. Each adapter's entry tests its arguments' shape with
// one or two typeof checks; everything here runs only once they failed. No Node import: hono.ts loads
// this on runtimes without node:http.
import { TollgateError } from '../core/errors.js'

export type Framework = 'express' | 'koa' | 'fastify' | 'hono'

const NAMES: Readonly<Record<Framework, string>> = {
  express: 'Express',
  koa: 'Koa',
  fastify: 'Fastify',
  hono: 'Hono',
}

/** How each framework mounts the factory's result (the second half of the advice). */
const MOUNTS: Readonly<Record<Framework, (factory: string) => string>> = {
  express: (factory) => `app.use(${factory}(...))`,
  koa: (factory) => `app.use(${factory}(...))`,
  fastify: (factory) => `await app.register(${factory}(...))`,
  hono: (factory) => `app.use(${factory}(...))`,
}

const anApp = (framework: Framework) => `${framework === 'express' ? 'an' : 'a'} ${NAMES[framework]} app`

type Shape = Record<string, unknown> | null | undefined

/**
 * The framework that called an adapter with these arguments, judged by their shape: Express `(req, res, next)` with req a Node request; Koa `(ctx, next)` with ctx.req and
 * ctx.app; Hono `(c, next)` with c.finalized; Fastify a plugin `(instance, options, done)` or a hook
 * `(request, reply, done)` with request.raw and reply.raw.
 */
export function frameworkOf(first: unknown, second: unknown, third: unknown): Framework | undefined {
  const a = first as Shape
  if (typeof a !== 'object' || a === null) return undefined
  if (typeof a.finalized === 'boolean') return 'hono'
  if (typeof a.register === 'function' && typeof a.addHook === 'function') return 'fastify'
  if (typeof a.raw === 'object' && typeof (second as Shape)?.raw === 'object') return 'fastify'
  if (typeof a.app === 'object' && typeof a.req === 'object' && typeof a.res === 'object') return 'koa'
  if (typeof a.headers === 'object' && typeof (second as Shape)?.writeHead === 'function') {
    return typeof third === 'function' || typeof a.next === 'function' ? 'express' : undefined
  }
  return undefined
}

/**
 * The error for `adapter`'s `factory()` (semaphore or rwlock) called with these arguments: it names
 * the host framework and the import to use there. Code ERR_TOLLGATE_WRONG_ADAPTER (docs/errors.md).
 */
export function misplacedError(
  adapter: Framework,
  factory: string,
  first: unknown,
  second: unknown,
  third: unknown,
): TollgateError {
  const host = frameworkOf(first, second, third)
  const what = `tollgate/${adapter}'s ${factory}()`
  let message: string
  if (host === adapter && adapter === 'fastify') {
    // Fastify's own plugin, added as a hook (app.addHook('onRequest', semaphore(...))).
    message = `${what} is a Fastify plugin, not a hook: ${MOUNTS.fastify(factory)}, or pass its .onRequest as the hook`
  } else if (host === undefined || host === adapter) {
    const expected = {
      express: '(req, res, next)',
      koa: '(ctx, next)',
      hono: '(c, next)',
      fastify: '(instance, options, done)',
    }[adapter]
    message = `${what} was called without ${NAMES[adapter]}'s arguments ${expected}: mount it in ${anApp(adapter)} with ${MOUNTS[adapter](factory)}, or use the adapter of your framework (tollgate/express, /koa, /fastify, /hono)`
  } else {
    message = `${what} was mounted in ${anApp(host)}: import { ${factory} } from 'tollgate/${host}' and ${MOUNTS[host](factory)}`
  }
  return new TollgateError('ERR_TOLLGATE_WRONG_ADAPTER', `${message}.`)
}

/**
 * Hand `error` to the host framework's error path: its `next`/`done` callback when the adapter got
 * one (`third`), Express's `req.next` (an async adapter cannot see a third argument), a 500 written on
 * a bare Node response (no framework to catch a throw), else a throw: Koa, Hono and Fastify catch a
 * middleware's, hook's or plugin's throw or rejection and answer 500 (or fail to start).
 */
export function reportMisplaced(
  error: TollgateError,
  first: unknown,
  second: unknown,
  third?: unknown,
): void {
  if (typeof third === 'function') {
    ;(third as (error: Error) => void)(error)
    return
  }
  const req = first as Shape
  if (typeof req?.next === 'function' && typeof req.headers === 'object') {
    ;(req.next as (error: Error) => void)(error)
    return
  }
  const res = second as Shape
  if (
    typeof req?.headers === 'object' &&
    typeof res?.writeHead === 'function' &&
    typeof res.end === 'function'
  ) {
    // A plain Node server: a throw here would be an uncaught exception.
    process.emitWarning(error.message, { code: error.code })
    if (res.headersSent !== true) (res.writeHead as (status: number) => void)(500)
    ;(res.end as (body: string) => void)('Internal Server Error\n')
    return
  }
  throw error
}
