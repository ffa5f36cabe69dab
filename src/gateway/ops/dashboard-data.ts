// What /dashboard/data.json holds: one snapshot a second of every route (dashboard.ts makes it),
// the contract between the gateway and the page (dashboard/*.js).
import type { AdaptiveStatus } from '../../primitives/adaptive/limit.js'
import type { ClassRow, flowState } from './limit-figures.js'

export type { ClassRow } from './limit-figures.js'

export interface Point {
  t: number
  local: number
  fleet: number | null
  queued: number | null
  limit: number | null
}

export interface Change {
  at: number
  route: string
  from: number
  to: number
  by: string
}

/** A resource of a read/write-locked route (its canonical path, or what resourcePattern captured). */
export interface LockRow {
  resource: string
  readers: number | null
  writer: boolean | null
  queued: number | null
}

export interface Snapshot {
  at: number
  /** `boot`: this dashboard's id, new with each process (a pid repeats: 1 in every container). A page
   * whose data comes from another process (a restart, a load balancer) starts its history again. */
  replica: { version: string; pid: number; boot: string }
  store: {
    kind: string
    up: boolean
    /** The fleet's figures were read (false: a read timed out or failed; null: none was made). */
    answering: boolean | null
    downSince: number | null
    outages: number
    lastOutage: { from: number; ms: number | null } | null
    latency: Record<string, { p50Ms: number | null; p99Ms: number | null; count: number }>
  }
  config: {
    loadedAt: number
    lastReload: { at: number; ok: boolean; message: string } | null
    routes: number
  }
  routes: {
    name: string
    limited: boolean
    settable: boolean
    per: string | null
    limit: {
      configured: number | null
      override: number | null
      adaptive: (AdaptiveStatus & { inStore: number | null }) | null
      effective: number
      perBucket: boolean
    } | null
    fleet: { holders: number; queued: number } | null
    local: { inFlight: number; queued: number; kept: number }
    wait: { p50Ms: number | null; p99Ms: number | null; count: number }
    rejected: Record<string, number>
    history: Point[]
    buckets: { bucket: string; holders: number | null; queued: number | null; effective: number | null }[]
    /** A read/write-locked route's busiest resources on this replica, with the fleet's figures of
     * each lock (null where not read): its readers, whether a writer holds it, and its waiters of
     * either mode. Null when the route has no read/write lock. */
    locks: LockRow[] | null
    /** While this replica admits its share of the limit in memory (outage: share; null otherwise):
     * the share, of the configured limit, the replicas it was split between (null: never counted),
     * and the requests admitted here in memory that are still running. */
    outage: { share: number; of: number; replicas: number | null; inMemory: number } | null
    /** A fair route's: by class, highest first. */
    classes?: ClassRow[]
    /** A fair route's busiest flows on this replica (with a `flow` config). */
    flows?: ReturnType<typeof flowState>[]
  }[]
  changes: Change[]
}

/** The body of /dashboard/data.json: the snapshot, with what the asking viewer may see (bucket and flow
 * names only to who may read /limits) and, for a poll that named its newest point, the points after
 * `historySince` only (null: the whole history). */
export type DashboardData = Snapshot & {
  /** How the viewer may act (dashboard.ts Access), and whether it is shown bucket and flow names. */
  access: {
    authorized: boolean
    canWrite: boolean
    tokenRequired: boolean
    note: string
    bucketsShown: boolean
  }
  historySince: number | null
}
