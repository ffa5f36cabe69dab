// Upgrade requests (WebSocket): the same target, route and admission as a request; the permits are
// held for the life of the tunnel and released when the client socket closes. Bounded (G14): the
// upstream must answer the handshake within the upstream timeout, a tunnel silent both ways for
// websocketIdleMs is closed, and a side that ends its half ends the tunnel. Traced as a request is
// (ops/tracing.ts): its span ends with the handshake's answer, not with the tunnel, which may last
// hours (a span is exported only once it ends).
import { AbortFlag } from '../core/abort.js'
import http from 'node:http'
import type { Duplex } from 'node:stream'
import type { GatewayContext } from './context.js'
import { admitChain, type ChainResult, newExchange, outgoing, release, routeRequest } from './exchange.js'
import { endSpanWith, inSpan, startRequestSpan, withTraceContext } from './ops/tracing.js'

const RESPONSE_CLOSED = new Error('response closed')

export function handleUpgrade(
  ctx: GatewayContext,
  req: http.IncomingMessage,
  socket: Duplex,
  head: Buffer,
): void {
  socket.on('error', () => {})
  const routed = routeRequest(ctx, req)
  const route = routed.ok ? routed.route : undefined
  const trace = startRequestSpan(req, route?.config.name)
  let answered = false
  /** The handshake's answer to the client, once: it ends the span. */
  const answer = (status: number, outcome?: string) => {
    if (answered) return
    answered = true
    if (trace) endSpanWith(trace, status, outcome)
  }
  if (!routed.ok || !route || ctx.draining) {
    const status = !routed.ok ? 400 : !route ? 404 : 503
    const reason = !routed.ok ? routed.reason : !route ? 'no_route' : 'draining'
    ctx.metrics.refused.inc({ reason })
    // Destroyed once written: a half-closed socket would keep server.close() waiting forever.
    socket.end(rawResponse(status), () => socket.destroy())
    answer(status, reason)
    return
  }
  ctx.active++
  ctx.tunnels.add(socket)
  const exchange = newExchange(ctx, route, req)
  const gone = new AbortFlag()
  // The tunnel's close is the request's (its close contract: http/close-contract.ts).
  socket.once('close', () => {
    answer(499) // the client left before the handshake was answered
    if (!exchange.contract.close('response')) return
    ctx.tunnels.delete(socket)
    gone.abort(RESPONSE_CLOSED)
    release(ctx, exchange)
    exchange.contract.releasedAll()
    ctx.active--
    ctx.onSettled()
  })
  const name = route.config.name
  // A synchronous throw (a bug) must reach the handler below like a rejection does, not the process.
  void new Promise<ChainResult>((resolve) =>
    resolve(inSpan(trace, () => admitChain(ctx, routed.facts, exchange, gone, () => socket.destroy()))),
  ).then(
    (result) => {
      if (result.outcome === 'gone') return
      if (result.outcome === 'rejected') {
        const { status, retryAfterS, reason } = result.rejection
        socket.end(rawResponse(status, { 'retry-after': String(retryAfterS) }), () => socket.destroy())
        answer(status, reason)
        return
      }
      const request = outgoing(
        ctx,
        req,
        route,
        routed,
        result.fencingToken,
        null,
        undefined,
        exchange.requestId,
      )
      if (trace) request.headers = withTraceContext(trace, request.headers)
      const timeouts = route.config.timeouts
      ctx.proxy.ws(
        route.config.upstream,
        socket,
        head,
        { ...request, upgrade: req.headers.upgrade ?? 'websocket' },
        {
          handshakeTimeoutMs: timeouts.upstreamMs,
          idleTimeoutMs: timeouts.websocketIdleMs,
          sendTimeoutMs: timeouts.sendMs,
          onError: (error) => ctx.metrics.upstreamErrors.inc({ route: name, kind: error.kind }),
          onAnswer: (status) => answer(status),
        },
      )
    },
    (error: unknown) => {
      ctx.logger.error({ err: error }, 'admission failed')
      answer(500, 'error')
      socket.destroy()
    },
  )
}

function rawResponse(status: number, headers: Record<string, string> = {}): string {
  const lines = [
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? ''}`,
    'connection: close',
    'content-length: 0',
  ]
  for (const [name, value] of Object.entries(headers)) lines.push(`${name}: ${value}`)
  return `${lines.join('\r\n')}\r\n\r\n`
}
