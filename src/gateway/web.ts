// Plain HTTP requests: understand, bound the body, admit, forward, release once on close.
import { AbortFlag } from '../core/abort.js'
import type http from 'node:http'
import type { GatewayContext } from './context.js'
import { bufferBody, ClientBodyTimeout, timedBody } from './body.js'
import {
  admitChain,
  type Exchange,
  finished,
  newExchange,
  outgoing,
  release,
  reply,
  round,
  type Understood,
  understand,
} from './exchange.js'
import type { Outgoing } from './proxy.js'

/** The abort reason of a request whose response closed (one object: no stack captured per request). */
const RESPONSE_CLOSED = new Error('response closed')

export function handleRequest(
  ctx: GatewayContext,
  req: http.IncomingMessage,
  res: http.ServerResponse,
): void {
  ctx.active++
  // The request bound counts from here: its headers have arrived (Node bounds those, headersTimeout).
  const deadlineBase = Date.now()
  const understood = understand(ctx, req)
  const route = understood.ok ? understood.route : undefined
  const exchange = newExchange(route, req)
  if (understood.ok) exchange.config = understood.config
  // Attached before any await: a client that leaves while queued aborts its wait, and the permits of
  // an admitted request are released exactly once, whatever ends the response.
  const gone = route && route.admissions.length > 0 ? new AbortFlag() : undefined
  const socket = req.socket
  let ended = false
  const end = () => {
    if (ended) return
    ended = true
    socket.off('close', end)
    if (exchange.admitting) gone?.abort(RESPONSE_CLOSED)
    release(ctx, exchange)
    finished(ctx, req, res, exchange)
    ctx.active--
    ctx.onSettled()
  }
  res.once('close', end)
  if (ctx.draining) res.setHeader('connection', 'close')
  if (!understood.ok) {
    if (understood.status === 200) return reply(res, 200, '', understood.headers)
    return refuse(ctx, res, exchange, understood.status, understood.reason)
  }
  if (!route) return refuse(ctx, res, exchange, 404, 'no_route')
  const start = () =>
    serve(ctx, req, res, exchange, understood, gone, deadlineBase).catch((error: unknown) => {
      ctx.logger.error({ err: error }, 'request failed')
      if (!res.headersSent) reply(res, 500, 'internal error\n')
      else res.destroy()
    })
  if (res.socket) {
    void start()
    return
  }
  // A pipelined request whose response waits behind others on its connection: it takes nothing
  // until its response owns the connection (then its timeouts can act on it), and a connection that
  // closes meanwhile ends it, since its response would never emit 'close'.
  socket.once('close', end)
  res.once('socket', () => {
    if (!ended) void start()
  })
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
  res: http.ServerResponse,
  exchange: Exchange,
  status: number,
  reason: string,
): void {
  exchange.refused = reason
  ctx.metrics.refused.inc({ reason })
  if (res.headersSent) return
  const headers: Record<string, string> = { 'x-request-id': exchange.requestId }
  if (status !== 404) headers.connection = 'close'
  reply(res, status, MESSAGES[status] ?? 'error\n', headers)
}

async function serve(
  ctx: GatewayContext,
  req: http.IncomingMessage,
  res: http.ServerResponse,
  exchange: Exchange,
  understood: Understood,
  gone: AbortFlag | undefined,
  deadlineBase: number,
): Promise<void> {
  const route = understood.route!
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
  let body: Outgoing['body'] = null
  let contentLength = hasBody ? declared : undefined
  const buffer = route.config.requestBufferBytes
  if (hasBody && buffer > 0) {
    // Read before a permit is taken (nginx proxy_request_buffering): a slow uploader holds nothing.
    if (declared !== undefined && declared > buffer) return refuse(ctx, res, exchange, 413, 'too_large')
    if (expectContinue) res.writeContinue()
    let read: Buffer | 'too_large'
    try {
      read = await bufferBody(req, buffer, timeouts.clientBodyMs, deadline, exchange)
    } catch (error) {
      if (error instanceof ClientBodyTimeout) return refuse(ctx, res, exchange, 408, 'body_timeout')
      throw error
    }
    if (read === 'too_large') return refuse(ctx, res, exchange, 413, 'too_large')
    body = read
    contentLength = read.length
  } else if (hasBody) {
    body = timedBody(req, timeouts.clientBodyMs, deadline, exchange)
  }
  const streamed = body !== null && !Buffer.isBuffer(body)

  let fencingToken: number | undefined
  let policy: Record<string, string> | undefined
  if (gone) {
    const chain = admitChain(ctx, understood.facts, exchange, gone, () => res.destroy())
    const result = chain instanceof Promise ? await chain : chain
    if (result.outcome === 'gone') return
    if (result.outcome === 'rejected') {
      exchange.rejected = result.rejection.reason
      if (res.headersSent) return
      const answer = result.admission.rejectionResponse(result.rejection)
      answer.headers['x-request-id'] = exchange.requestId
      // The body was not read (or a 100 Continue will not come): close the connection after.
      if (expectContinue || streamed) answer.headers.connection = 'close'
      res.writeHead(answer.status, answer.headers)
      res.end(answer.body)
      return
    }
    fencingToken = result.fencingToken
    policy = result.headers
  }
  // Sent back too (where the upstream sends none), and on the gateway's own 502/504.
  policy ??= {}
  policy['x-request-id'] = exchange.requestId
  // Only now, admitted: a client that waits for it sends its body only when it will be used.
  if (expectContinue && streamed) res.writeContinue()
  const request = outgoing(ctx, req, route, understood, fencingToken, body, contentLength, exchange.requestId)
  const routeMetrics = ctx.metrics.route(route.config.name)
  exchange.forwardedAt = performance.now()
  ctx.proxy.web(route.config.upstream, res, request, {
    timeoutMs: timeouts.upstreamMs,
    sendTimeoutMs: timeouts.sendMs,
    defaultHeaders: policy,
    extraHeaders: () => (ctx.draining ? { connection: 'close' } : undefined),
    clientError: (error) => {
      if (!(error instanceof ClientBodyTimeout)) return undefined
      exchange.refused = 'body_timeout'
      ctx.metrics.refused.inc({ reason: 'body_timeout' })
      return 408
    },
    onResponse: (status) => {
      const ms = performance.now() - exchange.forwardedAt
      exchange.upstreamStatus = status
      exchange.upstreamMs = round(ms)
      routeMetrics.upstreamSeconds.observe(ms / 1000)
    },
    onError: (error) => {
      exchange.upstreamError = error
      ctx.metrics.upstreamErrors.inc({ route: route.config.name, kind: error.kind })
    },
  })
}
