// The fair permit set's client (lua/permit-*.lua): the mutex, the reentrant mutex, the semaphore.
import type { LockSettings } from '../options.js'
import { LockClient } from './lock-client.js'
import type {
  AcquireReply,
  AcquireRequest,
  Acquisition,
  FairCall,
  FairPermitStats,
  PermitStats,
  RecheckReply,
  ReleaseResult,
  RenewReply,
} from '../protocol/store.js'

/** The fair permit set (lua/permit-*.lua): mutex, reentrant mutex and semaphore. */
export class PermitClient extends LockClient {
  private currentPermits: number
  /** A fair queue's call (a semaphore with `overload`), passed on every call of the name; undefined:
   * the calls are exactly those of a plain permit set (no `fair` argument at all). */
  readonly fair: FairCall | undefined

  constructor(settings: LockSettings, permits: number, fair?: FairCall) {
    super(settings)
    this.currentPermits = permits
    this.fair = fair
  }

  permits(): number {
    return this.currentPermits
  }

  /** The permits this client asks for from now on (an adaptive limit's, src/primitives/adaptive/limit.ts). */
  setPermits(permits: number): void {
    this.currentPermits = permits
  }

  protected attempt(acquisition: Acquisition, enqueue: boolean): Promise<AcquireReply> {
    return this.store.permits.acquire(this.space, this.request(acquisition, enqueue))
  }

  protected override attemptNow(acquisition: Acquisition): AcquireReply | undefined {
    return this.store.permits.acquireNow?.(this.space, this.request(acquisition, false))
  }

  private request({ token, op }: Acquisition, enqueue: boolean): AcquireRequest {
    const request: AcquireRequest = {
      token,
      op,
      ttlMs: this.ttlMs,
      permits: this.currentPermits,
      enqueue,
      waiterTtlMs: this.waiterTtlMs,
    }
    if (this.fair) request.fair = this.fair
    return request
  }

  recheckWaits(waits: readonly Acquisition[]): Promise<RecheckReply> {
    const { permits } = this.store
    return this.fair
      ? permits.recheck(this.space, this.currentPermits, this.waiterTtlMs, waits, this.fair)
      : permits.recheck(this.space, this.currentPermits, this.waiterTtlMs, waits)
  }

  renewTokens(ttlMs: number, holds: readonly Acquisition[]): Promise<RenewReply> {
    return this.store.permits.renew(this.space, ttlMs, holds)
  }

  releaseToken(token: string, op?: string): Promise<ReleaseResult> {
    const { permits } = this.store
    return this.fair
      ? permits.release(this.space, token, this.currentPermits, op, this.fair)
      : permits.release(this.space, token, this.currentPermits, op)
  }

  releaseTokenNow(token: string, op?: string): boolean {
    const permits = this.store.permits
    if (!permits.releaseNow) return false
    if (this.fair) permits.releaseNow(this.space, token, this.currentPermits, op, this.fair)
    else permits.releaseNow(this.space, token, this.currentPermits, op)
    return true
  }

  /** Set (undefined: drop) the run-time permits of the name for every process (PermitFamily.setLimit). */
  setLimit(permits: number | undefined): Promise<boolean | void> {
    const family = this.store.permits
    return this.fair
      ? family.setLimit(this.space, permits, this.currentPermits, undefined, this.fair)
      : family.setLimit(this.space, permits, this.currentPermits)
  }

  inspect(): Promise<PermitStats> {
    return this.store.permits.inspect(this.space)
  }

  /** A fair queue's figures; undefined when the store cannot tell them (no inspectFair). */
  inspectFair(flows?: readonly string[]): Promise<FairPermitStats> | undefined {
    const family = this.store.permits
    if (!this.fair || !family.inspectFair) return undefined
    return flows === undefined
      ? family.inspectFair(this.space, this.fair)
      : family.inspectFair(this.space, this.fair, flows)
  }
}
