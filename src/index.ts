export {
  AcquireTimeoutError,
  ConfigError,
  LeaseLostError,
  LockUpgradeError,
  type QuorumTally,
  RedlockQuorumError,
  StoreUnavailableError,
  TollgateError,
  type TollgateErrorCode,
} from './core/errors.js'
export { events, type LeaseEvent } from './core/events.js'
export { encodeName } from './core/keys.js'
export type { Lease } from './core/lease.js'
export { createMemoryStore, type MemoryStoreOptions } from './core/memory-store.js'
export type { AcquireOptions } from './core/permits.js'
export { createRedisStore, type RedisStoreOptions } from './core/redis-store.js'
export type { PermitStats, RwMode, Store } from './core/store.js'
export {
  createMutex,
  createReentrantMutex,
  type Mutex,
  type MutexOptions,
  type ReentrantMutexOptions,
} from './primitives/mutex.js'
export type { LockOptions } from './primitives/options.js'
export { createRedlock, type Redlock, type RedlockOptions } from './primitives/redlock.js'
export {
  createReadWriteLock,
  type ReadWriteLock,
  type ReadWriteLockOptions,
  type ReadWriteLockSide,
  type ReadWriteLockStats,
} from './primitives/rwlock.js'
export { createSemaphore, type Semaphore, type SemaphoreOptions } from './primitives/semaphore.js'
