// The one module that imports the proxy library (http-proxy-3, API-compatible with http-proxy; see
// docs/gateway.md for why). Everything the gateway needs from a proxy is the small `Proxy` interface
// below, so swapping the library touches this file only.
import http from 'node:http'
import https from 'node:https'
import type { Duplex } from 'node:stream'
import { createProxyServer } from 'http-proxy-3'

export type UpstreamErrorKind = 'refused' | 'unresolved' | 'timeout' | 'reset' | 'other'

export interface UpstreamError {
  kind: UpstreamErrorKind
  /** 502 for refused/unresolved/reset/other, 504 for a timeout. */
  status: 502 | 504
  /** The errno-style code, e.g. ECONNREFUSED. */
  code: string | undefined
  /** False when the response had already started: the client connection was cut instead. */
  answered: boolean
}

export interface WebOptions {
  target: URL
  /** The upstream may stay silent (no response headers, or a stalled body) this long. */
  timeoutMs: number
  /** Called at most once, after the error response was sent (or the client connection cut). */
  onError(error: UpstreamError): void
  /** Called when the upstream's response headers are about to be copied to the client. */
  onResponse?(headers: http.IncomingHttpHeaders): void
}

export type WsOptions = Pick<WebOptions, 'target' | 'onError'>

export interface Proxy {
  /** Forward a request; the response (or a short 502/504) goes to `res`. Never throws. */
  web(req: http.IncomingMessage, res: http.ServerResponse, options: WebOptions): void
  /** Forward an Upgrade request (WebSocket); errors close the socket. Never throws. */
  ws(req: http.IncomingMessage, socket: Duplex, head: Buffer, options: WsOptions): void
  /** Upstream sockets open right now (in use + idle keep-alive), for tests and metrics. */
  openSockets(): number
  /** Close the idle keep-alive sockets to upstreams. */
  close(): void
}

interface Pending {
  options: WebOptions | WsOptions
  timedOut: boolean
  reported: boolean
}

/** One proxy per gateway: keep-alive agents to every upstream, X-Forwarded-* headers added. */
export function createProxy(): Proxy {
  // LIFO keeps a few hot sockets busy and lets the rest time out; maxSockets bounds what one gateway
  // can open to one upstream (requests beyond it queue in the agent, still holding their permit).
  const agentOptions = { keepAlive: true, maxSockets: 1024, maxFreeSockets: 256, scheduling: 'lifo' } as const
  const httpAgent = new http.Agent(agentOptions)
  const httpsAgent = new https.Agent(agentOptions)
  const proxy = createProxyServer({ xfwd: true, ws: true })
  const pending = new WeakMap<http.IncomingMessage, Pending>()

  const report = (req: http.IncomingMessage, target: http.ServerResponse | Duplex, error: unknown) => {
    const state = pending.get(req)
    if (!state || state.reported) return
    state.reported = true
    const code = (error as NodeJS.ErrnoException | undefined)?.code
    const kind: UpstreamErrorKind = state.timedOut
      ? 'timeout'
      : code === 'ECONNREFUSED'
        ? 'refused'
        : code === 'ENOTFOUND' || code === 'EAI_AGAIN'
          ? 'unresolved'
          : code === 'ETIMEDOUT'
            ? 'timeout'
            : code === 'ECONNRESET' || code === 'EPIPE'
              ? 'reset'
              : 'other'
    const status = kind === 'timeout' ? 504 : 502
    let answered = false
    if (target instanceof http.ServerResponse) {
      if (!target.headersSent && !target.destroyed) {
        const body = status === 504 ? 'upstream timed out\n' : 'upstream unavailable\n'
        target.writeHead(status, {
          'content-type': 'text/plain; charset=utf-8',
          'content-length': Buffer.byteLength(body),
        })
        target.end(body)
        answered = true
      } else {
        target.destroy()
      }
    } else if (!target.destroyed) {
      target.end(
        `HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`,
      )
    }
    state.options.onError({ kind, status, code, answered })
  }

  // Always listen: an 'error' without a listener would crash the process.
  proxy.on('error', (error, req, res) => report(req, res, error))
  // Also fires when the request was destroyed because the client left; nothing to report then.
  proxy.on('econnreset', () => {})

  proxy.on('proxyReq', (proxyReq, req, res) => {
    const state = pending.get(req)
    if (!state) return
    proxyReq.on('timeout', () => {
      state.timedOut = true
    })
    // The client left before the response was complete: the upstream request goes too, so its
    // socket is closed rather than left streaming into nowhere (http-proxy 1.x leaks it, #1586).
    res.once('close', () => {
      if (!res.writableFinished) proxyReq.destroy()
    })
  })
  proxy.on('proxyRes', (proxyRes, req, res) => {
    const state = pending.get(req)
    if (state && 'onResponse' in state.options) state.options.onResponse?.(proxyRes.headers)
    // The upstream died or timed out mid-body: cut the client connection so it sees a truncated
    // response instead of waiting forever.
    proxyRes.once('close', () => {
      if (!proxyRes.complete && !res.destroyed) res.destroy()
    })
  })

  const agentFor = (target: URL) => (target.protocol === 'https:' ? httpsAgent : httpAgent)

  return {
    web(req, res, options) {
      pending.set(req, { options, timedOut: false, reported: false })
      proxy.web(
        req,
        res,
        { target: options.target, agent: agentFor(options.target), proxyTimeout: options.timeoutMs },
        (error) => report(req, res, error),
      )
    },
    ws(req, socket, head, options) {
      pending.set(req, { options, timedOut: false, reported: false })
      socket.on('error', () => {})
      // No proxyTimeout: a WebSocket may stay quiet for as long as it likes.
      proxy.ws(req, socket, head, { target: options.target, agent: agentFor(options.target) }, (error) =>
        report(req, socket, error),
      )
    },
    openSockets() {
      let count = 0
      for (const agent of [httpAgent, httpsAgent]) {
        for (const list of [agent.sockets, agent.freeSockets]) {
          for (const sockets of Object.values(list)) count += sockets?.length ?? 0
        }
      }
      return count
    },
    close() {
      httpAgent.destroy()
      httpsAgent.destroy()
      proxy.close()
    },
  }
}
