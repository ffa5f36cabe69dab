// Upgrade requests through the proxy core: undici sends the upgrade; a 101 becomes a two-way tunnel
// (bounded: an idle tunnel, or one whose peer ended its half, is closed), anything else is relayed as
// an ordinary response with back-pressure and the send bound. Part of proxy.ts (its only other user
// of the undici types).
import http from 'node:http'
import type { Duplex } from 'node:stream'
import type { Dispatcher, Pool } from 'undici'
import { clientResponseHeaderList } from './headers.js'
import { ClientGone, classify, dispatchOptions, type Outgoing, type WsOptions } from './upstream.js'

export function forwardUpgrade(
  pool: Pool,
  socket: Duplex,
  head: Buffer,
  request: Outgoing & { upgrade: string },
  opts: WsOptions,
): void {
  let written = false
  let reported = false
  let controller: Dispatcher.DispatchController | undefined
  let sendTimer: NodeJS.Timeout | undefined
  const stall = () => {
    sendTimer ??= setTimeout(() => socket.destroy(), opts.sendTimeoutMs)
  }
  const moving = () => {
    clearTimeout(sendTimer)
    sendTimer = undefined
  }
  socket.once('close', () => {
    moving()
    if (controller && !controller.aborted) controller.abort(new ClientGone('client closed'))
  })
  const fail = (error: Error) => {
    if (reported || error instanceof ClientGone) return
    reported = true
    const failure = classify(error)
    if (!written && !socket.destroyed) {
      written = true
      socket.end(rawHead(failure.status, ['content-length', '0']), () => socket.destroy())
      opts.onAnswer?.(failure.status)
    } else socket.destroy()
    opts.onError({ ...failure, answered: !written })
  }
  try {
    pool.dispatch(
      { ...dispatchOptions(request, opts.handshakeTimeoutMs), upgrade: request.upgrade },
      {
        onRequestStart(ctl) {
          controller = ctl
          if (socket.destroyed) ctl.abort(new ClientGone('client closed'))
        },
        onRequestUpgrade(_ctl, statusCode, headers, upstream) {
          written = true
          if (socket.destroyed) {
            upstream.destroy()
            return
          }
          const out = clientResponseHeaderList(headers, undefined, {
            connection: 'Upgrade',
            upgrade: request.upgrade,
          })
          socket.write(rawHead(statusCode, out))
          opts.onAnswer?.(statusCode)
          if (head.length > 0) upstream.write(head)
          tunnel(socket, upstream, opts.idleTimeoutMs)
        },
        // The upstream refused the upgrade with an ordinary response: relay it (with back-pressure and
        // the send bound, like any response), then close.
        onResponseStart(_ctl, statusCode, headers) {
          if (statusCode < 200) return
          written = true
          socket.write(
            rawHead(statusCode, clientResponseHeaderList(headers, undefined, { connection: 'close' })),
          )
          opts.onAnswer?.(statusCode)
        },
        onResponseData(ctl, chunk) {
          if (!socket.write(chunk)) {
            ctl.pause()
            stall()
            socket.once('drain', () => {
              moving()
              ctl.resume()
            })
          }
        },
        onResponseEnd() {
          socket.end(() => socket.destroy())
          stall()
        },
        onResponseError(_ctl, error) {
          fail(error)
        },
      },
    )
  } catch (error) {
    fail(error as Error)
  }
}

/** Pipe two sockets both ways. Either side ending ends the other, which gets a moment to follow before
 * both are destroyed (a silent half-open peer holds nothing); no byte for idleMs closes both. */
function tunnel(client: Duplex, upstream: Duplex, idleMs: number): void {
  const GRACE_MS = 1000
  upstream.on('error', () => {})
  const destroyBoth = () => {
    client.destroy()
    upstream.destroy()
  }
  const ended = (other: Duplex) => () => {
    other.end()
    setTimeout(destroyBoth, GRACE_MS).unref()
  }
  client.pipe(upstream, { end: false })
  upstream.pipe(client, { end: false })
  client.once('end', ended(upstream))
  upstream.once('end', ended(client))
  client.once('close', () => upstream.destroy())
  upstream.once('close', () => client.destroy())
  // A socket's idle timer runs while neither a read nor a write completes on it: the client socket
  // sees both directions.
  const socket = client as Duplex & { setTimeout?(ms: number, fn: () => void): void }
  socket.setTimeout?.(idleMs, destroyBoth)
}

/** A response head from a flat [name, value, ...] list (clientResponseHeaderList()). */
function rawHead(status: number, headers: readonly (string | string[])[]): string {
  let head = `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? ''}\r\n`
  for (let i = 0; i < headers.length; i += 2) {
    const value = headers[i + 1] as string | string[]
    for (const one of Array.isArray(value) ? value : [value]) head += `${headers[i] as string}: ${one}\r\n`
  }
  return `${head}\r\n`
}
