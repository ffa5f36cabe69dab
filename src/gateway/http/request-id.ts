// X-Request-Id: the client's when it is a sound one, else a new random id; sent upstream and back to
// the client, and written in the access log.
import { randomFillSync } from 'node:crypto'
import type { ClientRequest } from './client.js'

/** A client's X-Request-Id is kept when it is one printable token of at most 200 characters;
 * anything else (spaces, control characters, a repeated header joined with ", ") is replaced. */
const GOOD_REQUEST_ID = /^[\x21-\x7e]{1,200}$/

export function requestIdOf(req: ClientRequest): string {
  const given = req.headers['x-request-id']
  return typeof given === 'string' && GOOD_REQUEST_ID.test(given) ? given : newRequestId()
}

/** 128 random bits per request in 32 hex digits, as nginx's $request_id, drawn from a pool filled
 * 4 KB at a time: randomUUID()'s string building showed in allocation profiles. Random, not a
 * counter: ids reveal nothing of the instance or its traffic. */
const ID_POOL = Buffer.alloc(4096)
let idOffset = ID_POOL.length

function newRequestId(): string {
  if (idOffset === ID_POOL.length) {
    randomFillSync(ID_POOL)
    idOffset = 0
  }
  idOffset += 16
  return ID_POOL.toString('hex', idOffset - 16, idOffset)
}
