// One side (read or write) of a read/write lock: the shared acquire loop over the store's rw family.
import { LockUpgradeError } from '../errors.js'
import type { LockSettings } from '../options.js'
import { LockClient, newToken } from './lock-client.js'
import type {
  AcquireReply,
  RecheckReply,
  ReleaseResult,
  RenewReply,
  RwMode,
  Acquisition,
} from '../protocol/store.js'

/**
 * One side (read or write) of a read/write lock (lua/rwlock-*.lua): the generic wait loop of
 * LockClient over the store's rw* operations. Both sides of one lock share a name, so they share
 * the process's wait group (one subscription, one batched heartbeat for waiters of either mode).
 * A lease remembers the client that made it, so its renewals and release address its own mode.
 */
export class RwClient extends LockClient {
  constructor(
    settings: LockSettings,
    readonly mode: RwMode,
  ) {
    super({ ...settings, kind: `${settings.kind}-${mode}` })
  }

  protected async attempt({ token, op }: Acquisition, enqueue: boolean): Promise<AcquireReply> {
    const reply = await this.store.rwlock.acquire(this.space, {
      token,
      op: op ?? newToken(),
      mode: this.mode,
      ttlMs: this.ttlMs,
      enqueue,
      waiterTtlMs: this.waiterTtlMs,
    })
    if ('refused' in reply) throw new LockUpgradeError(this.space.name, reply.refused)
    return reply
  }

  recheckWaits(waits: readonly Acquisition[]): Promise<RecheckReply> {
    return this.store.rwlock.recheck(this.space, this.waiterTtlMs, waits)
  }

  renewTokens(ttlMs: number, holds: readonly Acquisition[]): Promise<RenewReply> {
    return this.store.rwlock.renew(this.space, this.mode, ttlMs, holds)
  }

  releaseToken(token: string, op: string = token): Promise<ReleaseResult> {
    return this.store.rwlock.release(this.space, token, this.mode, op)
  }
}
