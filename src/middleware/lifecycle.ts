// What every adapter (Express, Koa, Fastify, Hono) does around the admission, in one place so they
// cannot drift: listen for the response's close before any await (a client that leaves while queued
// aborts its wait, and an admitted request's permit is released exactly once, when its response
// closes: finish, abort, error, timeout), admit, and act on a lost lease (onLost: 'abort' destroys the
// response). The adapters only move headers and bodies, and do that through the helpers below.
import { AbortFlag } from '../core/abort.js'
import type { Admission, Rejection, SampleTiming, TollgateInfo } from '../admission/admission.js'
import type { AdmitResult } from '../admission/bucket.js'
import { isThenable } from '../core/thenable.js'
import type { StandardHeaders } from '../admission/options.js'
import type { HttpAnswer } from '../admission/response.js'
import { whenLost } from '../core/client/lease.js'

/** An adapter's options: the engine's, with the `handler` option and the onRejected hook typed for
 * the framework (`Res`: the response object the hook gets third, where its request has none). */
export type WithHandler<Options, Handler, Req = never, Res = undefined> = Omit<
  Options,
  'handler' | 'onRejected'
> & {
  /** Send the rejection yourself instead of the default answer; the framework's middleware arguments,
   * then the Rejection. The onRejected hook has run before. */
  handler?: Handler
  /** Called before the rejection is sent. It may answer itself, the framework's way (Express:
   * `res.status(420).send(...)`; Koa: set `ctx.status` and `ctx.body`; Fastify:
   * `reply.code(420).send(...)`; Hono: `c.res = c.text(..., 420)`): what it sets is the response.
   * Synchronously: an async hook's answer comes after the default one. */
  onRejected?: (req: Req, rejection: Rejection, res: Res) => void
}

/** The abort reason of a request whose response closed (one object: no stack captured per request). */
const RESPONSE_CLOSED = new Error('response closed')

/**
 * What the watcher needs of a response. Node's `ServerResponse` fits: Express's `res`, Koa's `ctx.res`,
 * Fastify's `reply.raw` and Hono's `c.env.outgoing` on @hono/node-server. Hono on other runtimes
 * passes a stand-in that closes when the body has been sent (see hono.ts).
 */
export interface WatchedResponse {
  /** 'close': emitted exactly once, when the response is done: finished, aborted, destroyed or
   * failed. 'prefinish': the handler has handed over its whole response, however long the client
   * then takes to read it (where there is no end() below; an adaptive limit measures to here).
   * 'drain': the client took what write() buffered. */
  once(event: 'close' | 'prefinish' | 'drain', listener: () => void): unknown
  /** Node's: the handler writes its body (false: buffered beyond the high-water mark, until 'drain'),
   * and ends it. An adaptive limit measures to the handler's end() call, less the time the client
   * held the writes back (a slow reader of a streamed body is no slow handler). */
  write?: (...args: never[]) => boolean
  end?: (...args: never[]) => unknown
  /** True once 'close' was emitted (Node's `ServerResponse.closed`). */
  readonly closed?: boolean
  /** True once the whole response was handed to the transport. */
  readonly writableFinished: boolean
  /** The response's status (an adaptive limit counts some as drops). */
  readonly statusCode?: number
  /** Abort the response (a lost lease with `onLost: 'abort'`); must lead to 'close'. */
  destroy(): unknown
}

/** What the watcher needs of a request, for an adaptive limit's sample: who the client is, and when
 * its body came (a client that sends its body slowly is no slow handler). */
export interface WatchedRequest {
  /** The client's address, as the framework gives it (its trusted-proxy setting applies). */
  readonly client?: string | undefined
  /** Node's request: its body is complete, or will be at 'end'. */
  readonly incoming?:
    { readonly complete?: boolean; once(event: 'end', listener: () => void): unknown } | undefined
}

export type Watched =
  /** The `skip` option said so: no permit, no headers; go on to the handler. */
  | { outcome: 'skipped' }
  /** The client left: nothing to answer. */
  | { outcome: 'gone' }
  /** Answer with this rejection (the onRejected hook has run): call the `handler` option if there is
   * one (then `answer` is undefined), else send `answer`. */
  | { outcome: 'rejected'; rejection: Rejection; answer: HttpAnswer | undefined }
  /** Go on to the handler, with these response headers. */
  | { outcome: 'admitted'; info: TollgateInfo; headers: Record<string, string> }

const SKIPPED: Watched = Object.freeze({ outcome: 'skipped' })
const GONE: Watched = Object.freeze({ outcome: 'gone' })

/**
 * Admit `req` and tie its permit to `res`. The behaviour every adapter shares:
 * - `skip(req)` true: 'skipped' (no permit, no headers).
 * - A response that has already closed (the client left before this middleware ran) is 'gone' at
 *   once: nothing is taken, nothing is answered.
 * - A client that leaves while queued leaves the queue at once and is 'gone', also when its wait was
 *   about to be rejected: the onRejected hook is not called for it and no rejection is written.
 * - An admitted request's permit is released exactly once, when `res` emits 'close' (finish, client
 *   abort, handler error, timeout), never by the adapter itself.
 * - A lost lease is counted and reported (onLost); with `onLost: 'abort'` the response is destroyed
 *   (the client sees the connection reset, or a truncated body), unless it has already finished.
 *   The handler is not stopped; it can watch `info.lease.signal`.
 *
 * The outcome comes synchronously when nothing has to wait: no `skip` option, and a store that
 * answers at once (the memory store, a permit free, nobody queued). Otherwise as a promise. Either way
 * a bug (key(), weight() and the other callbacks are guarded) is thrown or rejected: act on it with
 * whenWatched().
 */
export function admitWatched<Req>(
  admission: Admission<Req>,
  req: Req,
  res: WatchedResponse,
  /** The third argument of the onRejected hook (the framework's response object, if its request has
   * none). */
  hookRes?: unknown,
  /** Who the client of `req` is and when its body came, for an adaptive limit (read only under one). */
  requestOf?: (req: Req) => WatchedRequest,
): Watched | Promise<Watched> {
  if (!admission.config.skip) return watchAndAdmit(admission, req, res, hookRes, requestOf)
  return admission
    .skips(req)
    .then((skip) => (skip ? SKIPPED : watchAndAdmit(admission, req, res, hookRes, requestOf)))
}

/**
 * Call `act` with admitWatched()'s outcome: in this call when it came synchronously (no promise and no
 * microtask per request), else once its promise settles. `failed` gets what it threw or rejected
 * with: a bug, for the framework's error answer.
 */
export function whenWatched(
  watched: () => Watched | Promise<Watched>,
  act: (watched: Watched) => void,
  failed: (error: unknown) => void,
): void {
  let outcome: Watched | Promise<Watched>
  try {
    outcome = watched()
  } catch (error) {
    failed(error)
    return
  }
  if (isThenable(outcome)) (outcome as Promise<Watched>).then(act, failed)
  else act(outcome as Watched)
}

function watchAndAdmit<Req>(
  admission: Admission<Req>,
  req: Req,
  res: WatchedResponse,
  hookRes: unknown,
  requestOf: ((req: Req) => WatchedRequest) | undefined,
): Watched | Promise<Watched> {
  // Without this check a permit taken now would never be released: 'close' has already been emitted.
  if (res.closed === true) return GONE
  const gone = new AbortFlag()
  let held: TollgateInfo | undefined
  let sampling: Sampling | undefined
  res.once('close', () => {
    gone.abort(RESPONSE_CLOSED)
    // An adaptive limit's sample was taken when the handler ended the response (below); one the
    // handler never ended (the client left first, it failed before answering) is an abandoned one.
    if (held && sampling) admission.abandoned(held, sampling.timing())
    if (held) void admission.release(held)
    held = undefined
  })
  const decided = (result: AdmitResult): Watched => {
    if (result.outcome === 'rejected') {
      if (gone.aborted) return GONE
      const { rejection } = result
      admission.notifyRejected(req, rejection, hookRes)
      const answer = admission.config.handler ? undefined : admission.rejectionResponse(rejection, req)
      return { outcome: 'rejected', rejection, answer }
    }
    const { info, left } = result
    if (gone.aborted) {
      void admission.release(info)
      return GONE
    }
    held = info
    // Measured to the handler's end of the response, not to the client's end of reading it: a slow
    // reader holds its permit, but must not look like a slow handler to the limit every client shares.
    if (info.admittedAt !== undefined) {
      sampling = new Sampling(res, requestOf?.(req), () => {
        if (held && sampling) admission.measured(held, { status: res.statusCode }, sampling.timing())
      })
    }
    if (info.lease) {
      whenLost(info.lease, (error) => {
        if (admission.lost(info, error) && !res.writableFinished) res.destroy()
      })
    }
    return { outcome: 'admitted', info, headers: admission.policyHeaders(info.name, info.permits, left) }
  }
  const bucket = admission.bucketOf(req)
  // At once where the store can (the memory store, a permit free and nobody waiting); else wait.
  const now = admission.admitNow(bucket)
  if (now) return decided(now)
  return admission.admit(req, gone, bucket).then(decided, (error: unknown) => {
    if (gone.aborted) return GONE // the client left while waiting
    throw error // a bug: the framework answers 500
  })
}

/**
 * The timing of an adaptive limit's sample of one response: it ends at the handler's end() call (Node:
 * not at 'prefinish', which a pipelined response behind a slowly read one emits only once that one
 * is done), or at 'prefinish' where there is no end() (Hono on a fetch runtime); it starts at the
 * request body's end if that came after admission; the time the client held the handler's writes
 * back (from a write() that said false to 'drain') is left out. end() and write() are wrapped once,
 * on this response only, and always call through.
 */
class Sampling {
  private heldMs = 0
  private heldSince = 0
  private bodyEndedAt: number | undefined
  private bodyPending = false
  private readonly client: string | undefined

  constructor(res: WatchedResponse, request: WatchedRequest | undefined, ended: () => void) {
    this.client = request?.client
    const incoming = request?.incoming
    if (incoming && incoming.complete === false) {
      this.bodyPending = true
      incoming.once('end', () => {
        this.bodyPending = false
        this.bodyEndedAt = performance.now()
      })
    }
    const target = res as { write?: (...args: unknown[]) => boolean; end?: (...args: unknown[]) => unknown }
    const { write, end } = target
    if (typeof end !== 'function') {
      res.once('prefinish', ended)
      return
    }
    let done = false
    target.end = function (this: unknown, ...args: unknown[]) {
      if (!done) {
        done = true
        ended()
      }
      return end.apply(this, args)
    }
    if (typeof write !== 'function') return
    const unheld = () => {
      this.heldMs += performance.now() - this.heldSince
      this.heldSince = 0
    }
    const held = () => {
      if (done || this.heldSince !== 0) return
      this.heldSince = performance.now()
      res.once('drain', unheld)
    }
    target.write = function (this: unknown, ...args: unknown[]) {
      const ok = write.apply(this, args)
      if (!ok) held()
      return ok
    }
  }

  /** The sample's timing now. */
  timing(): SampleTiming {
    const heldMs = this.heldMs + (this.heldSince === 0 ? 0 : performance.now() - this.heldSince)
    return { bodyEndedAt: this.bodyEndedAt, bodyPending: this.bodyPending, heldMs, client: this.client }
  }
}

/** Headers that hold the policies of stacked middlewares (draft-ietf-httpapi-ratelimit-headers). */
const LIST_HEADERS = new Set(['ratelimit-policy', 'ratelimit'])

/**
 * The headers to set for `headers` on a response that may already carry an outer middleware's:
 * RateLimit-Policy and RateLimit entries of draft-8 are named, so ours join the list; draft-7 has room
 * for one policy, and the outer one is kept. Every other header replaces what is there. `ours` says
 * where this middleware stands: 'inner' when the existing value is an outer middleware's (it wrote
 * first: Express, Koa, Fastify), 'outer' when it is an inner one's (Hono, where middlewares write
 * after the handler, innermost first). Either way the outer policy comes first.
 *
 * Two stacked policies of one name (two unnamed middlewares, both 'default') stay two entries: the
 * second one written is listed as 'default-2' (then -3, ...) in this response only. Its buckets keep
 * their name; the suffix counts policies on the request, never middlewares in the process.
 */
export function mergeHeaders(
  headers: Record<string, string>,
  existing: (name: string) => unknown,
  draft: StandardHeaders,
  ours: 'inner' | 'outer' = 'inner',
): Record<string, string> {
  const merged: Record<string, string> = {}
  let rename: Renamer | undefined
  for (const [name, value] of Object.entries(headers)) {
    if (!LIST_HEADERS.has(name.toLowerCase())) {
      merged[name] = value
      continue
    }
    const list = listValue(existing(name))
    // Appending needs both entries to be draft-8 (named); a draft-7 value on either side has room for
    // one policy only: the outer one stays.
    const bothNamed = draft === 'draft-8' && list.trimStart().startsWith('"')
    if (list.trim() === '') merged[name] = value
    else if (!bothNamed) merged[name] = ours === 'inner' ? list : value
    else {
      rename ??= renamer(value, listValue(existing('RateLimit-Policy')))
      // The entry written second is the one renamed: ours when inner, the inner one's when outer.
      merged[name] = ours === 'inner' ? `${list}, ${rename.entry(value)}` : `${value}, ${rename.list(list)}`
    }
  }
  return merged
}

function listValue(current: unknown): string {
  return Array.isArray(current) ? current.join(', ') : typeof current === 'string' ? current : ''
}

interface Renamer {
  /** Our entry, under the free name if its name is taken. */
  entry(value: string): string
  /** A list whose entries of our name take the free name. */
  list(value: string): string
}

/** When the response's RateLimit-Policy already lists our policy's name, the first free
 * `<name>-<n>` (n from 2) for whichever of the two entries is written second. */
function renamer(value: string, policies: string): Renamer {
  const ours = /^"([^"]*)"/.exec(value)?.[1]
  const taken = new Set([...policies.matchAll(/(?:^|,)\s*"([^"]*)"/g)].map((m) => m[1]))
  if (ours === undefined || !taken.has(ours)) return { entry: (v) => v, list: (v) => v }
  let n = 2
  while (taken.has(`${ours}-${n}`)) n++
  const free = `"${ours}-${n}"`
  const named = new RegExp(`(^|,\\s*)"${ours.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&')}"`, 'g')
  return { entry: (v) => free + v.slice(ours.length + 2), list: (v) => v.replace(named, `$1${free}`) }
}

const encoder = new TextEncoder()

/** The headers of a rejection as every adapter sends them: with an explicit Content-Length, so the
 * framing is the same everywhere (no chunked encoding for a body known in advance). */
export function answerHeaders(answer: HttpAnswer): Record<string, string> {
  return { ...answer.headers, 'Content-Length': String(encoder.encode(answer.body).byteLength) }
}
