// A request on the lean front end: which heads it serves (isLean(), the rule below) and the request
// object the gateway sees for one (LeanRequest: its head only, with Node's header rules).
//
// The lean path takes a request only when all of this holds, and hands the connection to Node's
// http.Server otherwise (connection.ts):
//   - the whole head is in what has arrived, within http.maxHeaderSize, and Node's own parser (the
//     llhttp binding http.Server uses, with the same strict settings) accepts it, with at most 32
//     header lines (one batch from the parser);
//   - HTTP/1.1, a Host header, no body (no Transfer-Encoding, Content-Length absent or 0), no
//     Expect, no Upgrade, not CONNECT.
import type http from 'node:http'
import type { Socket } from 'node:net'
import type { ClientRequest } from '../client.js'
import type { AddHeaderLine, Head } from './llhttp.js'

/** A head the lean path serves (the rule at the top of this file); anything else is Node's. The
 * parser has checked the rest (the head whole, within http.maxHeaderSize). */
export function isLean(head: Head): boolean {
  if (!head.complete || head.batched || head.upgrade) return false
  // '' is a method number not in http.METHODS (not one http.Server serves either): Node's to answer.
  if (head.major !== 1 || head.minor !== 1 || head.method === 'CONNECT' || head.method === '') return false
  const headers = head.headers as string[]
  let host = false
  for (let i = 0; i < headers.length; i += 2) {
    const name = headers[i] as string
    switch (name.length) {
      case 4:
        if (name.toLowerCase() === 'host') host = true
        break
      case 6:
        if (name.toLowerCase() === 'expect') return false
        break
      case 7:
        if (name.toLowerCase() === 'upgrade') return false
        break
      case 14:
        if (name.toLowerCase() === 'content-length' && (headers[i + 1] as string).trim() !== '0') return false
        break
      case 17:
        if (name.toLowerCase() === 'transfer-encoding') return false
        break
    }
  }
  return host
}

/** `this` for IncomingMessage's _addHeaderLine: http.Server's default (joinDuplicateHeaders off). */
const NODE_DEFAULTS = Object.freeze({ joinDuplicateHeaders: false })

/** A request the lean path serves: its head only (it has no body by construction). */
export class LeanRequest implements ClientRequest {
  readonly httpVersion = '1.1'
  readonly httpVersionMajor = 1
  readonly httpVersionMinor = 1
  readonly headers: http.IncomingHttpHeaders = {}

  constructor(
    readonly method: string,
    readonly url: string,
    readonly rawHeaders: string[],
    readonly socket: Socket,
    addHeaderLine: AddHeaderLine,
  ) {
    const headers = this.headers as Record<string, unknown>
    for (let i = 0; i < rawHeaders.length; i += 2)
      addHeaderLine.call(NODE_DEFAULTS, rawHeaders[i] as string, rawHeaders[i + 1] as string, headers)
  }

  get destroyed(): boolean {
    return this.socket.destroyed
  }
}
