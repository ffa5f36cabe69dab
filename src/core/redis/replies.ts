// Script arguments and replies of the Redis store: what lua/*.lua take and return (each script's header
// is the contract), turned into the protocol's types.
import type {
  AcquireReply,
  Acquisition,
  FairPermitStats,
  RecheckReply,
  ReleaseResult,
  RwAcquireReply,
  RwMode,
  WaiterState,
} from '../protocol/store.js'

export const RW_MODES: Record<RwMode, string> = { read: 'r', write: 'w' }

const RELEASE_RESULTS: Record<number, ReleaseResult> = {
  0: 'none',
  1: 'freed',
  2: 'decremented',
  3: 'dequeued',
}

export function releaseResult(code: unknown): ReleaseResult {
  return RELEASE_RESULTS[code as number] ?? 'none'
}

/** Re-check and renew arguments: a token and its acquisition id ('' = the token is its own) each. */
export function acquisitionArgs(acquisitions: readonly Acquisition[]): string[] {
  const args: string[] = []
  for (const { token, op } of acquisitions) args.push(token, op ?? '')
  return args
}

/** The i-th token's row of a (batched) permit-acquire reply: {now, row per token}. */
export function acquireRow(reply: unknown, i: number): AcquireReply {
  const rows = reply as unknown[]
  const row = rows[i + 1] as number[]
  const now = rows[0] as number
  if (row[0] === 1) {
    const [, fence, expiresAt, holders] = row as [number, number, number, number]
    return { granted: true, fence, expiresAt, holders, now }
  }
  const [, position, nextExpiry] = row as [number, number, number]
  // A fair queue's rows: -2 shed (a resend of an evicted token), -3 refused (maxQueued).
  if (position === SHED_ROW) return { granted: false, shed: 'evicted', now }
  if (position === REFUSED_ROW) return { granted: false, shed: 'queue-full', now }
  return { granted: false, position, nextExpiry, now }
}

const SHED_ROW = -2
const REFUSED_ROW = -3

/** Whether a late acquire row holds or queues something that must be given back (a shed or refused
 * row took nothing). */
export function acquireRowTakes(reply: unknown, i: number): boolean {
  const [code, position] = (reply as unknown[])[i + 1] as number[]
  return code === 1 || (position as number) >= 0
}

/** The i-th token's code of a (batched) permit-release reply: {grants, code per token}. */
export function releaseRow(reply: unknown, i: number): ReleaseResult {
  return releaseResult((reply as unknown[])[i + 1])
}

/** rwlock-acquire: {code, a, b, now}. */
export function rwAcquireReply(reply: unknown): RwAcquireReply {
  const [code, a, b, now] = reply as [number, number, number, number]
  if (code === 1) return { granted: true, fence: a, expiresAt: b, now }
  if (code === 0) return { granted: false, position: a, nextExpiry: b, now }
  return { granted: false, refused: code === -1 ? 'upgrade' : 'waiting', now }
}

/** {now, nextExpiry, row per wait} of the re-check scripts. */
export function recheckReply(reply: unknown): RecheckReply {
  const [now, nextExpiry, ...rows] = reply as [number, number, ...number[][]]
  return { now, nextExpiry, states: rows.map(waiterState) }
}

function waiterState(row: number[]): WaiterState {
  if (row[0] === 1) return { state: 'granted', fence: row[1] as number, expiresAt: row[2] as number }
  if (row[0] === 0) return { state: 'queued', position: row[1] as number }
  if (row[0] === SHED_ROW) return { state: 'shed' }
  return { state: 'gone' }
}

/** permit-inspect of a fair queue: the plain five, then n0..n7, parked, x0..x7, saturated bits,
 * mixed, and per flow asked [waiting, held, parked] (lua/permit-inspect.lua). */
export function fairStats(reply: unknown, flows: readonly string[]): FairPermitStats {
  const r = reply as number[]
  const [holders, queued, limit, , adaptive] = r as [number, number, number, number, number]
  const classes: Record<number, number> = {}
  const evicted: Record<number, number> = {}
  for (let p = 0; p < 8; p++) {
    const waiting = r[5 + p] as number
    const shed = r[14 + p] as number
    if (waiting > 0) classes[p] = waiting
    if (shed > 0) evicted[p] = shed
  }
  const bits = r[22] as number
  const saturated: number[] = []
  for (let p = 0; p < 8; p++) if (bits & (1 << p)) saturated.push(p)
  const perFlow: FairPermitStats['flows'] = {}
  flows.forEach((flow, i) => {
    const at = 24 + 3 * i
    perFlow[flow] = { waiting: r[at] as number, held: r[at + 1] as number, parked: r[at + 2] as number }
  })
  return {
    holders,
    queued,
    limit: limit || undefined,
    adaptive: adaptive || undefined,
    classes,
    parked: r[13] as number,
    evicted,
    saturated,
    mixed: r[23] === 1,
    flows: perFlow,
  }
}
