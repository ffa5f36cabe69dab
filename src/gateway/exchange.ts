// One request, from arrival to the close of its response: canonical target, route, body bounds,
// admission (every lease of the route, in order), forwarding, and the release of every lease when the
// response closes (G3, G13, G14), each counted by the request's close contract (http/close-contract.ts).
import type { AbortSignalLike } from '../core/abort.js'
import { whenLost } from '../core/client/lease.js'
import { DEFAULT_PRIORITY } from '../core/fair.js'
import type { Admission, Rejection, SampleTiming, TollgateInfo } from '../admission/admission.js'
import type { AdmitResult, Bucket } from '../admission/bucket.js'
import type { Outcome } from '../primitives/adaptive/options.js'
import type { GatewayConfig } from './config/index.js'
import type { GatewayContext } from './context.js'
import { countHeader, upstreamRequestHeaders } from './http/headers.js'
import type { Forwarded, Outgoing, UpstreamError } from './http/proxy.js'
import { type LiveRoute, matchRoute, OTHER_FLOW, type RequestFacts } from './routes.js'
import { canonicalTarget, normalizeHost } from './http/target.js'
import { type FairMetrics, statusClass } from './ops/metrics.js'
import { CloseContract } from './http/close-contract.js'
import { boundSend } from './http/send-bound.js'
import type { ClientRequest, ClientResponse } from './http/client.js'
import { trustOf } from './http/trust.js'
import { requestIdOf } from './http/request-id.js'
import { ACCESS_MESSAGE, type AccessLine, accessRecord } from './ops/access-log.js'
import type { RequestTrace } from './ops/tracing.js'
import { policyValue, remainingValue } from '../admission/response.js'

/** Per-request state, from arrival to the response's close. */
export interface Exchange {
  route: LiveRoute | undefined
  started: number
  admittedAt: number | undefined
  waitMs: number
  /** Leases held right now, with the admission each came from. */
  held: { admission: Admission<RequestFacts>; info: TollgateInfo }[]
  /** Counted in tollgate_requests_in_flight. */
  inFlight: boolean
  /** Waiting in admitChain(): a close must abort the wait. */
  admitting: boolean
  upstreamError: UpstreamError | undefined
  /** Why the gateway answered by itself (400, 404, 408, 413, ...), for the access log. */
  refused: string | undefined
  /** Why a limit rejected the request (busy, timeout, queue_full, store_unavailable). */
  rejected: string | undefined
  /** X-Request-Id: the client's, or a new one; sent upstream and back to the client. */
  requestId: string
  /** performance.now() when the request was forwarded. */
  forwardedAt: number
  upstreamStatus: number | undefined
  upstreamMs: number | undefined
  /** Request body bytes read from the client. */
  bytesIn: number
  /** The client connection's bytesWritten when the request arrived. */
  bytesOutBefore: number
  /** The config the request was routed under (undefined: answered before that). */
  config: GatewayConfig | undefined
  /** The request being forwarded upstream, once it is. */
  forward: Forwarded | undefined
  /** The client's address (the trusted-proxy rule's), for an adaptive limit's drop decision. */
  client: string | undefined
  /** The request body is streamed from the client (not read before admission). */
  bodyStreamed: boolean
  /** performance.now() when that body's last byte came (undefined: not yet). */
  bodyEndedAt: number | undefined
  /** The request's span, while a tracer provider is registered (ops/tracing.ts). */
  trace: RequestTrace | undefined
  /** Its close, its upstream's end and its permits' releases, each checked once. */
  readonly contract: CloseContract
}

/** What admitting a request through every admission of its route came to. */
export type ChainResult =
  | { outcome: 'admitted'; headers: Record<string, string>; fencingToken: number | undefined }
  | { outcome: 'rejected'; admission: Admission<RequestFacts>; rejection: Rejection }
  | { outcome: 'gone' }

export function newExchange(ctx: GatewayContext, route: LiveRoute | undefined, req: ClientRequest): Exchange {
  return {
    route,
    started: performance.now(),
    admittedAt: undefined,
    waitMs: 0,
    held: [],
    inFlight: false,
    admitting: false,
    upstreamError: undefined,
    refused: undefined,
    rejected: undefined,
    requestId: requestIdOf(req),
    forwardedAt: 0,
    upstreamStatus: undefined,
    upstreamMs: undefined,
    bytesIn: 0,
    bytesOutBefore: req.socket.bytesWritten,
    config: undefined,
    forward: undefined,
    client: undefined,
    bodyStreamed: false,
    bodyEndedAt: undefined,
    trace: undefined,
    contract: new CloseContract(ctx.contractBreach),
  }
}

/** A request routed: what routing and admission see, and the parts of its canonical target. */
export interface RoutedRequest {
  ok: true
  /** The config this request was routed under: the rest of its life reads this one, not a
   * config a reload swapped in meanwhile. */
  config: GatewayConfig
  facts: RequestFacts
  route: LiveRoute | undefined
  /** Canonical path (what the upstream gets, before stripPrefix). */
  path: string
  /** Raw query with its '?', or ''. */
  query: string
  /** Host header to send upstream (the absolute-form target's authority wins over Host). */
  host: string | undefined
}

/** A request the gateway answers at once (400, or 200 for OPTIONS *). */
export interface AnsweredAtOnce {
  ok: false
  status: number
  reason: string
  headers?: Record<string, string>
}

/** The request as admission and routing see it, or the status to answer at once. */
export function routeRequest(ctx: GatewayContext, req: ClientRequest): RoutedRequest | AnsweredAtOnce {
  const method = req.method ?? 'GET'
  // RFC 9112 §3.2: a request with more than one Host field line is answered 400.
  if (countHeader(req.rawHeaders, 'host') > 1) return { ok: false, status: 400, reason: 'duplicate_host' }
  const config = ctx.config
  const target = canonicalTarget(req.url ?? '/', method, config.paths)
  if (target.kind === 'invalid') return { ok: false, status: 400, reason: 'bad_target' }
  if (target.kind === 'asterisk') {
    const allow = 'GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS'
    return { ok: false, status: 200, reason: 'options_asterisk', headers: { allow } }
  }
  const rawHost = target.host ?? req.headers.host
  const host = rawHost === undefined ? undefined : normalizeHost(rawHost)
  if (rawHost !== undefined && host === undefined) return { ok: false, status: 400, reason: 'bad_host' }
  const facts: RequestFacts = {
    method,
    match: target.match,
    headers: req.headers,
    clientAddress: trustOf(config).clientAddress(req),
    weight: 1,
    priority: DEFAULT_PRIORITY,
    flow: undefined,
    flowLabel: OTHER_FLOW,
  }
  const route = matchRoute(ctx.routes, method, target.match, host)
  if (route?.config.concurrency) route.decide(facts)
  return {
    ok: true,
    config,
    facts,
    route,
    path: target.path,
    query: target.query,
    host: target.host ?? req.headers.host,
  }
}

/** What admitting a request has gathered so far (admitChain). */
interface Taken {
  headers: Record<string, string>
  fencingToken: number | undefined
}

/**
 * Take the request's leases from every admission of its route, in order. A rejection gives back
 * what was taken before it; so does a client that leaves. Never rejects. Answers synchronously (no
 * promise) when every admission takes its permit at once from a store that can (the memory store's
 * uncontended path); otherwise the rest of the chain runs asynchronously from the first admission
 * that cannot.
 */
export function admitChain(
  ctx: GatewayContext,
  facts: RequestFacts,
  exchange: Exchange,
  signal: AbortSignalLike,
  abort: () => void,
): ChainResult | Promise<ChainResult> {
  const admissions = exchange.route!.admissions
  const taken: Taken = { headers: {}, fencingToken: undefined }
  fairOf(ctx, exchange)?.arrived(facts)
  for (let i = 0; i < admissions.length; i++) {
    const admission = admissions[i] as Admission<RequestFacts>
    let bucket: Bucket
    let result: AdmitResult | undefined
    try {
      bucket = admission.bucketOf(facts)
      result = admission.admitNow(bucket)
    } catch (error) {
      release(ctx, exchange) // what earlier admissions of the chain took goes back
      throw error // a bug (e.g. a throwing key function): answered with 500 by the caller
    }
    if (!result) return admitRest(ctx, facts, exchange, signal, abort, taken, i, bucket)
    const ended = take(ctx, facts, exchange, admission, result, taken, signal, abort)
    if (ended) return ended
  }
  return admitted(ctx, facts, exchange, taken)
}

/** admitChain() from admission `from` on (whose bucket is `bucket`), waiting where it must. */
async function admitRest(
  ctx: GatewayContext,
  facts: RequestFacts,
  exchange: Exchange,
  signal: AbortSignalLike,
  abort: () => void,
  taken: Taken,
  from: number,
  firstBucket: Bucket,
): Promise<ChainResult> {
  const admissions = exchange.route!.admissions
  exchange.admitting = true
  const fair = fairOf(ctx, exchange)
  fair?.waiting(facts, 1)
  try {
    for (let i = from; i < admissions.length; i++) {
      const admission = admissions[i] as Admission<RequestFacts>
      let result: AdmitResult
      try {
        result = await admission.admit(facts, signal, i === from ? firstBucket : admission.bucketOf(facts))
      } catch (error) {
        if (signal.aborted) return { outcome: 'gone' } // the client left while waiting
        release(ctx, exchange) // what earlier admissions of the chain took goes back
        throw error // a bug (e.g. a throwing key function): answered with 500 by the caller
      }
      const ended = take(ctx, facts, exchange, admission, result, taken, signal, abort)
      if (ended) return ended
    }
  } finally {
    exchange.admitting = false
    fair?.waiting(facts, -1)
  }
  return admitted(ctx, facts, exchange, taken)
}

/** The route's counts by class and flow, if its cap is a fair queue. */
function fairOf(ctx: GatewayContext, exchange: Exchange): FairMetrics | undefined {
  const route = exchange.route!
  return route.fair ? ctx.metrics.route(route.config.name).fair() : undefined
}

/** One admission's answer: held, or the chain ends (rejected, or the client left). */
function take(
  ctx: GatewayContext,
  facts: RequestFacts,
  exchange: Exchange,
  admission: Admission<RequestFacts>,
  result: AdmitResult,
  taken: Taken,
  signal: AbortSignalLike,
  abort: () => void,
): ChainResult | undefined {
  const { metrics } = ctx
  const name = exchange.route!.config.name
  if (result.outcome === 'rejected') {
    const { reason } = result.rejection
    metrics.rejected.inc({ route: name, reason })
    fairOf(ctx, exchange)?.rejected(facts, reason)
    if (reason === 'store_unavailable') metrics.storeErrors.inc({ route: name })
    release(ctx, exchange)
    return signal.aborted
      ? { outcome: 'gone' }
      : { outcome: 'rejected', admission, rejection: result.rejection }
  }
  const { info, left } = result
  exchange.waitMs += info.waitedMs
  if (!info.lease) {
    // Passed without a lease: the store failed and failOpen is on.
    metrics.storeErrors.inc({ route: name })
    metrics.failedOpen.inc({ route: name })
  } else {
    exchange.held.push({ admission, info })
    exchange.contract.took()
    whenLost(info.lease, (error) => {
      metrics.leaseLost.inc({ route: name })
      if (admission.lost(info, error)) abort()
    })
    taken.fencingToken ??= info.fencingToken // the first lease taken: the resource lock's, if any
  }
  // Lower-case names: the proxy adds them where the upstream's (lower-cased) headers lack them.
  if (admission.config.headers && info.permits !== undefined) {
    taken.headers['ratelimit-policy'] = policyValue(info.name, info.permits)
    taken.headers.ratelimit = remainingValue(info.name, left)
  }
  if (signal.aborted) {
    release(ctx, exchange) // the client left while we were being admitted
    return { outcome: 'gone' }
  }
  return undefined
}

function admitted(ctx: GatewayContext, facts: RequestFacts, exchange: Exchange, taken: Taken): ChainResult {
  if (exchange.held.length > 0) {
    const bound = ctx.metrics.route(exchange.route!.config.name)
    bound.admitted++
    if (exchange.route!.fair) bound.fair().admitted(facts)
    bound.waitSeconds.observe(exchange.waitMs / 1000)
    bound.inFlight++
    exchange.inFlight = true
    exchange.admittedAt = performance.now()
  }
  return { outcome: 'admitted', headers: taken.headers, fencingToken: taken.fencingToken }
}

/** Give every held lease back and remember the pending releases so shutdown can await them. Called
 * whenever a request lets go (a rejection, a client gone while admitted, its close); each lease goes
 * once, as its close contract checks. upstreamEnded() took the sample of a request whose upstream
 * ended; one forwarded whose client left first is an abandoned one (its time so far:
 * Admission.abandoned()); one never forwarded is none. */
export function release(ctx: GatewayContext, exchange: Exchange): void {
  if (exchange.inFlight) {
    exchange.inFlight = false
    ctx.metrics.route(exchange.route!.config.name).inFlight--
  }
  if (exchange.held.length === 0) return
  const forward = exchange.forward
  for (const { admission, info } of exchange.held.splice(0)) {
    if (!exchange.contract.release()) continue
    // (Under an adaptive limit only, and once: Admission.abandoned().)
    if (forward && info.admittedAt !== undefined && !info.sampled)
      admission.abandoned(info, timingOf(exchange, forward.heldSoFar()))
    // Counts, and logs a failed release (the lease then expires by itself).
    const pending = admission.release(info)
    if (pending) ctx.releases.track(pending)
  }
}

/** The upstream's response ended: its last byte came, or it failed or timed out. An adaptive limit
 * takes the request's sample now, not once the client has read the response (a slow reader must
 * not look like a slow upstream), and from the request body's last byte if that came after
 * admission (a slow uploader must not either); `heldMs`, the time the client held the upstream back,
 * is left out of it. The leases stay held until release(). */
export function upstreamEnded(exchange: Exchange, heldMs: number): void {
  const held = exchange.held
  if (held.length === 0) return
  let timing: SampleTiming | undefined
  for (let i = 0; i < held.length; i++) {
    const { admission, info } = held[i] as Exchange['held'][number]
    // (Under an adaptive limit only: Admission.measured().)
    if (info.admittedAt === undefined) continue
    timing ??= timingOf(exchange, heldMs)
    admission.measured(info, outcomeOf(exchange), timing)
  }
}

function timingOf(exchange: Exchange, heldMs: number): SampleTiming {
  const { bodyEndedAt, client } = exchange
  return { bodyEndedAt, bodyPending: exchange.bodyStreamed && bodyEndedAt === undefined, heldMs, client }
}

/** How a forwarded request ended upstream, as an adaptive limit counts it: the upstream timed out;
 * it failed otherwise (counted as the 502 the client got); or its status. (A slow request body runs
 * no upstream timeout: undici starts it once the body is sent.) */
function outcomeOf(exchange: Exchange): Outcome | undefined {
  const error = exchange.upstreamError
  if (error) return error.kind === 'timeout' ? { timedOut: true } : { status: 502 }
  return exchange.upstreamStatus === undefined ? undefined : { status: exchange.upstreamStatus }
}

/** The request to send upstream: canonical path (minus a stripped prefix) under the upstream's base path. */
export function outgoing(
  ctx: GatewayContext,
  req: ClientRequest,
  route: LiveRoute,
  parts: { path: string; query: string; host: string | undefined; config: GatewayConfig },
  fencingToken: number | undefined,
  body: Outgoing['body'],
  contentLength: number | undefined,
  requestId: string,
): Outgoing {
  const config = route.config
  let path = parts.path
  if (config.stripPrefix && config.pathPrefix !== '/') {
    const rest = path.slice(
      config.pathPrefix.endsWith('/') ? config.pathPrefix.length - 1 : config.pathPrefix.length,
    )
    path = rest.startsWith('/') ? rest : `/${rest}`
  }
  const base = config.upstream.pathname.replace(/\/$/, '')
  const headers = upstreamRequestHeaders(
    req.rawHeaders,
    {
      clientAddress: req.socket.remoteAddress,
      host: parts.host,
      port: req.socket.localPort,
      proto: 'http',
      trustProxy: trustOf(parts.config).peerTrusted(req),
      fencingToken,
      requestId,
    },
    parts.host ?? config.upstream.host,
  )
  return { method: req.method ?? 'GET', path: `${base}${path}${parts.query}`, headers, body, contentLength }
}

/** One access-log line and the response metrics, when the response has closed. */
export function finished(
  ctx: GatewayContext,
  req: ClientRequest,
  res: ClientResponse,
  exchange: Exchange,
): void {
  const now = performance.now()
  // 499: the client closed the connection before a response was sent (nginx's convention).
  const status = res.headersSent ? res.statusCode : 499
  const route = exchange.route?.config.name ?? 'unmatched'
  if (exchange.route) {
    const bound = ctx.metrics.route(route)
    const index = statusClass(status)
    bound.responses[index] = (bound.responses[index] ?? 0) + 1
    bound.requestSeconds.observe((now - exchange.started) / 1000)
  }
  if (!ctx.logger.isLevelEnabled('info')) return
  const aborted = res.writableFinished ? undefined : true
  // Sampling keeps every error, rejection and aborted request; only successes are thinned.
  const config = exchange.config ?? ctx.config
  const sample = config.accessLogSample
  if (sample < 1 && status < 400 && !aborted && Math.random() >= sample) return
  const line: AccessLine = {
    id: exchange.requestId,
    method: req.method,
    url: req.url,
    remoteAddress: trustOf(config).clientAddress(req),
    statusCode: status,
    responseTime: round(now - exchange.started),
    route,
    upstreamStatus: exchange.upstreamStatus,
    bytesIn: exchange.bytesIn,
    bytesOut: req.socket.bytesWritten - exchange.bytesOutBefore,
    waitMs: round(exchange.waitMs),
    holdMs: exchange.admittedAt === undefined ? 0 : round(now - exchange.admittedAt),
    upstreamMs: exchange.upstreamMs,
    rejected: exchange.rejected,
    refused: exchange.refused,
    upstreamError: exchange.upstreamError?.kind,
    aborted,
  }
  if (ctx.accessLog) ctx.accessLog(line)
  else ctx.logger.info(accessRecord(line), ACCESS_MESSAGE)
}

/** A response the gateway writes itself, bounded as a proxied one (send-bound.ts). */
export function reply(
  res: ClientResponse,
  sendMs: number,
  status: number,
  body: string,
  headers: Record<string, string> = {},
): void {
  res.writeHead(status, {
    'content-type': 'text/plain; charset=utf-8',
    'content-length': Buffer.byteLength(body),
    ...headers,
  })
  res.end(body)
  boundSend(res, sendMs)
}

/** The send bound of what the gateway answers for `exchange`: its route's, or before one is known,
 * the defaults'. */
export function sendMsOf(ctx: GatewayContext, exchange: Exchange): number {
  return exchange.route?.config.timeouts.sendMs ?? (exchange.config ?? ctx.config).sendTimeoutMs
}

/** Milliseconds as the access log writes them: to a tenth. */
export function round(ms: number): number {
  return Math.round(ms * 10) / 10
}
