// Request bodies under the gateway's bounds (G14): a body that stalls (client_body_timeout) or a
// request that is not complete in time fails with ClientBodyTimeout (408), and a buffered body is read
// whole, up to a cap, before a permit is taken.
import type http from 'node:http'

/** A request body that stalled (client_body_timeout) or took too long overall (request timeout). */
export class ClientBodyTimeout extends Error {
  readonly code = 'ERR_TOLLGATE_CLIENT_BODY_TIMEOUT'
}

/**
 * The request body as an async iterable that fails with ClientBodyTimeout when no byte came for
 * `idleMs` (nginx client_body_timeout) or the request is not complete by `deadline` (local ms).
 */
export async function* timedBody(
  req: http.IncomingMessage,
  idleMs: number,
  deadline: number,
  counter: { bytesIn: number },
): AsyncGenerator<Buffer> {
  const iterator = req[Symbol.asyncIterator]() as AsyncIterator<Buffer>
  for (;;) {
    let timer: NodeJS.Timeout | undefined
    const wait = Math.max(0, Math.min(idleMs, deadline - Date.now()))
    const stalled = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new ClientBodyTimeout(
              wait === idleMs
                ? 'no request body byte within the body timeout'
                : 'request not complete within the request timeout',
            ),
          ),
        wait,
      ).unref()
    })
    let next: IteratorResult<Buffer>
    try {
      next = await Promise.race([iterator.next(), stalled])
    } finally {
      // Cleared before the chunk is handed on: while the consumer holds it (back-pressure), no bound
      // runs, and no rejection is left for nobody to catch.
      clearTimeout(timer)
    }
    if (next.done) return
    counter.bytesIn += next.value.length
    yield next.value
  }
}

/** Read a body of at most `maxBytes` into memory (with the same bounds as timedBody). */
export async function bufferBody(
  req: http.IncomingMessage,
  maxBytes: number,
  idleMs: number,
  deadline: number,
  counter: { bytesIn: number },
): Promise<Buffer | 'too_large'> {
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of timedBody(req, idleMs, deadline, counter)) {
    size += chunk.length
    if (size > maxBytes) return 'too_large'
    chunks.push(chunk)
  }
  return Buffer.concat(chunks, size)
}
