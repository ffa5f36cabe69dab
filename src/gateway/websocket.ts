// Upgrade requests (WebSocket): the same target, route and admission as a request; the permits are
// held for the life of the tunnel and released when the client socket closes. Bounded (G14): the
// upstream must answer the handshake within the upstream timeout, a tunnel silent both ways for
// websocketIdleMs is closed, and a side that ends its half ends the tunnel.
import { AbortFlag } from '../core/abort.js'
import http from 'node:http'
import type { Duplex } from 'node:stream'
import type { GatewayContext } from './context.js'
import { admitChain, type ChainResult, newExchange, outgoing, release, routeRequest } from './exchange.js'

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
  if (!routed.ok || !route || ctx.draining) {
    const status = !routed.ok ? 400 : !route ? 404 : 503
    ctx.metrics.refused.inc({ reason: !routed.ok ? routed.reason : !route ? 'no_route' : 'draining' })
    // Destroyed once written: a half-closed socket would keep server.close() waiting forever.
    socket.end(rawResponse(status), () => socket.destroy())
    return
  }
  ctx.active++
  ctx.tunnels.add(socket)
  const exchange = newExchange(ctx, route, req)
  const gone = new AbortFlag()
  // The tunnel's close is the request's (its close contract: http/close-contract.ts).
  socket.once('close', () => {
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
    resolve(admitChain(ctx, routed.facts, exchange, gone, () => socket.destroy())),
  ).then(
    (result) => {
      if (result.outcome === 'gone') return
      if (result.outcome === 'rejected') {
        const { status, retryAfterS } = result.rejection
        socket.end(rawResponse(status, { 'retry-after': String(retryAfterS) }), () => socket.destroy())
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
        },
      )
    },
    (error: unknown) => {
      ctx.logger.error({ err: error }, 'admission failed')
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
