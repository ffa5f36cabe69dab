// Upgrade requests (WebSocket): the same target, route and admission as a request; the permits are
// held for the life of the tunnel and released when the client socket closes. Bounded (G14): the
// upstream must answer the handshake within the upstream timeout, a tunnel silent both ways for
// websocketIdleMs is closed, and a side that ends its half ends the tunnel. Traced as a request is
// (ops/tracing.ts): its span ends with the handshake's answer, not with the tunnel, which may last
// hours (a span is exported only once it ends).
import { AbortFlag } from '../core/abort.js'
import http from 'node:http'
import { Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import type { GatewayContext } from './context.js'
import { admitChain, type ChainResult, newExchange, outgoing, release, routeRequest } from './exchange.js'
import { probeWhilePaused } from './http/reset-probe.js'
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
  /** The handshake's answer to the client, once: it ends the span. A client already gone got none
   * (499), whatever was on its way to it; the outcome still says what the gateway decided. */
  const answer = (status: number | undefined, outcome?: string) => {
    if (answered) return
    answered = true
    if (trace) endSpanWith(trace, socket.destroyed ? 499 : status, outcome)
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
  const waiting = readWhileWaiting(socket)
  // A synchronous throw (a bug) must reach the handler below like a rejection does, not the process.
  void new Promise<ChainResult>((resolve) =>
    resolve(inSpan(trace, () => admitChain(ctx, routed.facts, exchange, gone, () => socket.destroy()))),
  ).then(
    (result) => {
      const early = waiting.stop()
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
        early.length > 0 ? Buffer.concat([head, ...early]) : head,
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
      waiting.stop()
      ctx.logger.error({ err: error }, 'admission failed')
      answer(undefined, 'error') // the client is sent nothing: its socket is closed
      socket.destroy()
    },
  )
}

/** Most bytes, and most reads, a client may send after its handshake while it waits for its permit:
 * then the socket is left unread (and probed for a reset) until the wait ends. Reads count too: a
 * client sending a byte per packet costs a Buffer per byte (~350 bytes each). */
const EARLY_MAX = 64 * 1024
const EARLY_READS = 64

/**
 * Read the client while its handshake waits for a permit, as http.Server reads a plain request's
 * connection: a client that leaves (FIN or reset) is seen at once and gives its place in the queue
 * back (the socket's 'close'), where an unread socket would keep it until maxWaitMs. What it sent
 * after the handshake (a client may, before the 101) is kept, at most EARLY_MAX bytes, to go to the
 * upstream first. stop() leaves the socket paused and returns those bytes.
 */
function readWhileWaiting(socket: Duplex): { stop(): Buffer[] } {
  const early: Buffer[] = []
  let bytes = 0
  let unprobe: (() => void) | undefined
  const onData = (chunk: Buffer) => {
    early.push(chunk)
    bytes += chunk.length
    if (bytes < EARLY_MAX && early.length < EARLY_READS) return
    socket.pause()
    if (socket instanceof Socket) unprobe ??= probeWhilePaused(socket)
  }
  const onEnd = () => socket.destroy() // a client that ends its half waits for no answer
  socket.on('data', onData)
  socket.once('end', onEnd)
  socket.resume()
  return {
    stop() {
      socket.off('data', onData)
      socket.off('end', onEnd)
      socket.pause()
      unprobe?.()
      return early
    },
  }
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
