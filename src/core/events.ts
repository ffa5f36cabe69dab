import { channel } from 'node:diagnostics_channel'

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

export function emit(which: keyof typeof events, payload: LeaseEvent): void {
  const target = events[which]
  if (target.hasSubscribers) target.publish(payload)
}
