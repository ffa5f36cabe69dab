// What admission says over HTTP, as pure functions (express-rate-limit's and HPM's status shaping):
// the IETF RateLimit headers of a concurrency policy, and the rejection response.
import type { Rejection } from './options.js'

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
): Record<string, string> {
  if (permits === undefined) return {}
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

/** Status, headers (`Retry-After` always) and JSON body of a rejection. */
export function rejectionResponse(name: string, rejection: Rejection, withPolicy: boolean): HttpAnswer {
  const headers: Record<string, string> = {
    'Retry-After': String(rejection.retryAfterS),
    'Content-Type': 'application/json; charset=utf-8',
    ...(withPolicy ? policyHeaders(name, rejection.permits, 0) : {}),
  }
  const body = JSON.stringify({
    error: rejection.reason === 'store_unavailable' ? 'limiter_unavailable' : 'too_many_concurrent_requests',
    reason: rejection.reason,
    retryAfterSeconds: rejection.retryAfterS,
  })
  return { status: rejection.status, headers, body }
}
