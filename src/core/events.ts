import { channel } from 'node:diagnostics_channel'
import { debuglog } from 'node:util'

/** Payload of every `tollgate:*` diagnostics channel. Never carries tokens or request data. */
export interface LeaseEvent {
  /** The primitive's name as the user gave it. */
  name: string
  kind: string
  /** acquire: how long the caller waited. */
  waitedMs?: number
  outcome?: 'acquired' | 'timeout' | 'aborted' | 'busy' | 'error'
  error?: Error
}

/** Subscribe with `diagnostics_channel.subscribe('tollgate:lost', fn)` (ioredis does the same). */
export const events = {
  acquire: channel('tollgate:acquire'),
  release: channel('tollgate:release'),
  renew: channel('tollgate:renew'),
  lost: channel('tollgate:lost'),
} as const

/** `NODE_DEBUG=tollgate*` (or tollgate:acquire, ...) traces every event on stderr, as Node's own
 * modules do; off, each costs one boolean check. */
const traces = {
  acquire: debuglog('tollgate:acquire'),
  release: debuglog('tollgate:release'),
  renew: debuglog('tollgate:renew'),
  lost: debuglog('tollgate:lost'),
} as const

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
    trace('%s %s %s%s', which, payload.kind, JSON.stringify(payload.name), detail)
  }
}
