// The `tollgate:*` diagnostics channels (lease acquired, renewed, lost, released), and how names and
// bucket keys appear in them and in traces.
import { channel } from 'node:diagnostics_channel'
import { createHash } from 'node:crypto'
import { debuglog } from 'node:util'

/** Payload of every `tollgate:*` diagnostics channel. Never carries tokens. */
export interface LeaseEvent {
  /** The primitive's name as the user gave it. A middleware bucket's is `<policy>:<key>`, and its key
   * is request data (a tenant id, an address, a header value): treat it so if you log it. */
  name: string
  kind: string
  /** acquire: how long the caller waited. */
  waitedMs?: number
  /** acquire: 'shed' when a fair queue turned it away (ShedError). */
  outcome?: 'acquired' | 'timeout' | 'aborted' | 'busy' | 'shed' | 'error'
  error?: Error
}

/** Subscribe with `diagnostics_channel.subscribe('tollgate:lost', fn)` (ioredis does the same). */
export const events = {
  acquire: channel('tollgate:acquire'),
  release: channel('tollgate:release'),
  renew: channel('tollgate:renew'),
  lost: channel('tollgate:lost'),
} as const

/** A name as traces print it: up to its first ':' as given, the rest as a short digest. A middleware
 * bucket is `<policy>:<key>`, and the key is request data (a tenant id, an address, a header). */
export function traceName(name: string): string {
  const colon = name.indexOf(':')
  if (colon === -1) return name
  return `${name.slice(0, colon)}:${keyDigest(name.slice(colon + 1))}`
}

/** A bucket's key as traces carry it: '#' and 8 hex digits of its SHA-256. */
export function keyDigest(key: string): string {
  return `#${createHash('sha256').update(key).digest('hex').slice(0, 8)}`
}

/** `NODE_DEBUG=tollgate*` (or tollgate:acquire, ...) traces every event on stderr, as Node's own
 * modules do; off, each costs one boolean check. */
const traces = {
  acquire: debuglog('tollgate:acquire'),
  release: debuglog('tollgate:release'),
  renew: debuglog('tollgate:renew'),
  lost: debuglog('tollgate:lost'),
} as const

/** Whether anyone listens to or traces `which`: the hot paths check this before building a payload. */
export function observed(which: keyof typeof events): boolean {
  return events[which].hasSubscribers || traces[which].enabled
}

export function emit(which: keyof typeof events, payload: LeaseEvent): void {
  const target = events[which]
  if (target.hasSubscribers) target.publish(payload)
  const trace = traces[which]
  if (trace.enabled) {
    const detail =
      which === 'acquire'
        ? ` ${payload.outcome} after ${payload.waitedMs} ms`
        : payload.error
          ? ` (${payload.error.message})`
          : ''
    trace('%s %s %s%s', which, payload.kind, JSON.stringify(traceName(payload.name)), detail)
  }
}
