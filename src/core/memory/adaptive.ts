// The fleet's adaptive limits in memory (lua/adaptive-*.lua in one process): the same reports,
// leadership and one step per window, for the memory store. One process is the whole fleet here, so
// it always leads; the contract is the same as on Redis (G11).
import type { KeySpace } from '../keys.js'
import type {
  AdaptiveFamily,
  AdaptiveReport,
  AdaptiveReportReply,
  AdaptiveStep,
  AdaptiveWindow,
} from '../protocol/store.js'
import { nowMs } from './clock.js'

/** A window's reports, merged (C in Redis): the histogram's buckets by index. */
interface Sums {
  requests: number
  drops: number
  latencyUs: number
  maxInFlight: number
  clients: number
  clientsOver: number
  buckets: Map<number, [count: number, sumUs: number]>
  from: Set<string>
}

/** Buckets of a latency histogram (lua/adaptive-report.lua takes 0 to 99, at most 100 a report). */
const BUCKETS = 100

interface Fleet {
  stepped: number
  state: string | undefined
  leader: string | undefined
  leaderUntil: number
  /** Replica -> when it last reported. */
  replicas: Map<string, number>
  /** Window (its start) -> the reports of it, merged, and the replicas whose report is in. */
  windows: Map<number, Sums>
  /** When the state runs out (as S's expiry in Redis). */
  until: number
}

/** A window's sums as the report's reply gives them (its buckets in order). */
function windowOf(sums: Sums | undefined): AdaptiveWindow {
  const buckets = [...(sums?.buckets ?? [])].sort(([a], [b]) => a - b)
  return {
    requests: sums?.requests ?? 0,
    drops: sums?.drops ?? 0,
    latencyUs: sums?.latencyUs ?? 0,
    maxInFlight: sums?.maxInFlight ?? 0,
    clients: sums?.clients ?? 0,
    clientsOver: sums?.clientsOver ?? 0,
    latency: buckets.map(([bucket, [count, sumUs]]) => [bucket, count, sumUs] as const),
  }
}

export class MemoryAdaptive implements AdaptiveFamily {
  private readonly fleets = new Map<string, Fleet>()

  async report(space: KeySpace, r: AdaptiveReport): Promise<AdaptiveReportReply> {
    const now = nowMs()
    const fleet = this.fleet(space, now)
    if (r.leave) {
      fleet.replicas.delete(r.replica)
      if (fleet.leader === r.replica) {
        fleet.leader = undefined
        fleet.leaderUntil = 0
      }
      return {
        now,
        leads: false,
        replicas: fleet.replicas.size,
        stepped: fleet.stepped,
        state: fleet.state,
        previous: undefined,
      }
    }
    if (r.join) {
      fleet.replicas.set(r.replica, now)
      return {
        now,
        leads: false,
        replicas: fleet.replicas.size,
        stepped: fleet.stepped,
        state: fleet.state,
        previous: undefined,
      }
    }
    // A window that is not the one just ended (or running, or the one before): a clock not corrected
    // yet; its sums go nowhere and it does not lead (lua/adaptive-report.lua).
    const current = Math.floor(now / r.windowMs) * r.windowMs
    const timely = r.window >= current - 2 * r.windowMs && r.window <= current
    const sums: Sums = fleet.windows.get(r.window) ?? {
      requests: 0,
      drops: 0,
      latencyUs: 0,
      maxInFlight: 0,
      clients: 0,
      clientsOver: 0,
      buckets: new Map(),
      from: new Set<string>(),
    }
    // One report of a replica counts once (one sent again adds nothing); an empty one counts too, so
    // that an idle replica does not hold the window back from being complete.
    let reporters = 0
    if (timely && !sums.from.has(r.replica)) {
      sums.from.add(r.replica)
      reporters = sums.from.size
      if (r.requests > 0) {
        sums.requests += r.requests
        sums.drops += r.drops
        sums.latencyUs += Math.round(r.latencyUs)
        sums.clients += r.clients
        sums.clientsOver += r.clientsOver
        for (const [bucket, count, sumUs] of r.latency.slice(0, BUCKETS)) {
          if (!(Number.isInteger(bucket) && bucket >= 0 && bucket < BUCKETS && count > 0)) continue
          const sum = sums.buckets.get(bucket) ?? [0, 0]
          sums.buckets.set(bucket, [sum[0] + count, sum[1] + Math.round(sumUs)])
        }
      }
      sums.maxInFlight += r.maxInFlight
      fleet.windows.set(r.window, sums)
    }
    // Windows older than the one before the reported one are done with (C and V expire in Redis).
    for (const window of fleet.windows.keys())
      if (window < r.window - 3 * r.windowMs) fleet.windows.delete(window)
    fleet.replicas.set(r.replica, now)
    for (const [replica, seen] of fleet.replicas)
      if (seen <= now - 3 * r.windowMs) fleet.replicas.delete(replica)
    const leads = timely && (fleet.leader === r.replica || fleet.leaderUntil <= now)
    if (leads) {
      fleet.leader = r.replica
      fleet.leaderUntil = now + r.leaderTtlMs
    }
    fleet.until = now + r.stateTtlMs
    const replicas = fleet.replicas.size
    const reply = { now, leads, replicas, stepped: fleet.stepped, state: fleet.state }
    // This report completed the window (every replica alive reported it): its replica steps it now.
    if (reporters > 0 && reporters >= replicas && fleet.stepped < r.window)
      return { ...reply, previous: undefined, complete: windowOf(sums) }
    const pending = leads && fleet.stepped < r.window - r.windowMs
    const before = pending ? fleet.windows.get(r.window - r.windowMs) : undefined
    return { ...reply, previous: pending ? windowOf(before) : undefined }
  }

  async commit(space: KeySpace, step: AdaptiveStep): Promise<boolean> {
    const now = nowMs()
    const fleet = this.fleet(space, now)
    const current = Math.floor(now / step.windowMs) * step.windowMs
    if (step.window >= current || step.window < current - 3 * step.windowMs) return false
    if (fleet.stepped === step.window && fleet.state === step.state) return true // the same step again
    if (fleet.stepped !== step.based || fleet.stepped >= step.window) return false
    fleet.stepped = step.window
    fleet.state = step.state
    fleet.until = now + step.stateTtlMs
    return true
  }

  /** Forget the fleets whose state ran out (the store's sweep; S expires in Redis). */
  sweep(now: number): void {
    for (const [base, fleet] of this.fleets) if (fleet.until <= now) this.fleets.delete(base)
  }

  private fleet(space: KeySpace, now: number): Fleet {
    let fleet = this.fleets.get(space.base)
    if (fleet && fleet.until <= now) fleet = undefined
    if (!fleet) {
      fleet = {
        stepped: -1,
        state: undefined,
        leader: undefined,
        leaderUntil: 0,
        replicas: new Map(),
        windows: new Map(),
        until: Number.POSITIVE_INFINITY,
      }
      this.fleets.set(space.base, fleet)
    }
    return fleet
  }
}
