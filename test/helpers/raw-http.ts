// A raw TCP client for edge tests: sends exactly the bytes a test writes (hostile framing included)
// and collects what comes back. Every connection is destroyed after the test.
import net from 'node:net'
import { afterEach } from 'vitest'

const sockets = new Set<net.Socket>()
afterEach(() => {
  for (const socket of sockets) socket.destroy()
  sockets.clear()
})

export interface RawConnection {
  readonly socket: net.Socket
  /** Everything received so far (latin1). */
  received(): string
  write(text: string | Buffer): void
  /** Resolves with everything received once `pattern` matches it; rejects after `timeoutMs`. */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<string>
  /** Resolves once the server closed the connection (with everything received). */
  readonly closed: Promise<string>
}

export function rawConnect(port: number, options: { pauseReading?: boolean } = {}): Promise<RawConnection> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1')
    sockets.add(socket)
    let data = ''
    const waiters: { pattern: RegExp; resolve(text: string): void }[] = []
    if (!options.pauseReading) {
      socket.on('data', (chunk: Buffer) => {
        data += chunk.toString('latin1')
        for (const waiter of [...waiters]) {
          if (waiter.pattern.test(data)) {
            waiters.splice(waiters.indexOf(waiter), 1)
            waiter.resolve(data)
          }
        }
      })
    } else {
      socket.pause()
    }
    socket.on('error', () => {})
    const closed = new Promise<string>((done) => socket.once('close', () => done(data)))
    socket.once('connect', () =>
      resolve({
        socket,
        received: () => data,
        write: (text) => socket.write(text),
        closed,
        waitFor(pattern, timeoutMs = 5000) {
          if (pattern.test(data)) return Promise.resolve(data)
          return new Promise((done, fail) => {
            const timer = setTimeout(
              () => fail(new Error(`no ${pattern} within ${timeoutMs} ms; got:\n${data}`)),
              timeoutMs,
            )
            waiters.push({
              pattern,
              resolve: (text) => {
                clearTimeout(timer)
                done(text)
              },
            })
            void closed.then(() => {
              clearTimeout(timer)
              if (pattern.test(data)) done(data)
              else fail(new Error(`connection closed without ${pattern}; got:\n${data}`))
            })
          })
        },
      }),
    )
    socket.once('error', reject)
  })
}

/** Send `text` on a fresh connection and collect the answer until the server closes it or nothing
 * more comes for `quietMs`. */
export async function rawExchange(port: number, text: string, quietMs = 300): Promise<string> {
  const connection = await rawConnect(port)
  connection.write(text)
  let last = -1
  const deadline = Date.now() + 10_000
  while (Date.now() < deadline) {
    const closed = await Promise.race([connection.closed.then(() => true), sleep(quietMs).then(() => false)])
    if (closed) break
    const now = connection.received().length
    if (now === last && now > 0) break
    last = now
  }
  connection.socket.destroy()
  return connection.received()
}

/** Status codes of every response in a raw HTTP/1.1 stream, in order (a body without a final newline
 * runs straight into the next status line). */
export function statuses(text: string): number[] {
  return [...text.matchAll(/HTTP\/1\.1 (\d{3}) [A-Za-z]/g)].map((m) => Number(m[1]))
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))
