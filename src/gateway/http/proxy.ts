// The one module that talks to upstreams: undici's Pool.dispatch() (Node's own HTTP client, by the
// Node.js core team), chosen by measurement (docs/gateway/internals.md, "Proxy core"): no IncomingMessage or
// ClientRequest per request, keep-alive pools, and request bodies framed by undici itself (it sends
// Content-Length or chunked and refuses Transfer-Encoding, Upgrade or Expect given as headers), so
// no client framing can reach the upstream as a second request (G13). Bodiless requests to http://
// upstreams take the lean pool instead (lean/upstream-pool.ts: the same handler API and rules, no body
// to frame; docs/gateway/internals.md, "Lean paths"). Which headers are sent is
// decided by the caller (headers.ts); this module moves bytes, enforces the upstream and send
// timeouts, and maps failures to 502/504 (or a cut connection once the response has started).
import http from 'node:http'
import { Pool } from 'undici'
import type { Dispatcher } from 'undici'
import type { ClientResponse } from './client.js'
import { clientResponseHeaderList } from './headers.js'
import { boundSend } from './send-bound.js'
import { responseBinding } from './lean/llhttp.js'
import { LeanPool } from './lean/upstream-pool.js'
import { forwardUpgrade } from './tunnel.js'
import {
  ClientGone,
  classify,
  dispatchOptions,
  type Outgoing,
  type Proxy,
  type WebOptions,
} from './upstream.js'

export type {
  Forwarded,
  Outgoing,
  Proxy,
  UpstreamError,
  UpstreamErrorKind,
  WebOptions,
  WsOptions,
} from './upstream.js'

/** Per-origin keep-alive pools; requests beyond `connections` queue in the pool (holding their permit).
 * Bodiless requests to an http:// upstream go on the lean pool (lean/upstream-pool.ts) unless `lean` is
 * false; everything else through undici. */
export function createProxy(options: { connections?: number; lean?: boolean } = {}): Proxy {
  const connections = options.connections ?? 1024
  const pools = new PoolsByOrigin(
    (target) =>
      new Pool(target.origin, {
        connections,
        pipelining: 1,
        keepAliveTimeout: 4000,
        connect: { timeout: 10_000 },
      }),
  )
  const binding = options.lean === false ? null : responseBinding()
  const leanPools =
    binding &&
    new PoolsByOrigin((target) => {
      const host = target.hostname.startsWith('[') ? target.hostname.slice(1, -1) : target.hostname
      const settings = { connections, keepAliveTimeoutMs: 4000, connectTimeoutMs: 10_000 }
      return new LeanPool(host, Number(target.port || 80), settings, binding)
    })
  const leanPoolFor = (target: URL): LeanPool | undefined =>
    leanPools && target.protocol === 'http:' ? leanPools.get(target) : undefined

  return {
    web(target, res, request, opts) {
      const lean = request.body === null ? leanPoolFor(target) : undefined
      return forwardWeb(lean ?? pools.get(target), res, request, opts)
    },
    ws(target, socket, head, request, opts) {
      forwardUpgrade(pools.get(target), socket, head, request, opts)
    },
    openSockets() {
      let count = 0
      for (const pool of pools.all()) count += pool.stats.connected
      for (const pool of leanPools?.all() ?? []) count += pool.connected
      return count
    },
    async close() {
      await Promise.allSettled([
        ...[...pools.all()].map((pool) => pool.close()),
        ...[...(leanPools?.all() ?? [])].map((pool) => pool.close()),
      ])
      pools.clear()
      leanPools?.clear()
    },
  }
}

/** One pool per origin (undici's, or the lean one), found by URL object too: URL#origin builds a new
 * string on every read. */
class PoolsByOrigin<P> {
  private readonly byOrigin = new Map<string, P>()
  private byTarget = new WeakMap<URL, P>()

  constructor(private readonly create: (target: URL) => P) {}

  get(target: URL): P {
    const known = this.byTarget.get(target)
    if (known) return known
    let pool = this.byOrigin.get(target.origin)
    if (!pool) {
      pool = this.create(target)
      this.byOrigin.set(target.origin, pool)
    }
    this.byTarget.set(target, pool)
    return pool
  }

  all(): IterableIterator<P> {
    return this.byOrigin.values()
  }

  clear(): void {
    this.byOrigin.clear()
    this.byTarget = new WeakMap()
  }
}

/**
 * One forwarded request: undici's handler (its methods, not closures per request) and the client
 * response it writes to. Listeners on the response are added only when needed: 'drain' under
 * backpressure, 'finish' once a send timer runs; its close comes from the caller (clientClosed()).
 * How the upstream request ended (finished, failed) or was given up (aborted) goes through the
 * request's close contract (close-contract.ts) first: once, whichever client (undici, lean) serves it.
 */
class WebForward implements Dispatcher.DispatchHandler {
  private controller: Dispatcher.DispatchController | undefined
  private head: { statusCode: number; out: (string | string[])[] } | undefined
  private sendTimer: NodeJS.Timeout | undefined
  private draining = false
  /** performance.now() when the upstream was last held back for the client (0: it is not now). */
  private heldSince = 0
  /** How long the upstream was held back for the client: from each pause to the client's drain, ms. */
  private heldMs = 0

  constructor(
    private readonly res: ClientResponse,
    private readonly opts: WebOptions,
  ) {}

  heldSoFar(): number {
    return this.heldMs + (this.heldSince === 0 ? 0 : performance.now() - this.heldSince)
  }

  /** The client response closed: the upstream request goes too unless it has ended (or the response
   * was complete). Not started yet (undici's, waiting for a connection), it goes when it starts. */
  clientClosed(): void {
    this.moving()
    if (!this.res.writableFinished && this.opts.contract.upstreamEnd === undefined) this.abort()
  }

  /** Give the upstream request up (the client left): told once, through the contract. */
  private abort(): void {
    const controller = this.controller
    if (controller && this.opts.contract.upstream('aborted'))
      controller.abort(new ClientGone('client closed'))
  }

  private readonly onDrain = (): void => {
    this.draining = false
    this.unheld()
    this.moving()
    if (this.controller?.paused) this.controller.resume()
  }

  private readonly onFinish = (): void => this.moving()

  /** Nothing of the response was taken by the client for sendTimeoutMs: let it go. */
  private stall(): void {
    if (this.sendTimer) return
    const res = this.res
    this.sendTimer = setTimeout(() => res.destroy(), this.opts.sendTimeoutMs)
    res.once('finish', this.onFinish)
  }

  private moving(): void {
    if (!this.sendTimer) return
    clearTimeout(this.sendTimer)
    this.sendTimer = undefined
    this.res.off('finish', this.onFinish)
  }

  private flushHead(): void {
    const head = this.head
    if (!head) return
    this.res.writeHead(head.statusCode, head.out)
    this.head = undefined
  }

  /** The upstream's response ended (its last byte, or it failed; once, by the contract). */
  private upstreamEnded(): void {
    this.unheld()
    this.opts.onUpstreamEnd?.(this.heldMs)
  }

  /** The client took the bytes held (its drain), or the upstream ended: a hold ends here. */
  private unheld(): void {
    if (this.heldSince === 0) return
    this.heldMs += performance.now() - this.heldSince
    this.heldSince = 0
  }

  fail(error: Error): void {
    // ClientGone: the client's answer to the gateway's own abort, the request's end already.
    if (error instanceof ClientGone) return
    if (!this.opts.contract.upstream('failed')) {
      // After 'finished', what failed is our own end of the response (undici reports a throw of
      // onResponseEnd as an error): cut it, so it never hangs holding its permit.
      if (this.opts.contract.upstreamEnd === 'finished' && !this.res.writableFinished) this.res.destroy()
      return
    }
    const { res, opts } = this
    const clientStatus = opts.clientError?.(error)
    if (clientStatus !== undefined) {
      if (!res.headersSent && !res.destroyed) {
        res.writeHead(clientStatus, { 'content-type': 'text/plain; charset=utf-8', connection: 'close' })
        res.end(`${http.STATUS_CODES[clientStatus] ?? 'error'}\n`)
        boundSend(res, opts.sendTimeoutMs)
      } else res.destroy()
      return
    }
    const failure = classify(error)
    let answered = false
    if (!res.headersSent && !res.destroyed) {
      const body = failure.status === 504 ? 'upstream timed out\n' : 'upstream unavailable\n'
      res.writeHead(failure.status, {
        ...opts.defaultHeaders,
        'content-type': 'text/plain; charset=utf-8',
        'content-length': Buffer.byteLength(body),
      })
      res.end(body)
      boundSend(res, opts.sendTimeoutMs)
      answered = true
    } else {
      res.destroy()
    }
    opts.onError({ ...failure, answered })
    this.upstreamEnded()
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller
    if (this.res.destroyed && this.opts.contract.upstreamEnd === undefined) this.abort()
  }

  onResponseStart(
    _controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: Record<string, string | string[] | undefined>,
  ): void {
    if (statusCode < 200) return // 1xx informational: not relayed (103 would need writeEarlyHints)
    const opts = this.opts
    opts.onResponse?.(statusCode)
    const out = clientResponseHeaderList(headers, opts.defaultHeaders, opts.extraHeaders?.())
    // Written with the first body bytes or the end: an upstream that breaks before that (a 204
    // with a body, a reset) still gets the client a 502 instead of a cut connection.
    this.head = { statusCode, out }
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    this.flushHead()
    if (!this.res.write(chunk)) {
      controller.pause()
      // Held back until the client's drain: the client's time, not the upstream's. Not until the
      // upstream's next byte: how long the upstream then takes to make it is the upstream's (a write
      // of 16 KB or more says false even to a client that takes it at once).
      if (this.heldSince === 0) this.heldSince = performance.now()
      if (!this.draining) {
        this.draining = true
        this.res.once('drain', this.onDrain)
      }
      this.stall()
    }
  }

  onResponseEnd(): void {
    if (!this.opts.contract.upstream('finished')) return
    this.upstreamEnded()
    this.flushHead()
    const res = this.res
    res.end()
    // Everything is written, but a client that does not read keeps it buffered: bounded too.
    if (res.writableLength > 0 || res.writableNeedDrain) this.stall()
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    this.fail(error)
  }
}

function forwardWeb(
  pool: Pool | LeanPool,
  res: ClientResponse,
  request: Outgoing,
  opts: WebOptions,
): WebForward {
  const forward = new WebForward(res, opts)
  try {
    if (pool instanceof LeanPool) pool.dispatch(request, opts.timeoutMs, forward)
    else pool.dispatch(dispatchOptions(request, opts.timeoutMs), forward)
  } catch (error) {
    forward.fail(error as Error)
  }
  return forward
}
