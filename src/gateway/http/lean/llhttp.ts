// Node's llhttp binding (_http_common.HTTPParser, the parser http.Server and http.ClientRequest drive),
// checked once on known bytes since it is not a public API, and the request parser of one lean
// connection built on it. The lean front end parses requests with it, the lean upstream pool responses.
import http from 'node:http'

/** Node's llhttp binding as http.Server and http.ClientRequest drive it (lib/_http_common.js,
 * lib/_http_server.js, lib/_http_client.js); upstream-socket.ts uses it in response mode. */
export interface Parser {
  initialize(type: number, resource: object, maxHeaderSize: number, lenient: number): void
  execute(data: Buffer): number | Error
  /** The end of the input: a response without a length ends here. */
  finish(): number | Error | undefined
  close(): void
  [callback: number]: unknown
}
interface ParserClass {
  new (): Parser
  REQUEST: number
  RESPONSE: number
  kOnMessageBegin: number
  kOnHeaders: number
  kOnHeadersComplete: number
  kOnBody: number
  kOnMessageComplete: number
}
interface HttpCommon {
  HTTPParser: ParserClass
}

/** Node's header rules (duplicates joined, dropped or listed as IncomingMessage does). */
export type AddHeaderLine = (
  this: object,
  field: string,
  value: string,
  dest: Record<string, unknown>,
) => void

/** One parsed head, as the parser's callbacks gave it. */
export interface Head {
  major: number
  minor: number
  headers: string[] | undefined
  method: string
  url: string
  upgrade: boolean
  keepAlive: boolean
  complete: boolean
  /** The parser sent headers in batches (more than 32 lines): left to Node. */
  batched: boolean
}

export interface Binding {
  Parser: ParserClass
  /** Method names by llhttp's method number (Node's allMethods, which _http_common does not export:
   * its `methods` is another list, not indexed by that number). Unknown numbers: not lean. */
  methods: string[]
  addHeaderLine: AddHeaderLine
}

let binding: Binding | null | undefined

/** Node's parser and header rules, or null when this Node does not have them as expected (then every
 * connection goes to http.Server, as before the lean path existed). */
export function nodeBinding(): Binding | null {
  if (binding !== undefined) return binding
  binding = null
  try {
    const common = process.getBuiltinModule('_http_common') as HttpCommon | undefined
    const addHeaderLine = (http.IncomingMessage.prototype as unknown as { _addHeaderLine?: AddHeaderLine })
      ._addHeaderLine
    if (!common?.HTTPParser || typeof addHeaderLine !== 'function') return null
    const candidate = { Parser: common.HTTPParser, methods: methodNumbers(common.HTTPParser), addHeaderLine }
    // The binding's callback arguments are not a public API: check them on a known head.
    const probe = new LeanParser(candidate)
    const head = probe.parse(Buffer.from('GET /a?b HTTP/1.1\r\nHost: x\r\nX-Y: 1\r\n\r\n'))
    probe.close()
    const ok =
      head !== undefined &&
      head.complete &&
      head.method === 'GET' &&
      head.url === '/a?b' &&
      head.major === 1 &&
      head.minor === 1 &&
      head.keepAlive &&
      !head.upgrade &&
      head.headers?.join('|') === 'Host|x|X-Y|1'
    if (ok) binding = candidate
  } catch {
    binding = null
  }
  return binding
}

/** llhttp's number of every method http.Server accepts (http.METHODS), read off the parser itself. */
function methodNumbers(Parser: ParserClass): string[] {
  const names: string[] = []
  const parser = new Parser()
  let number = -1
  parser.initialize(Parser.REQUEST, {}, 0, 0)
  parser[Parser.kOnHeadersComplete] = (_major: number, _minor: number, _headers: unknown, method: number) => {
    number = method
    return 0
  }
  try {
    for (const name of http.METHODS) {
      if (name === 'CONNECT') continue // an authority target, and never lean
      number = -1
      parser.initialize(Parser.REQUEST, {}, 0, 0)
      const used = parser.execute(Buffer.from(`${name} / HTTP/1.1\r\nHost: x\r\n\r\n`))
      if (typeof used === 'number' && number >= 0) names[number] = name
    }
  } finally {
    parser.close()
  }
  return names
}

let usable: boolean | undefined

/** Node's parser in response mode, checked once on a known response (the binding is not public). */
export function responseBinding(): Binding | null {
  const b = nodeBinding()
  if (!b) return null
  if (usable === undefined) {
    usable = false
    try {
      const parser = new b.Parser()
      parser.initialize(b.Parser.RESPONSE, {}, 0, 0)
      let seen = ''
      parser[b.Parser.kOnHeadersComplete] = (
        _major: number,
        _minor: number,
        raw: string[],
        _method: unknown,
        _url: unknown,
        status: number,
        _message: unknown,
        _upgrade: boolean,
        keepAlive: boolean,
      ) => {
        seen += `${status} ${raw.join('|')} ${keepAlive} `
        return 0
      }
      parser[b.Parser.kOnBody] = (chunk: Buffer) => (seen += chunk.toString('latin1'))
      parser[b.Parser.kOnMessageComplete] = () => (seen += ' end')
      parser.execute(Buffer.from('HTTP/1.1 201 Created\r\nContent-Length: 2\r\nX-A: b\r\n\r\nok'))
      usable = seen === '201 Content-Length|2|X-A|b true ok end'
      parser.close()
    } catch {
      usable = false
    }
  }
  return usable ? b : null
}

let live = 0

/** Request parsers not closed yet (tests: none is left behind by a closed connection). */
export function liveParsers(): number {
  return live
}

/** A request parser of one connection: the exact bytes of one head in, what it says out. */
export class LeanParser {
  private readonly parser: Parser
  private head: Head | undefined
  private batched = false

  constructor(private readonly b: Binding) {
    const parser = (this.parser = new b.Parser())
    live++
    // As http.Server: a request parser, its default header size limit (0), no leniency flags.
    parser.initialize(b.Parser.REQUEST, {}, 0, 0)
    parser[b.Parser.kOnHeaders] = () => {
      if (this.head) this.head.batched = true
      else this.batched = true
    }
    parser[b.Parser.kOnHeadersComplete] = (
      major: number,
      minor: number,
      headers: string[] | undefined,
      method: number,
      url: string,
      _status: unknown,
      _message: unknown,
      upgrade: boolean,
      keepAlive: boolean,
    ) => {
      this.head = {
        major,
        minor,
        headers,
        method: b.methods[method] ?? '',
        url,
        upgrade,
        keepAlive,
        complete: false,
        batched: this.batched || headers === undefined,
      }
      return 0
    }
    parser[b.Parser.kOnBody] = () => {
      if (this.head) this.head.complete = false
    }
    parser[b.Parser.kOnMessageComplete] = () => {
      if (this.head) this.head.complete = true
    }
  }

  /** Free the binding's parser (as http.Server does, a turn later: never from inside its own
   * callbacks). Without this every connection would keep its native parser alive. */
  close(): void {
    const parser = this.parser
    setImmediate(() => {
      parser.close()
      live--
    })
  }

  /** The head in `bytes` (exactly one head), or undefined when the parser refused it or wants more. */
  parse(bytes: Buffer): Head | undefined {
    this.head = undefined
    this.batched = false
    const used = this.parser.execute(bytes)
    const head = this.head
    this.head = undefined
    if (typeof used !== 'number' || used !== bytes.length) return undefined
    return head
  }
}
