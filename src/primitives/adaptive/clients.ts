// Whether a window's drops say "overloaded": the decision one client must not make for the fleet.
// A share of all the window's requests would let one client decide: it can send 8 % of the traffic to
// a path the upstream answers 503 (the fleet backs off for everyone), or as many cheap 200s as it
// likes (a real overload's 503s then fall below the share). An upstream that is overloaded drops the
// requests of most clients, so the window backs off when MORE THAN HALF of its clients saw more than
// `dropShare` of their requests dropped: the median client decides, and one client, or a minority of
// clients, cannot move a median.
// - A client is its address (IPv6: its /64, the block one host usually has; the gateway's
//   trusted-proxy rule or the framework's decides the address), or '' where there is none (the
//   library's leases: one client, the window's share as before).
// - A client of few requests says little (1 request: 0 % or 100 %), so clients with fewer than
//   `unitOf(share)` requests in the window are pooled, in an order drawn at random each window, into
//   units of at least that many requests; a client with more is a unit of its own. Without the pool,
//   an upstream shedding 10 % of its requests would go unseen by clients that send one request each.
// - Each replica counts its units and those over the share, and the store adds them up: a histogram
//   of two buckets (over / not over) that sums exactly across the fleet, at O(1) per report.
// - At most MAX_CLIENTS clients are counted per replica and window: a client first seen after that is
//   not counted in the decision (its latency still is).
// What it costs an operator: an overload that drops the requests of fewer than half of the clients
// (one tenant's shard of the upstream, the requests of one region) is no back-off; a window with fewer
// requests than one unit is one unit, so there one client's drops still count as the window's.
import { isIP } from 'node:net'

/** Clients counted per replica and window, at most. */
export const MAX_CLIENTS = 1024

/** The requests a unit holds at least: enough that a unit of an upstream dropping twice `share` of
 * its requests is over the share in most windows (2 / share: 40 at 5 %), 20 to 1000. */
export function unitOf(share: number): number {
  if (!(share > 0)) return 1000
  return Math.min(1000, Math.max(20, Math.ceil(2 / share)))
}

/** The key of a client address: an IPv6 address is its /64; IPv4 (also IPv4-mapped) as it is. */
export function clientKey(address: string | undefined): string {
  if (!address) return ''
  if (address.startsWith('::ffff:') && isIP(address.slice(7)) === 4) return address.slice(7)
  if (isIP(address) !== 6) return address
  const [head = '', tail = ''] = address.split('::')
  const front = head === '' ? [] : head.split(':')
  if (address.includes('::')) {
    const back = tail === '' ? [] : tail.split(':')
    while (front.length < 4 && front.length + back.length < 8) front.push('0')
  }
  return `${front
    .slice(0, 4)
    .map((group) => group.replace(/^0+(?=.)/, '').toLowerCase())
    .join(':')}::/64`
}

/** One window's requests and drops per client, on one replica. */
export class ClientDrops {
  private readonly clients = new Map<string, { requests: number; drops: number }>()

  /** A request of `client` (clientKey()) ended; `drop`: it was a drop. */
  add(client: string, drop: boolean): void {
    let counts = this.clients.get(client)
    if (!counts) {
      if (this.clients.size >= MAX_CLIENTS) return
      counts = { requests: 0, drops: 0 }
      this.clients.set(client, counts)
    }
    counts.requests++
    if (drop) counts.drops++
  }

  /** The window's units and those over `share`. `random`: [0, 1) (the pool's order). */
  units(share: number, random: () => number = Math.random): { units: number; over: number } {
    const size = unitOf(share)
    let units = 0
    let over = 0
    const light: { requests: number; drops: number }[] = []
    for (const counts of this.clients.values()) {
      if (counts.requests >= size) {
        units++
        if (counts.drops / counts.requests > share) over++
      } else light.push(counts)
    }
    // Fisher-Yates: which light clients share a unit is not theirs to choose.
    for (let i = light.length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1))
      const swap = light[i] as (typeof light)[number]
      light[i] = light[j] as (typeof light)[number]
      light[j] = swap
    }
    // Light clients, in that order, fill units of `size` requests; the rest (short of a unit) joins
    // the last one, or is a unit of its own (never left out: a heavy client must not make the light
    // ones' drops disappear).
    const pooled: { requests: number; drops: number }[] = []
    let filling = { requests: 0, drops: 0 }
    for (const counts of light) {
      filling.requests += counts.requests
      filling.drops += counts.drops
      if (filling.requests < size) continue
      pooled.push(filling)
      filling = { requests: 0, drops: 0 }
    }
    const last = pooled.at(-1)
    if (filling.requests > 0 && last) {
      last.requests += filling.requests
      last.drops += filling.drops
    } else if (filling.requests > 0) pooled.push(filling)
    for (const unit of pooled) {
      units++
      if (unit.drops / unit.requests > share) over++
    }
    return { units, over }
  }
}
