// What every part of one gateway shares: its config, routes, metrics, proxy, logger and the
// bookkeeping that shutdown waits on. Built once by server.ts.
import type { Duplex } from 'node:stream'
import type { Logger as PinoLogger } from 'pino'
import type { AccessLine } from './ops/access-log.js'
import type { GatewayConfig } from './config/index.js'
import type { GatewayMetrics } from './ops/metrics.js'
import type { BreachReport } from './http/close-contract.js'
import type { Proxy } from './http/proxy.js'
import type { LiveRoute } from './routes.js'

export interface GatewayContext {
  /** Swapped whole on reload: read it once per request and keep what was read. */
  config: GatewayConfig
  routes: readonly LiveRoute[]
  readonly metrics: GatewayMetrics
  readonly proxy: Proxy
  readonly logger: PinoLogger
  /** Writes one access-log line (as accessJson() has it) straight to the log's batch, or undefined
   * when the logger was given by the caller (then lines go through logger.info). */
  readonly accessLog: ((line: AccessLine) => void) | undefined
  /** True once shutdown began: new requests get Connection: close, new upgrades 503. */
  draining: boolean
  /** Requests and WebSockets not closed yet (shutdown waits for them, then for their releases). */
  active: number
  /** Releases in flight (shutdown awaits them before closing the store). */
  readonly releases: PendingCount
  /** Client sockets of open WebSocket tunnels. */
  readonly tunnels: Set<Duplex>
  /** Where a request's close contract reports a breach (http/close-contract.ts): counted and logged. */
  readonly contractBreach: BreachReport
  /** Called whenever `active` drops, so a drain can notice it reached 0. */
  onSettled(): void
}

/** Promises in flight, counted (a Set of them churned a hash table per request): `settled()`
 * resolves once none is left. */
export class PendingCount {
  private count = 0
  private waiters: (() => void)[] = []
  private readonly done = () => {
    if (--this.count > 0) return
    for (const wake of this.waiters.splice(0)) wake()
  }

  track(promise: Promise<void>): void {
    this.count++
    void promise.then(this.done, this.done)
  }

  get size(): number {
    return this.count
  }

  settled(): Promise<void> {
    if (this.count === 0) return Promise.resolve()
    return new Promise((resolve) => this.waiters.push(resolve))
  }
}
