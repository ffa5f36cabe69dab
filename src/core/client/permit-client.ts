// The fair permit set's client (lua/permit-*.lua): the mutex, the reentrant mutex, the semaphore.
import type { LockSettings } from '../options.js'
import { LockClient } from './lock-client.js'
import type { AcquireReply, Acquisition, RecheckReply, ReleaseResult, RenewReply } from '../protocol/store.js'

/** The fair permit set (lua/permit-*.lua): mutex, reentrant mutex and semaphore. */
export class PermitClient extends LockClient {
  private currentPermits: number

  constructor(settings: LockSettings, permits: number) {
    super(settings)
    this.currentPermits = permits
  }

  permits(): number {
    return this.currentPermits
  }

  /** The permits this client asks for from now on (an adaptive limit's, src/admission/adaptive.ts). */
  setPermits(permits: number): void {
    this.currentPermits = permits
  }

  protected attempt(acquisition: Acquisition, enqueue: boolean): Promise<AcquireReply> {
    return this.store.permits.acquire(this.space, this.request(acquisition, enqueue))
  }

  protected override attemptNow(acquisition: Acquisition): AcquireReply | undefined {
    return this.store.permits.acquireNow?.(this.space, this.request(acquisition, false))
  }

  private request({ token, op }: Acquisition, enqueue: boolean) {
    return {
      token,
      op,
      ttlMs: this.ttlMs,
      permits: this.currentPermits,
      enqueue,
      waiterTtlMs: this.waiterTtlMs,
    }
  }

  recheckWaits(waits: readonly Acquisition[]): Promise<RecheckReply> {
    return this.store.permits.recheck(this.space, this.currentPermits, this.waiterTtlMs, waits)
  }

  renewTokens(ttlMs: number, holds: readonly Acquisition[]): Promise<RenewReply> {
    return this.store.permits.renew(this.space, ttlMs, holds)
  }

  releaseToken(token: string, op?: string): Promise<ReleaseResult> {
    return this.store.permits.release(this.space, token, this.currentPermits, op)
  }

  releaseTokenNow(token: string, op?: string): boolean {
    const permits = this.store.permits
    if (!permits.releaseNow) return false
    permits.releaseNow(this.space, token, this.currentPermits, op)
    return true
  }
}
