// The one contract both request paths serve: what the gateway reads of a client's request and does
// with its response. Node's http.IncomingMessage and http.ServerResponse (the standard path) have all
// of it; so do the lean front end's LeanRequest and LeanResponse (lean/request.ts, lean/response.ts).
// Everything past the front end (plain-request.ts, exchange.ts, the proxy) sees only this, never which
// path it is on.
import type http from 'node:http'
import type { Socket } from 'node:net'

/** What the gateway reads of a request (http.IncomingMessage has all of it). */
export interface ClientRequest {
  readonly method?: string | undefined
  readonly url?: string | undefined
  readonly httpVersion: string
  readonly headers: http.IncomingHttpHeaders
  readonly rawHeaders: string[]
  readonly socket: Socket
  readonly destroyed: boolean
}

export type HeaderList = (string | string[])[]
export type HeaderObject = Record<string, string | number | string[]>

/** What the gateway does with a response (http.ServerResponse has all of it). */
export interface ClientResponse {
  statusCode: number
  readonly headersSent: boolean
  readonly destroyed: boolean
  readonly writableFinished: boolean
  readonly writableLength: number
  readonly writableNeedDrain: boolean
  readonly socket: Socket | null
  writeHead(statusCode: number, headers?: HeaderObject | HeaderList): unknown
  write(chunk: Buffer | string): boolean
  end(chunk?: Buffer | string): unknown
  destroy(): unknown
  setHeader(name: string, value: string): unknown
  writeContinue(): void
  /** Its 'close' comes once (the close contract, close-contract.ts, checks it). */
  on(event: 'close', listener: () => void): unknown
  once(event: 'close' | 'drain' | 'finish' | 'socket', listener: () => void): unknown
  off(event: 'close' | 'drain' | 'finish', listener: () => void): unknown
}

export type RequestHandler = (req: ClientRequest, res: ClientResponse) => void
