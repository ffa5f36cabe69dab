// What admission says over HTTP, as pure functions (express-rate-limit's and HPM's status shaping):
// the IETF RateLimit headers of a concurrency policy, and the rejection response.
import type { RejectionMessage, Rejection, StandardHeaders } from './options.js'

export interface HttpAnswer {
  status: number
  headers: Record<string, string>
  body: string
}

/** `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers) for `left` of `permits`
 * concurrent requests; none for a read/write lock (no permits). */
export function policyHeaders(
  name: string,
  permits: number | undefined,
  left: number,
  draft: StandardHeaders = 'draft-8',
): Record<string, string> {
  if (permits === undefined || draft === false) return {}
  if (draft === 'draft-7') {
    // One unnamed policy; a concurrency cap has no window, and a permit frees when a response ends.
    return { 'RateLimit-Policy': String(permits), RateLimit: `limit=${permits}, remaining=${left}, reset=0` }
  }
  return { 'RateLimit-Policy': policyValue(name, permits), RateLimit: remainingValue(name, left) }
}

/** The `RateLimit-Policy` value: `permits` concurrent requests. */
export function policyValue(name: string, permits: number): string {
  return `"${name}";q=${permits};qu="concurrent-requests"`
}

/** The `RateLimit` value: `left` of them free. */
export function remainingValue(name: string, left: number): string {
  return `"${name}";r=${left}`
}

/** Status, headers (`Retry-After` always) and body of a rejection: JSON by default, or the
 * `message` option's (a string as text/plain, an object as JSON). */
export function rejectionResponse<Req>(
  name: string,
  rejection: Rejection,
  draft: StandardHeaders | boolean,
  message?: { req: Req; option: RejectionMessage<Req> | undefined },
): HttpAnswer {
  const standard = draft === true ? 'draft-8' : draft
  let content: string | Record<string, unknown> = {
    error: rejection.reason === 'store_unavailable' ? 'limiter_unavailable' : 'too_many_concurrent_requests',
    reason: rejection.reason,
    retryAfterSeconds: rejection.retryAfterS,
  }
  if (message?.option !== undefined) {
    const option = message.option
    content = typeof option === 'function' ? option(message.req, rejection) : option
    if (typeof (content as { then?: unknown }).then === 'function')
      throw new TypeError('message() returned a promise: return a string or an object')
  }
  const headers: Record<string, string> = {
    'Retry-After': String(rejection.retryAfterS),
    'Content-Type':
      typeof content === 'string' ? 'text/plain; charset=utf-8' : 'application/json; charset=utf-8',
    ...policyHeaders(name, rejection.permits, 0, standard),
  }
  const body = typeof content === 'string' ? content : JSON.stringify(content)
  return { status: rejection.status, headers, body }
}
