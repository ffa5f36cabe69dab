// One plain HTTP request (an Upgrade is websocket.ts's): route, bound the body, admit, forward,
// release on close. Both front ends (Node's http.Server and the lean one) hand theirs here.
import { AbortFlag } from '../core/abort.js'
import { isThenable } from '../core/thenable.js'
import http from 'node:http'
import type { ClientRequest, ClientResponse } from './http/client.js'
import type { GatewayContext } from './context.js'
import { bufferBody, ClientBodyTimeout, timedBody } from './http/body.js'
import {
  admitChain,
  type ChainResult,
  type Exchange,
  finished,
  newExchange,
  outgoing,
  release,
  reply,
  round,
  sendMsOf,
  type RoutedRequest,
  routeRequest,
  upstreamEnded,
} from './exchange.js'
import type { Outgoing, UpstreamError, WebOptions } from './http/proxy.js'
import type { LiveRoute } from './routes.js'
import { oneAtATime, whenConnectionCloses } from './http/pipelining.js'
import type { CloseSource, CloseContract } from './http/close-contract.js'
import { boundSend } from './http/send-bound.js'
import { endRequestSpan, inSpan, startRequestSpan, withTraceContext } from './ops/tracing.js'

/** The abort reason of a request whose response closed (one object: no stack captured per request). */
const RESPONSE_CLOSED = new Error('response closed')

export function handleRequest(ctx: GatewayContext, req: ClientRequest, res: ClientResponse): void {
  // http.Server's connections: one request at a time (a lean connection serves one by construction).
  if (req instanceof http.IncomingMessage && !oneAtATime(req, res)) return
  ctx.active++
  // The request bound counts from here: its headers have arrived (Node bounds those, headersTimeout).
  const deadlineBase = Date.now()
  const routed = routeRequest(ctx, req)
  const route = routed.ok ? routed.route : undefined
  const exchange = newExchange(ctx, route, req)
  exchange.trace = startRequestSpan(req, route?.config.name)
  if (routed.ok) {
    exchange.config = routed.config
    exchange.client = routed.facts.clientAddress
  }
  // Attached before any await: a client that leaves while queued aborts its wait, and whatever ends
  // the response ends the request as its close contract says (http/close-contract.ts).
  const gone = route && route.admissions.length > 0 ? new AbortFlag() : undefined
  let forgetClose: (() => void) | undefined = undefined
  const end = (source: CloseSource) => {
    const contract = exchange.contract
    if (!contract.close(source)) return
    forgetClose?.()
    exchange.forward?.clientClosed()
    if (exchange.admitting) gone?.abort(RESPONSE_CLOSED)
    release(ctx, exchange)
    contract.releasedAll()
    if (exchange.trace) endRequestSpan(exchange.trace, res, exchange.rejected ?? exchange.refused)
    finished(ctx, req, res, exchange)
    ctx.active--
    ctx.onSettled()
  }
  // 'on', not 'once': a second 'close' of the response must reach the contract.
  res.on('close', () => end('response'))
  // A pipelined request whose response waits behind others on its connection (http.Server's): a
  // connection that closes meanwhile ends it, since its response would never emit 'close'.
  if (!res.socket) forgetClose = whenConnectionCloses(req, () => end('connection'))
  if (ctx.draining) res.setHeader('connection', 'close')
  if (!routed.ok) {
    if (routed.status === 200) return reply(res, sendMsOf(ctx, exchange), 200, '', routed.headers)
    return refuse(ctx, res, exchange, routed.status, routed.reason)
  }
  if (!route) return refuse(ctx, res, exchange, 404, 'no_route')
  if (res.socket) return start(ctx, req, res, exchange, routed, gone, deadlineBase)
  // Waiting behind others, it takes nothing until its response owns the connection (then its
  // timeouts can act on it).
  res.once('socket', () => {
    if (!exchange.contract.closed) start(ctx, req, res, exchange, routed, gone, deadlineBase)
  })
}

/** serve(), with a bug (a throw, synchronous or not) answered 500 instead of crashing. */
function start(
  ctx: GatewayContext,
  req: ClientRequest,
  res: ClientResponse,
  exchange: Exchange,
  routed: RoutedRequest,
  gone: AbortFlag | undefined,
  deadlineBase: number,
): void {
  try {
    inSpan(exchange.trace, () => serve(ctx, req, res, exchange, routed, gone, deadlineBase))?.catch(
      (error: unknown) => failed(ctx, res, exchange, error),
    )
  } catch (error) {
    failed(ctx, res, exchange, error)
  }
}

function failed(ctx: GatewayContext, res: ClientResponse, exchange: Exchange, error: unknown): void {
  ctx.logger.error({ err: error }, 'request failed')
  if (!res.headersSent) reply(res, sendMsOf(ctx, exchange), 500, 'internal error\n')
  else res.destroy()
}

const EXPECT_CONTINUE = /(?:^|\W)100-continue(?:$|\W)/i

const MESSAGES: Record<number, string> = {
  400: 'bad request\n',
  501: 'transfer coding not implemented\n',
  404: 'no route\n',
  408: 'request timeout\n',
  413: 'request body too large\n',
}

/** The gateway answers by itself. Errors close the connection (an unread body is not worth keeping it
 * for); 404 keeps it. */
function refuse(
  ctx: GatewayContext,
  res: ClientResponse,
  exchange: Exchange,
  status: number,
  reason: string,
): undefined {
  exchange.refused = reason
  ctx.metrics.refused.inc({ reason })
  if (res.headersSent) return
  const headers: Record<string, string> = { 'x-request-id': exchange.requestId }
  if (status !== 404) headers.connection = 'close'
  reply(res, sendMsOf(ctx, exchange), status, MESSAGES[status] ?? 'error\n', headers)
}

/**
 * Bound the body, admit, forward. Synchronous (no promise) on the common path: no buffered body and
 * an admission that answers at once (the memory store); a promise where it must wait.
 */
function serve(
  ctx: GatewayContext,
  req: ClientRequest,
  res: ClientResponse,
  exchange: Exchange,
  routed: RoutedRequest,
  gone: AbortFlag | undefined,
  deadlineBase: number,
): Promise<void> | undefined {
  const route = routed.route!
  const timeouts = route.config.timeouts
  const deadline = deadlineBase + timeouts.requestMs
  // As Node reads it (checkContinue); never for HTTP/1.0, which has no 100 (RFC 9110 §10.1.1).
  const expectContinue = req.httpVersion === '1.1' && EXPECT_CONTINUE.test(req.headers.expect ?? '')
  const length = req.headers['content-length']
  const declared = length === undefined ? undefined : Number(length)
  const coding = req.headers['transfer-encoding']
  // Only chunked is understood: another coding would reach the upstream unlabelled (nginx: 501).
  if (coding !== undefined && coding.trim().toLowerCase() !== 'chunked')
    return refuse(ctx, res, exchange, 501, 'transfer_coding')
  const hasBody = coding !== undefined || (declared !== undefined && declared > 0)
  const buffer = route.config.requestBufferBytes
  const sending: Sending = {
    body: null,
    contentLength: hasBody ? declared : undefined,
    expectContinue,
    streamed: false,
  }
  if (hasBody && buffer > 0) {
    // Read before a permit is taken (nginx proxy_request_buffering): a slow uploader holds nothing.
    if (declared !== undefined && declared > buffer) return refuse(ctx, res, exchange, 413, 'too_large')
    if (expectContinue) res.writeContinue()
    return bufferBody(bodyOf(req), buffer, timeouts.clientBodyMs, deadline, exchange).then(
      (read) => {
        if (read === 'too_large') return refuse(ctx, res, exchange, 413, 'too_large')
        sending.body = read
        sending.contentLength = read.length
        return admitAndForward(ctx, req, res, exchange, routed, gone, sending)
      },
      (error: unknown) => {
        if (error instanceof ClientBodyTimeout) return refuse(ctx, res, exchange, 408, 'body_timeout')
        if (req.destroyed) return undefined // the client left mid-body: nothing to answer, no error
        throw error
      },
    )
  } else if (hasBody) {
    const incoming = bodyOf(req)
    sending.body = timedBody(incoming, timeouts.clientBodyMs, deadline, exchange)
    sending.streamed = true
    // An adaptive limit measures the upstream from the body's last byte: the upstream could not
    // answer before, and a client that sends its body slowly is no slow upstream.
    exchange.bodyStreamed = true
    incoming.once('end', () => (exchange.bodyEndedAt = performance.now()))
  }
  return admitAndForward(ctx, req, res, exchange, routed, gone, sending)
}

/** A request with a body is Node's: the lean front end hands those to http.Server (lean/request.ts). */
function bodyOf(req: ClientRequest): http.IncomingMessage {
  if (!(req instanceof http.IncomingMessage)) throw new Error('a request with a body on the lean path')
  return req
}

/** The request body as it will be sent, and how the client sends it. */
interface Sending {
  body: Outgoing['body']
  contentLength: number | undefined
  expectContinue: boolean
  /** Streamed from the client (not read yet): a rejection closes the connection after it. */
  streamed: boolean
}

function admitAndForward(
  ctx: GatewayContext,
  req: ClientRequest,
  res: ClientResponse,
  exchange: Exchange,
  routed: RoutedRequest,
  gone: AbortFlag | undefined,
  sending: Sending,
): Promise<void> | undefined {
  if (!gone) return forward(ctx, req, res, exchange, routed, sending, undefined, {})
  const chain = admitChain(ctx, routed.facts, exchange, gone, () => res.destroy())
  if (isThenable(chain))
    return (chain as Promise<ChainResult>).then((result) =>
      admitted(ctx, req, res, exchange, routed, sending, result),
    )
  return admitted(ctx, req, res, exchange, routed, sending, chain as ChainResult)
}

function admitted(
  ctx: GatewayContext,
  req: ClientRequest,
  res: ClientResponse,
  exchange: Exchange,
  routed: RoutedRequest,
  sending: Sending,
  result: ChainResult,
): undefined {
  if (result.outcome === 'gone') return
  if (result.outcome === 'rejected') {
    exchange.rejected = result.rejection.reason
    if (res.headersSent) return
    const answer = result.admission.rejectionResponse(result.rejection)
    answer.headers['x-request-id'] = exchange.requestId
    // The body was not read (or a 100 Continue will not come): close the connection after.
    if (sending.expectContinue || sending.streamed) answer.headers.connection = 'close'
    res.writeHead(answer.status, answer.headers)
    res.end(answer.body)
    boundSend(res, sendMsOf(ctx, exchange))
    return
  }
  return forward(ctx, req, res, exchange, routed, sending, result.fencingToken, result.headers)
}

function forward(
  ctx: GatewayContext,
  req: ClientRequest,
  res: ClientResponse,
  exchange: Exchange,
  routed: RoutedRequest,
  sending: Sending,
  fencingToken: number | undefined,
  policy: Record<string, string>,
): undefined {
  const route = routed.route!
  // Sent back too (where the upstream sends none), and on the gateway's own 502/504.
  policy['x-request-id'] = exchange.requestId
  // Only now, admitted: a client that waits for it sends its body only when it will be used.
  if (sending.expectContinue && sending.streamed) res.writeContinue()
  const request = outgoing(
    ctx,
    req,
    route,
    routed,
    fencingToken,
    sending.body,
    sending.contentLength,
    exchange.requestId,
  )
  if (exchange.trace) request.headers = withTraceContext(exchange.trace, request.headers)
  exchange.forwardedAt = performance.now()
  exchange.forward = ctx.proxy.web(route.config.upstream, res, request, new Forwarding(ctx, exchange, policy))
  return undefined
}

/** What forwarding one request reports back (WebOptions as one object per request, not closures). */
class Forwarding implements WebOptions {
  readonly timeoutMs: number
  readonly sendTimeoutMs: number
  readonly contract: CloseContract

  constructor(
    private readonly ctx: GatewayContext,
    private readonly exchange: Exchange,
    /** Sent back too (where the upstream sends none), and on the gateway's own 502/504. */
    readonly defaultHeaders: Record<string, string>,
  ) {
    const timeouts = (exchange.route as LiveRoute).config.timeouts
    this.timeoutMs = timeouts.upstreamMs
    this.sendTimeoutMs = timeouts.sendMs
    this.contract = exchange.contract
  }

  extraHeaders(): Record<string, string> | undefined {
    return this.ctx.draining ? { connection: 'close' } : undefined
  }

  clientError(error: Error): number | undefined {
    if (!(error instanceof ClientBodyTimeout)) return undefined
    this.exchange.refused = 'body_timeout'
    this.ctx.metrics.refused.inc({ reason: 'body_timeout' })
    return 408
  }

  onResponse(status: number): void {
    const exchange = this.exchange
    const ms = performance.now() - exchange.forwardedAt
    exchange.upstreamStatus = status
    exchange.upstreamMs = round(ms)
    this.ctx.metrics.route((exchange.route as LiveRoute).config.name).upstreamSeconds.observe(ms / 1000)
  }

  onUpstreamEnd(heldMs: number): void {
    upstreamEnded(this.exchange, heldMs)
  }

  onError(error: UpstreamError): void {
    this.exchange.upstreamError = error
    const route = (this.exchange.route as LiveRoute).config.name
    this.ctx.metrics.upstreamErrors.inc({ route, kind: error.kind })
  }
}
