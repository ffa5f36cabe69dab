// The window an adaptive limit is measuring: its requests, drops, latencies, clients and the most
// in flight at once; and what it measured, summed up for the controller.
import { ClientDrops } from './clients.js'
import type { WindowSummary } from './controller.js'
import { LatencyHistogram } from './latency.js'

/** The window being measured: the summary's counts, and the clients' drops (clients.ts). */
export interface LiveWindow {
  count: number
  drops: number
  latency: LatencyHistogram
  clients: ClientDrops
  maxInFlight: number
}

/** A window starting now, with `maxInFlight` in flight. */
export function liveWindow(maxInFlight: number): LiveWindow {
  return { count: 0, drops: 0, latency: new LatencyHistogram(), clients: new ClientDrops(), maxInFlight }
}

/** What a window measured, for the controller: the clients as units, and those over `share`. The
 * store adds up the replicas' most in flight at once: more than the fleet had at once when their
 * peaks came at different times, exactly it when a burst came to all at once. An upper bound, so
 * that a limit is never taken below what a burst used (a mean, or a share of each peak, took a
 * fleet's limit down to 9 for bursts of 90 every window: the limit decays only toward what a
 * window used). */
export function summarize(window: LiveWindow, share: number): WindowSummary {
  const { units, over } = window.clients.units(share)
  const { count, drops, latency, maxInFlight } = window
  return { count, drops, latency, clients: units, clientsOver: over, maxInFlight }
}
