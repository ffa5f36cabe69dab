// The `tollgate` entry point: the stores, the primitives, the errors and the diagnostics channels.
export {
  AcquireTimeoutError,
  ConfigError,
  LeaseLostError,
  LockUpgradeError,
  type QuorumTally,
  RedlockQuorumError,
  ShedError,
  StoreUnavailableError,
  TollgateError,
  type TollgateErrorCode,
} from './core/errors.js'
export { events, type LeaseEvent } from './core/events.js'
export { encodeName } from './core/keys.js'
export type { Lease } from './core/client/lease.js'
export { createMemoryStore, type MemoryStoreOptions } from './core/memory/store.js'
export type { AcquireOptions } from './core/client/lock-client.js'
export type { AbortSignalLike } from './core/abort.js'
export { createRedisStore, type RedisClient, type RedisStoreOptions } from './core/redis/create.js'
export type { PermitStats, RwMode, Store } from './core/protocol/store.js'
export {
  createMutex,
  createReentrantMutex,
  type Mutex,
  type MutexOptions,
  type ReentrantMutexOptions,
} from './primitives/mutex.js'
export type { LockOptions } from './core/options.js'
export { createRedlock, type Redlock, type RedlockOptions } from './primitives/redlock/index.js'
export {
  createReadWriteLock,
  type ReadWriteLock,
  type ReadWriteLockOptions,
  type ReadWriteLockSide,
  type ReadWriteLockStats,
} from './primitives/rwlock.js'
export {
  createSemaphore,
  type Semaphore,
  type SemaphoreOptions,
  type SemaphoreAcquireOptions,
  type SemaphoreStats,
  type SemaphoreAdaptive,
  type SemaphoreFlowStats,
} from './primitives/semaphore.js'
export type { FairAcquireOptions, OverloadOptions } from './primitives/overload.js'
export type { Priority } from './core/fair.js'
export type { AdaptiveStatus } from './primitives/adaptive/limit.js'
export type { AdaptiveOptions, DropRule } from './primitives/adaptive/options.js'
