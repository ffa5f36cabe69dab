// What an admission decides on, and what it answers: a request's bucket, the gate that hands out its
// leases (a semaphore, or one side of a read/write lock), and the result of admitting it.
import type { AbortSignalLike } from '../core/abort.js'
import type { Lease } from '../core/client/lease.js'
import type { Rejection, TollgateInfo } from './options.js'

/** The bucket of a request: its key and gate, whether a key function chose it, and the permits the
 * request counts for in it (`weight`, 1 unless a semaphore's `weight` option says otherwise). */
export interface Bucket {
  key: string
  gate: Gate
  keyed: boolean
  weight: number
  /** Its class and flow when the bucket is a fair queue (docs/middleware.md, "Overload"); undefined otherwise. */
  fair?: FairRequest | undefined
}

/** A request's place in a fair queue: its priority class (0-7) and its flow's name (undefined: the
 * default flow). */
export interface FairRequest {
  priority: number
  flow: string | undefined
}

/** Something that hands out leases for one bucket: a semaphore, or one side of a read/write lock. */
export interface Gate {
  /** Permits of the bucket; undefined for a read/write lock (no RateLimit headers then). */
  readonly permits: number | undefined
  acquire(options: {
    signal: AbortSignalLike
    timeoutMs: number
    onQueued: () => boolean | void
    /** Permits the request counts for (a semaphore's; a read/write lock ignores it). */
    weight?: number
    /** A fair queue's class and flow (a semaphore with `overload`; Bucket.fair). */
    priority?: number
    flow?: string | undefined
  }): Promise<Lease>
  tryAcquire(options?: {
    weight?: number
    priority?: number
    flow?: string | undefined
  }): Promise<Lease | undefined>
}

export type AdmitResult =
  | { outcome: 'admitted'; info: TollgateInfo; left: number }
  | { outcome: 'passed'; info: TollgateInfo; left: number }
  | { outcome: 'rejected'; rejection: Rejection }
