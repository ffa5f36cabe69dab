// What an adaptive limit (primitives/adaptive/limit.ts) hears of each request an admission admitted:
// one sample when its response ended where the limit measures it, or a lower bound when the client
// left first; never both, never twice.
import type { AdaptiveLimit, AdaptiveStatus, Outcome } from '../primitives/adaptive/limit.js'
import type { TollgateInfo } from './options.js'

/** The adaptive limit of a middleware made with the `adaptive` option. */
export interface AdaptiveControl {
  /** The limit, its estimate, the baseline and latest latency, the gradient, the leadership. */
  status(): AdaptiveStatus
  /** Stop reporting and stepping (the fleet's other processes go on). */
  close(): void
}

/** What of a request's time was its client's, and who the client is (an adaptive limit's sample). */
export interface SampleTiming {
  /** When its body's last byte came (performance.now()), if it had one: the upstream (or the
   * handler) could not answer before, so the sample starts here when that is after admission. */
  bodyEndedAt?: number | undefined
  /** Its body had not all come when the sample was taken. */
  bodyPending?: boolean | undefined
  /** How long the client held the response back (took no more bytes), ms: left out of the sample. */
  heldMs?: number | undefined
  /** The client's address (the drop decision is the median client's: adaptive/clients.ts). */
  client?: string | undefined
}

/** Under an adaptive limit: the request's response ended where the limit measures it (the
 * upstream's last byte, or its failure; the handler's end()), so ended (`outcome`). Its sample is
 * taken now, once, however long the client then takes to read it (`timing`: what of its time was
 * the client's, and who the client is); its permit is held until the admission's release(). */
export function sampleMeasured(
  adaptive: AdaptiveLimit | undefined,
  info: TollgateInfo,
  outcome: Outcome | undefined,
  timing?: SampleTiming,
): void {
  if (info.admittedAt === undefined || info.sampled) return
  info.sampled = true
  const startedAt = Math.max(info.admittedAt, timing?.bodyEndedAt ?? 0)
  adaptive?.sample(startedAt, outcome, timing?.heldMs, timing?.client)
}

/** Under an adaptive limit: the client left before the request's response ended where the limit
 * measures it. Its time so far is a lower bound of its latency (adaptive/limit.ts abandoned()),
 * unless its body had not all come yet (then the upstream may have been waiting for it: nothing is
 * known). Once, as sampleMeasured(). */
export function sampleAbandoned(
  adaptive: AdaptiveLimit | undefined,
  info: TollgateInfo,
  timing?: SampleTiming,
): void {
  if (info.admittedAt === undefined || info.sampled) return
  info.sampled = true
  if (timing?.bodyPending) return
  adaptive?.abandoned(Math.max(info.admittedAt, timing?.bodyEndedAt ?? 0), timing?.heldMs)
}
